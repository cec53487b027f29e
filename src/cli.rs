//! The command line: `serve` (default), `token`, `maintain`, `tenant create|set|list|move|import` (clap).
use crate::auth::{self, MintRequest};
use crate::config::{Config, ConfigError, Sources};
use crate::domain::{ShardUrl, TenantId};
use crate::startup::{Application, StartupError};
use crate::storage::{self, ImportSource, Placement, Storage, StorageError};
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
    Serve,
    /// Print a token signed with the configured HS256 secret.
    Token {
        #[arg(long)]
        tenant: String,
        /// A permission to grant; repeat for several. Default: read and write both files.
        #[arg(long = "permission")]
        permissions: Vec<String>,
        #[arg(long)]
        sub: Option<String>,
        #[arg(long)]
        email: Option<String>,
        #[arg(long)]
        name: Option<String>,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
    },
    /// Pack each repository into one pack now: one tenant, or every tenant.
    Maintain { tenant: Option<String> },
    /// Manage tenants.
    Tenant {
        #[command(subcommand)]
        action: TenantAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum TenantAction {
    /// Create a tenant repository with its first commit.
    Create {
        id: String,
        /// The tenant has an active source-hosting installation.
        #[arg(long)]
        source_hosting: bool,
    },
    /// Change a tenant's settings.
    Set {
        id: String,
        #[arg(long, value_enum)]
        source_hosting: OnOff,
    },
    /// List tenants with their flag, head commit and last change (and where moved ones went).
    List,
    /// Move a tenant from this shard to another, with no lost write (docs/SCALING.md). Run on
    /// the source; safe to run again after any failure.
    Move {
        id: String,
        /// The target shard's base URL (as this host reaches it).
        #[arg(long)]
        to: String,
        /// This shard's base URL as the target reaches it (default: cluster.self_url).
        #[arg(long)]
        from: Option<String>,
        /// A token for the tenant with planfiles.repos.import (default: one signed with the
        /// configured HS256 secret, which both shards must share).
        #[arg(long, env = "PLANFILES_MOVE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// An HAProxy runtime API address (socket path or host:port); repeat for each HAProxy.
        #[arg(long = "haproxy")]
        haproxy: Vec<String>,
        /// The tenant map's name in the HAProxy config (its path there).
        #[arg(long)]
        map: Option<String>,
        /// The map file to rewrite for HAProxy's restarts (default: --map).
        #[arg(long)]
        map_file: Option<PathBuf>,
        /// The target's HAProxy backend (the map's value).
        #[arg(long)]
        backend: Option<String>,
    },
    /// Import a tenant into this shard from another shard's /git/<id>.git, or from a mirror
    /// on this host (`git clone --mirror`), checked with git fsck.
    Import {
        id: String,
        /// A shard's base URL, or a repository's path.
        #[arg(long)]
        from: String,
        /// The commit main must be at.
        #[arg(long)]
        head: Option<String>,
        /// A token with planfiles.repos.import, for a shard URL (default: one signed with the
        /// configured HS256 secret).
        #[arg(long, env = "PLANFILES_MOVE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        #[arg(long)]
        source_hosting: bool,
    },
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
    /// Some tenants were done, others failed (each failure was printed).
    #[error("{0}")]
    Partial(String),
}

impl CliError {
    /// 2 for bad input on the command line (or in a `PLANFILES_*` variable), 1 for everything
    /// else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::TenantId { .. }
            | CliError::Usage(_)
            | CliError::Startup(StartupError::WeakSecret { .. })
            | CliError::Startup(StartupError::Durability(_))
            | CliError::Config(ConfigError::Env { .. }) => 2,
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
            permissions,
            sub,
            email,
            name,
            ttl,
        } => {
            let permissions = if permissions.is_empty() {
                ["jit.integrations.write", "jit.preferences.write"]
                    .map(String::from)
                    .to_vec()
            } else {
                permissions
            };
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
            println!("{}", auth::mint_hs256(&config.auth.secret, &req)?);
            Ok(())
        }
        Command::Tenant { action } => tenant(&config, action),
        Command::Maintain { tenant } => maintain(&config, tenant.as_deref()),
    }
}

fn open_storage(config: &Config) -> Result<Storage, CliError> {
    Ok(crate::startup::open_storage(config)?.0)
}

fn tenant(config: &Config, action: TenantAction) -> Result<(), CliError> {
    let storage = open_storage(config)?;
    match action {
        TenantAction::Create { id, source_hosting } => {
            let id = tenant_id(&id)?;
            let commit = storage.create_tenant(&id, source_hosting)?;
            println!("created {id} at {commit}");
        }
        TenantAction::Set { id, source_hosting } => {
            let id = tenant_id(&id)?;
            storage.set_source_hosting(&id, matches!(source_hosting, OnOff::On))?;
            println!(
                "{id}: source hosting {}",
                if matches!(source_hosting, OnOff::On) {
                    "on"
                } else {
                    "off"
                }
            );
        }
        TenantAction::List => {
            println!(
                "{:<24} {:<15} {:<40} LAST CHANGE",
                "TENANT", "SOURCE HOSTING", "HEAD"
            );
            let mut broken = 0;
            for id in storage.tenant_ids()? {
                let t = match storage.summary(&id) {
                    Ok(t) => t,
                    Err(e) => {
                        broken += 1;
                        eprintln!("planfiles: {id}: {e}");
                        println!("{id:<24} {:<15} {:<40} -", "?", "(unreadable)");
                        continue;
                    }
                };
                let head = t.head.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
                let when = t
                    .last_change
                    .map(|w| humantime::format_rfc3339_seconds(w).to_string())
                    .unwrap_or_else(|| "-".into());
                let flag = if t.source_hosting { "on" } else { "off" };
                let placed = match &t.placement {
                    None => String::new(),
                    Some(Placement::Moving { to, .. }) => format!(" (moving to {to})"),
                    Some(Placement::Moved { to, .. }) => format!(" (moved to {to})"),
                };
                println!("{:<24} {:<15} {:<40} {when}{placed}", t.id, flag, head);
            }
            if broken > 0 {
                return Err(CliError::Partial(format!(
                    "{broken} tenant repositories could not be read"
                )));
            }
        }
        TenantAction::Move {
            id,
            to,
            from,
            token,
            haproxy,
            map,
            map_file,
            backend,
        } => {
            let tenant = tenant_id(&id)?;
            let to = shard_url("--to", &to)?;
            let from = match from {
                Some(f) => shard_url("--from", &f)?,
                None => config
                    .cluster
                    .self_url()
                    .map_err(CliError::Usage)?
                    .ok_or_else(|| {
                        CliError::Usage(
                            "set cluster.self_url or pass --from: the target imports from there"
                                .into(),
                        )
                    })?,
            };
            let token = import_token(config, &tenant, token)?;
            let map_file = map_file.or_else(|| map.clone().map(PathBuf::from));
            let mv = crate::cluster::Move {
                tenant,
                from,
                to,
                token,
                router: crate::cluster::Router {
                    haproxy,
                    map,
                    map_file,
                    backend,
                },
                grace: std::time::Duration::from_secs(config.cluster.moved_grace_secs),
            };
            let report = mv.run(&storage, &mut |line| {
                use std::io::Write;
                println!("{line}");
                let _ = std::io::stdout().flush();
            })?;
            println!(
                "moved {} at {}: writes refused for {} ms (import {} ms){}",
                mv.tenant,
                report.head,
                report.writes_refused.as_millis(),
                report.import_millis,
                match report.archived {
                    Some(p) => format!("; archived to {}", p.display()),
                    None => format!(
                        "; 421 here for {} s, then `planfiles maintain` archives it",
                        config.cluster.moved_grace_secs
                    ),
                }
            );
        }
        TenantAction::Import {
            id,
            from,
            head,
            token,
            source_hosting,
        } => {
            let tenant = tenant_id(&id)?;
            let source = if from.starts_with("http://") || from.starts_with("https://") {
                ImportSource::Shard {
                    url: shard_url("--from", &from)?,
                    token: import_token(config, &tenant, token)?,
                }
            } else {
                ImportSource::Path(PathBuf::from(from))
            };
            let head = match head {
                None => None,
                Some(h) => Some(crate::domain::CommitId(
                    crate::domain::ObjectId::parse(&h)
                        .map_err(|e| CliError::Usage(format!("--head {e}")))?,
                )),
            };
            let done = storage.import_tenant(&tenant, &source, head, source_hosting)?;
            println!(
                "{} {tenant} at {} ({} ms)",
                if done.already {
                    "already here:"
                } else {
                    "imported"
                },
                done.head,
                done.millis
            );
        }
    }
    Ok(())
}

fn shard_url(flag: &str, raw: &str) -> Result<ShardUrl, CliError> {
    ShardUrl::parse(raw).map_err(|e| CliError::Usage(format!("{flag} {raw:?}: {e}")))
}

/// The token a move or import clones with: the one given, else one minted with the HS256
/// secret for the tenant with `planfiles.repos.import`, valid an hour.
fn import_token(
    config: &Config,
    tenant: &TenantId,
    given: Option<String>,
) -> Result<String, CliError> {
    if let Some(token) = given {
        return Ok(token);
    }
    if config.auth.algorithm != crate::config::Algorithm::HS256 {
        return Err(CliError::Usage(
            "pass --token (or PLANFILES_MOVE_TOKEN): the service is configured for another algorithm than HS256, so no token can be signed here".into(),
        ));
    }
    Ok(auth::mint_hs256(
        &config.auth.secret,
        &MintRequest {
            tenant: tenant.clone(),
            permissions: vec!["planfiles.repos.import".into()],
            sub: Some("planfiles-move".into()),
            email: None,
            name: None,
            ttl_secs: 3600,
        },
    )?)
}

fn maintain(config: &Config, only: Option<&str>) -> Result<(), CliError> {
    let storage = open_storage(config)?;
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
    tracing::info!(%addr, data_dir = %config.storage.data_dir.display(), "planfiles listening");
    actix_web::rt::System::new()
        .block_on(async move {
            let events = app.events();
            let server = app.run()?;
            crate::http::stop_on_signals(server.handle(), events);
            server.await
        })
        .map_err(|e| CliError::Io(format!("server: {e}")))?;
    tracing::info!("planfiles stopped");
    Ok(())
}
