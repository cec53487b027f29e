//! The command line: `serve` (default), `token`, `maintain`, `tenant create|set|list|move|import`, `validate`, `webhook`, `signing` (clap; the shard commands are in `cli/shards.rs`).
mod client;
mod shards;
mod validate;
mod webhook;

use crate::auth::{self, MintRequest};
use crate::config::{Config, ConfigError, Sources};
use crate::domain::TenantId;
use crate::startup::{Application, SigningKey, StartupError};
use crate::storage::{self, Placement, Storage, StorageError};
use crate::upkeep::Upkeep;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "planfiles",
    version,
    about = "Git-backed plan files per tenant, over HTTP"
)]
pub struct Cli {
    /// Config file (default: ./config.toml when present, else built-in defaults).
    #[arg(long, global = true, env = "PLANFILES_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (the default).
    #[command(
        long_about = "Run the HTTP service (the default).\n\nIt reads its settings from \
        the built-in defaults, then the config file (--config, PLANFILES_CONFIG, or \
        ./config.toml when present), then these environment variables:\n  \
        PLANFILES_BIND        server.bind (host:port)\n  \
        PLANFILES_DATA_DIR    storage.data_dir\n  \
        PLANFILES_JWT_SECRET  auth.secret (HS256; at least 32 bytes on a public bind)\n  \
        PLANFILES_LOG         log.filter (info, debug, planfiles=debug,...)\n  \
        PLANFILES_LOG_FORMAT  log.format (text or json)\n\n\
        docs/OPERATIONS.md lists every setting."
    )]
    Serve,
    /// Print a token signed with the configured HS256 secret.
    Token {
        /// The tenant the token is for (its tenant_id claim).
        #[arg(long)]
        tenant: String,
        /// A permission to grant; repeat for several. Default: read and write both files.
        #[arg(long = "permission", value_parser = clap::builder::PossibleValuesParser::new(
            auth::PERMISSIONS.map(|(name, what)| clap::builder::PossibleValue::new(name).help(what))
        ))]
        permissions: Vec<String>,
        /// A permission this service does not know, granted as it is (for another service
        /// that reads the same tokens); repeat for several.
        #[arg(long = "custom-permission")]
        custom_permissions: Vec<String>,
        /// The caller's id (the sub claim); the commit author's name when --name is absent.
        #[arg(long)]
        sub: Option<String>,
        /// The commit author's email (the email claim).
        #[arg(long)]
        email: Option<String>,
        /// The commit author's name (the name claim).
        #[arg(long)]
        name: Option<String>,
        /// Lifetime in seconds (the exp claim is now plus this).
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
    },
    /// Pack each repository into one pack now: one tenant, or every tenant.
    Maintain {
        /// The tenant to pack (default: every tenant).
        tenant: Option<String>,
    },
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        action: TenantAction,
    },
    /// Check a plan file as the service would (its YAML rules and the schemas): exit 0 when
    /// valid, 1 with each violation (FILE:LINE:COLUMN: POINTER: MESSAGE), 2 for usage or
    /// schema errors. Usable as a git pre-commit hook or in CI.
    Validate(validate::ValidateArgs),
    /// A tenant's webhook subscriptions, in the data dir.
    Webhook {
        #[command(subcommand)]
        action: webhook::WebhookAction,
    },
    /// The keys that sign the service's commits.
    Signing {
        #[command(subcommand)]
        action: SigningAction,
    },
    #[command(flatten)]
    Client(client::ClientCommand),
}

#[derive(Debug, Subcommand)]
pub enum SigningAction {
    /// Print the lines of a git allowed_signers file that trust this service's keys (the
    /// current one and each of signing.previous_public_keys) for its committer email; then
    /// git -c gpg.ssh.allowedSignersFile=FILE verify-commit checks any commit it made.
    AllowedSigners,
}

#[derive(Debug, Subcommand)]
pub enum TenantAction {
    /// Create a tenant repository with its first commit.
    Create {
        /// The tenant's id: 1-64 letters, digits, '.', '_' and '-', starting with a letter or
        /// a digit, without '..' and not ending in '.git'; no two tenants' ids differ only in
        /// case.
        id: String,
        /// The tenant has an active source-hosting installation.
        #[arg(long)]
        source_hosting: bool,
    },
    /// Change a tenant's settings.
    Set {
        /// The tenant's id.
        id: String,
        /// Whether the tenant has an active source-hosting installation (then a PUT of its
        /// integration file may carry file_sha).
        #[arg(long, value_enum, required_unless_present = "require_approval")]
        source_hosting: Option<OnOff>,
        /// Approvals (by other people than the author) a proposal needs before it applies,
        /// 0 to 10; above 0, main moves only by applying an approved proposal (a PUT, POST
        /// /plans/commits, restore or push to main answers 403 approval_required). 0 turns
        /// it off.
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10))]
        require_approval: Option<u32>,
    },
    /// List tenants with their flag, head commit and last change (and where moved ones went).
    List,
    /// Move a tenant from this shard to another, with no lost write (docs/SCALING.md). Run on
    /// the source; safe to run again after any failure.
    Move(shards::MoveArgs),
    /// Import a tenant into this shard from another shard's /git/<id>.git, or from a
    /// repository on this host, checked with git fsck.
    Import(shards::ImportArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("invalid tenant id {id:?}: {reason}")]
    TenantId { id: String, reason: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Auth(#[from] auth::AuthSetupError),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error(transparent)]
    Move(#[from] crate::cluster::MoveError),
    /// `validate` found the file invalid (each violation was printed).
    #[error("{0} is not valid")]
    Invalid(String),
    /// Some tenants were done, others failed (each failure was printed).
    #[error("{0}")]
    Partial(String),
    /// A client command: its own exit codes (0-5).
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
}

impl CliError {
    /// 2 for bad input on the command line, in a `PLANFILES_*` variable or in the config (a
    /// config that does not read or does not pass its checks), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::TenantId { .. }
            | CliError::Usage(_)
            | CliError::Startup(StartupError::WeakSecret { .. })
            | CliError::Startup(StartupError::Config(_))
            | CliError::Startup(StartupError::Durability(_))
            | CliError::Startup(StartupError::Schemas { .. })
            | CliError::Startup(StartupError::SchemasMissing { .. })
            | CliError::Config(_) => 2,
            CliError::Client(e) => e.exit_code(),
            _ => 1,
        }
    }
}

fn tenant_id(raw: &str) -> Result<TenantId, CliError> {
    TenantId::parse(raw).map_err(|e| CliError::TenantId {
        id: raw.to_owned(),
        reason: e.to_string(),
    })
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    let sources = Sources {
        explicit_file: cli.config.clone(),
        env: Sources::process_env()?,
    };
    let config = Config::load(&sources)?;
    storage::init_git();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(config),
        Command::Token {
            tenant,
            mut permissions,
            custom_permissions,
            sub,
            email,
            name,
            ttl,
        } => {
            if permissions.is_empty() && custom_permissions.is_empty() {
                permissions = ["jit.integrations.write", "jit.preferences.write"]
                    .map(String::from)
                    .to_vec();
            }
            permissions.extend(custom_permissions);
            let req = MintRequest {
                tenant: tenant_id(&tenant)?,
                permissions,
                sub,
                email,
                name,
                ttl_secs: ttl,
            };
            if config.auth.algorithm != crate::config::Algorithm::HS256 {
                return Err(CliError::Usage("planfiles token signs with HS256 only; the service is configured for another algorithm".into()));
            }
            println!("{}", auth::mint_hs256(config.hs256_secret()?, &req)?);
            Ok(())
        }
        Command::Tenant { action } => tenant(&config, action),
        Command::Maintain { tenant } => maintain(&config, tenant.as_deref()),
        Command::Validate(args) => validate::run(&config, args),
        Command::Webhook { action } => webhook::run(&config, action),
        Command::Client(command) => Ok(client::run(command)?),
        Command::Signing {
            action: SigningAction::AllowedSigners,
        } => {
            if !config.signing.enabled {
                return Err(CliError::Usage(
                    "signing.enabled is off: the service signs no commits".into(),
                ));
            }
            let storage = open_storage(&config, SigningKey::ReadIfPresent)?;
            let keys = storage.signing_keys();
            if keys.public_keys().is_empty() {
                return Err(CliError::Usage(format!(
                    "no signing key at {}: `planfiles serve` makes it at its first start",
                    config.signing_key_file().display()
                )));
            }
            print!("{}", keys.allowed_signers(storage.committer_email()));
            Ok(())
        }
    }
}

fn open_storage(config: &Config, key: SigningKey) -> Result<Storage, CliError> {
    let made = !config.storage.data_dir.is_dir();
    let storage = crate::startup::open_storage(config, key)?.0;
    if made {
        eprintln!(
            "planfiles: note: the data dir {} did not exist, so it was made",
            crate::startup::absolute(&config.storage.data_dir).display()
        );
    }
    Ok(storage)
}

fn tenant(config: &Config, action: TenantAction) -> Result<(), CliError> {
    // Only a new tenant's first commit is signed here.
    let key = match action {
        TenantAction::Create { .. } => SigningKey::MakeIfAbsent,
        _ => SigningKey::ReadIfPresent,
    };
    let storage = open_storage(config, key)?;
    match action {
        TenantAction::Create { id, source_hosting } => {
            let id = tenant_id(&id)?;
            let commit = match storage.create_tenant(&id, source_hosting) {
                Err(e @ StorageError::TenantMoved { .. }) => {
                    return Err(CliError::Usage(format!(
                        "{e}; to make it here again on purpose, remove {}",
                        storage.tenants_dir().join(format!("{id}.moved")).display()
                    )))
                }
                other => other?,
            };
            println!("created {id} at {commit}");
        }
        TenantAction::Set {
            id,
            source_hosting,
            require_approval,
        } => {
            let id = tenant_id(&id)?;
            if let Some(on) = source_hosting {
                let on = matches!(on, OnOff::On);
                storage.set_source_hosting(&id, on)?;
                println!("{id}: source hosting {}", if on { "on" } else { "off" });
            }
            if let Some(n) = require_approval {
                storage.set_required_approvals(&id, n)?;
                match n {
                    0 => println!("{id}: approval not required"),
                    n => println!(
                        "{id}: main moves only by applying a proposal with {n} approval{}",
                        if n == 1 { "" } else { "s" }
                    ),
                }
            }
        }
        TenantAction::List => list(&storage)?,
        TenantAction::Move(args) => shards::move_tenant(config, &storage, args)?,
        TenantAction::Import(args) => shards::import_tenant(config, &storage, args)?,
    }
    Ok(())
}

/// `tenant list`: one row per tenant, the id column as wide as the longest id. A reader that
/// stops reading (`| head`) ends the listing quietly.
fn list(storage: &Storage) -> Result<(), CliError> {
    use std::io::Write;
    let ids = storage.tenant_ids()?;
    let w = ids
        .iter()
        .map(|t| t.as_str().len())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut out = std::io::stdout().lock();
    let mut broken = 0;
    let mut rows = vec![format!(
        "{:<w$} {:<15} {:<40} LAST CHANGE",
        "TENANT", "SOURCE HOSTING", "HEAD"
    )];
    for id in ids {
        let t = match storage.summary(&id) {
            Ok(t) => t,
            Err(e) => {
                broken += 1;
                eprintln!("planfiles: {id}: {e}");
                rows.push(format!(
                    "{:<w$} {:<15} {:<40} -",
                    id.as_str(),
                    "?",
                    "(unreadable)"
                ));
                continue;
            }
        };
        let head = t.head.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        let when = t
            .last_change
            .map(crate::domain::timestamp::rfc3339)
            .unwrap_or_else(|| "-".into());
        let flag = if t.source_hosting { "on" } else { "off" };
        let approvals = match t.required_approvals {
            0 => String::new(),
            n => format!(" (requires {n} approval{})", if n == 1 { "" } else { "s" }),
        };
        let placed = match &t.placement {
            None => String::new(),
            Some(Placement::Moving { to, .. }) => format!(" (moving to {to})"),
            Some(Placement::Aborting { to, .. }) => format!(" (aborting its move to {to})"),
            Some(Placement::Moved { to, .. }) => format!(" (moved to {to})"),
        };
        rows.push(format!(
            "{:<w$} {flag:<15} {head:<40} {when}{approvals}{placed}",
            t.id.as_str()
        ));
    }
    for row in rows {
        match writeln!(out, "{row}") {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(CliError::Io(format!("writing the list: {e}"))),
        }
    }
    if broken > 0 {
        return Err(CliError::Partial(format!(
            "{broken} tenant repositories could not be read"
        )));
    }
    Ok(())
}

fn maintain(config: &Config, only: Option<&str>) -> Result<(), CliError> {
    let storage = open_storage(config, SigningKey::ReadIfPresent)?;
    let tenants = match only {
        Some(id) => vec![tenant_id(id)?],
        None => storage.tenant_ids()?,
    };
    let upkeep = Upkeep::new(storage.clone(), 0, crate::metrics::Metrics::new());
    let grace = std::time::Duration::from_secs(config.cluster.moved_grace_secs);
    let mut failed = 0;
    for id in tenants {
        // A tenant that moved away is archived after its grace period, and not repacked.
        match storage.placement(&id) {
            Ok(Some(Placement::Moved { to, .. })) => {
                match storage.archive_if_due(&id, grace) {
                    Ok(Some(into)) => {
                        println!("{id}: moved to {to}; archived to {}", into.display())
                    }
                    Ok(None) => {
                        println!("{id}: moved to {to}; archived once its grace period is over")
                    }
                    Err(e) => {
                        failed += 1;
                        eprintln!("planfiles: {id}: {e}");
                    }
                }
                continue;
            }
            Err(StorageError::TenantMoved { .. }) => continue,
            _ => {}
        }
        // One broken repository does not stop the upkeep of the others.
        let report = match upkeep.run(&id, true) {
            Ok(report) => report,
            Err(e) if only.is_none() => {
                failed += 1;
                eprintln!("planfiles: {id}: {e}");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match report {
            Some(r) => println!(
                "{id}: {} repack, {} objects packed, {} loose and {} packs removed, {} ms",
                r.kind,
                r.objects_packed,
                r.loose_removed,
                r.packs_removed,
                r.duration.as_millis()
            ),
            None => println!("{id}: skipped, another repack is running"),
        }
    }
    if failed > 0 {
        return Err(CliError::Partial(format!(
            "{failed} tenant repositories could not be repacked"
        )));
    }
    Ok(())
}

fn serve(config: Config) -> Result<(), CliError> {
    crate::telemetry::init(&config.log);
    let app = Application::build(&config)?;
    let addr = app.addr().map_err(|e| CliError::Io(e.to_string()))?;
    // Where a person goes first: the console (a bind on every address is reached on loopback).
    let console = format!(
        "http://{}/ui/",
        addr.to_string().replace("0.0.0.0", "127.0.0.1")
    );
    tracing::info!(%addr, %console, data_dir = %config.storage.data_dir.display(), "planfiles listening");
    actix_web::rt::System::new()
        .block_on(async move {
            let events = app.events();
            let server = app.run()?;
            crate::http::stop_on_signals(
                server.handle(),
                events,
                std::time::Duration::from_secs(config.server.drain_secs),
            );
            server.await
        })
        .map_err(|e| CliError::Io(format!("server: {e}")))?;
    tracing::info!("planfiles stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every command says what it is for in `--help`.
    #[test]
    fn every_argument_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (no about)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "planfiles", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:?}");
    }

    /// `serve --help` names the environment variables it reads.
    #[test]
    fn serve_help_names_the_environment_variables() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for name in crate::config::ENV_OVERRIDES
            .iter()
            .chain(["PLANFILES_CONFIG"].iter())
        {
            assert!(
                help.contains(name),
                "{name} missing from serve --help:\n{help}"
            );
        }
    }
}
