//! The `planfiles` binary: parses the command line and hands it to `planfiles::cli`.
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = planfiles::cli::Cli::parse();
    match planfiles::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("planfiles: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
