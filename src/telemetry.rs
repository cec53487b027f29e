//! Logging: one tracing subscriber, text or JSON, filtered by `log.filter` / `PLANFILES_LOG`.
use crate::config::LogConfig;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if config.format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
