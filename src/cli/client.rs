//! The client commands' arguments (`get`, `put`, `edit`, `commit`, `log`, `diff`, `restore`, `watch`, `mirror`), each with an example, handed to `crate::client`.
use crate::client::{self, Client, ClientError, Guard, Output, Parts, WriteOptions};
use crate::domain::PlanFile;
use std::path::PathBuf;
use std::time::Duration;

macro_rules! help {
    ($($example:expr),+) => {
        concat!(
            "Examples:\n", $("  ", $example, "\n",)+
            "\nThe service: --addr or PLANFILES_ADDR (default http://127.0.0.1:8080); the token: \
             --token-file FILE or PLANFILES_TOKEN (planfiles token mints one).\n\
             Exit codes: 0 done, 1 refused by the service (a conflict, a rule), 2 usage, \
             3 token or permission, 4 not found, 5 the service unreachable or failing."
        )
    };
}

/// Which file.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FileArg {
    Integration,
    Configuration,
}

impl From<FileArg> for PlanFile {
    fn from(f: FileArg) -> Self {
        match f {
            FileArg::Integration => PlanFile::Integration,
            FileArg::Configuration => PlanFile::Configuration,
        }
    }
}

/// Where the service is and the token to show it.
#[derive(Debug, clap::Args)]
pub struct Connection {
    /// The service's address.
    #[arg(long, env = "PLANFILES_ADDR", default_value = client::DEFAULT_ADDR)]
    addr: String,
    /// A file holding the token (else PLANFILES_TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl Connection {
    fn client(&self, read_timeout: Duration) -> Result<Client, ClientError> {
        let token = match &self.token_file {
            Some(path) => client::read_token(path)?,
            None => std::env::var("PLANFILES_TOKEN").unwrap_or_default(),
        };
        Client::new(&self.addr, &token, read_timeout)
    }
}

/// A write's options.
#[derive(Debug, clap::Args)]
pub struct Write {
    /// Check everything and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// The commit message's subject.
    #[arg(short, long)]
    message: Option<String>,
}

impl Write {
    fn options(&self) -> WriteOptions {
        WriteOptions {
            dry_run: self.dry_run,
            message: self.message.clone(),
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Print a file's stored YAML text (a client of a running service).
    #[command(after_help = help!("planfiles get integration", "planfiles get configuration --at 3f2a9c1 -o json"))]
    Get {
        /// integration or configuration.
        file: FileArg,
        /// A commit of the history (a unique prefix of 7 or more hex digits will do).
        #[arg(long, value_name = "COMMIT")]
        at: Option<String>,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// Replace a file with the text of PATH (or stdin for -), guarded by the blob id read.
    #[command(after_help = help!("planfiles put integration integrations.yml --if-match 8f3baf2455e9843290646b56b2504e847191e891", "cat configuration.yml | planfiles put configuration - --force -m 'Set by the pipeline'"))]
    Put {
        /// integration or configuration.
        file: FileArg,
        /// The file with the new text, or - for stdin.
        path: String,
        /// The blob id the text was read at (planfiles get -o json shows it): 409/412 if it moved.
        #[arg(
            long,
            value_name = "BLOB",
            required_unless_present = "force",
            conflicts_with = "force"
        )]
        if_match: Option<String>,
        /// Write whatever the file holds now (the configuration file records Forced: true).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        write: Write,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// Edit a file in $VISUAL or $EDITOR: a refusal reopens it with the reasons on top, a
    /// conflict merges your text with the new version; your text is never lost.
    #[command(after_help = help!("EDITOR=nano planfiles edit integration", "planfiles edit configuration -m 'Exclude the fixtures'"))]
    Edit {
        /// integration or configuration.
        file: FileArg,
        #[command(flatten)]
        write: Write,
        #[command(flatten)]
        conn: Connection,
    },
    /// Write one or both files in one commit.
    #[command(after_help = help!("planfiles commit --integration integrations.yml --configuration configuration.yml --force -m 'Both at once'"))]
    Commit {
        /// The integration file's new text.
        #[arg(long, value_name = "PATH", required_unless_present = "configuration")]
        integration: Option<String>,
        /// The configuration file's new text.
        #[arg(long, value_name = "PATH")]
        configuration: Option<String>,
        /// The integration file's blob id as read (tenants with source hosting only).
        #[arg(long, value_name = "BLOB")]
        integration_sha: Option<String>,
        /// The configuration file's blob id as read.
        #[arg(long, value_name = "BLOB")]
        configuration_sha: Option<String>,
        /// Write whatever the files hold now.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        write: Write,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// A file's history, newest first.
    #[command(after_help = help!("planfiles log configuration --limit 5"))]
    Log {
        /// integration or configuration.
        file: FileArg,
        /// How many versions, newest first.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// What changed in a file between two commits (TO: main by default), key by key.
    #[command(after_help = help!("planfiles diff integration 3f2a9c1", "planfiles diff integration 3f2a9c1 8d0e4b7 --text"))]
    Diff {
        /// integration or configuration.
        file: FileArg,
        /// The older commit (a unique prefix of 7 or more hex digits will do).
        from: String,
        /// The newer commit (default: main).
        to: Option<String>,
        /// The line diff of the two texts instead.
        #[arg(long)]
        text: bool,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// Write a file back as it was in a commit of its history (guarded by the version read now).
    #[command(after_help = help!("planfiles restore integration 3f2a9c1 -m 'Back to Monday'"))]
    Restore {
        /// integration or configuration.
        file: FileArg,
        /// The commit to take the file from (a unique prefix of 7 or more hex digits will do).
        commit: String,
        #[command(flatten)]
        write: Write,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// Print each change as it lands, one line each; resumes after a dropped connection.
    #[command(after_help = help!("planfiles watch", "planfiles watch --since 3f2a9c1 -o json"))]
    Watch {
        /// Start after this commit (else from now).
        #[arg(long, value_name = "COMMIT")]
        since: Option<String>,
        /// text for a person, or json (the API's JSON).
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        conn: Connection,
    },
    /// Keep both files in DIR as the service has them (the last good ones while it is down).
    #[command(after_help = help!("planfiles mirror --to /etc/scanner/plans"))]
    Mirror {
        /// The folder to keep the files in (made if missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        #[command(flatten)]
        conn: Connection,
    },
}

/// A read waits this long for the next bytes (a stream's heartbeat comes every 15 s).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(command: ClientCommand) -> Result<(), ClientError> {
    use ClientCommand::*;
    match command {
        Get {
            file,
            at,
            output,
            conn,
        } => client::get(
            &conn.client(READ_TIMEOUT)?,
            file.into(),
            at.as_deref(),
            output,
        ),
        Put {
            file,
            path,
            if_match,
            force: _,
            write,
            output,
            conn,
        } => {
            let c = conn.client(READ_TIMEOUT)?;
            let text = client::read_input(&path)?;
            let guard = if_match.map_or(Guard::Force, Guard::IfMatch);
            client::put(&c, file.into(), &text, &guard, &write.options(), output).map(|_| ())
        }
        Edit { file, write, conn } => {
            let editor = std::env::var("VISUAL")
                .or_else(|_| std::env::var("EDITOR"))
                .unwrap_or_else(|_| "vi".into());
            client::edit(
                &conn.client(READ_TIMEOUT)?,
                file.into(),
                &editor,
                &write.options(),
                Output::Text,
            )
        }
        Commit {
            integration,
            configuration,
            integration_sha,
            configuration_sha,
            force,
            write,
            output,
            conn,
        } => {
            let c = conn.client(READ_TIMEOUT)?;
            let parts = Parts {
                integration: integration
                    .map(|p| client::read_input(&p).map(|t| (t, integration_sha)))
                    .transpose()?,
                configuration: configuration
                    .map(|p| client::read_input(&p).map(|t| (t, configuration_sha)))
                    .transpose()?,
                force,
            };
            client::commit(&c, &parts, &write.options(), output)
        }
        Log {
            file,
            limit,
            output,
            conn,
        } => client::log(&conn.client(READ_TIMEOUT)?, file.into(), limit, output),
        Diff {
            file,
            from,
            to,
            text,
            output,
            conn,
        } => client::diff(
            &conn.client(READ_TIMEOUT)?,
            file.into(),
            &from,
            to.as_deref(),
            text,
            output,
        ),
        Restore {
            file,
            commit,
            write,
            output,
            conn,
        } => client::restore(
            &conn.client(READ_TIMEOUT)?,
            file.into(),
            &commit,
            &write.options(),
            output,
        ),
        Watch {
            since,
            output,
            conn,
        } => client::watch(&conn.client(READ_TIMEOUT)?, since.as_deref(), output),
        Mirror { to, conn } => client::mirror(&conn.client(READ_TIMEOUT)?, &to),
    }
}
