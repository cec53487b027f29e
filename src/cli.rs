//! The command line: `serve` (default), `token`, `maintain`, `tenant create|set|list` (clap).
use crate::auth::{self, MintRequest, Verifier};
use crate::config::{Config, ConfigError, Sources, WatchRefs};
use crate::domain::{Identity, TenantId};
use crate::http::{self, AppState, ServerOptions};
use crate::storage::{self, Durability, GroupRefused, Storage, StorageError, Volume, VolumeKind};
use crate::upkeep::Upkeep;
use clap::{Parser, Subcommand, ValueEnum};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

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
    /// List tenants with their flag, head commit and last change.
    List,
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
    /// `serve` on an address other hosts can reach with a secret anyone may know.
    #[error(
        "refusing to serve on {bind} with {reason}: anyone who knows it can sign tokens for \
         every tenant. Set PLANFILES_JWT_SECRET (or auth.secret) to a random secret of at \
         least 32 bytes, or bind to a loopback address"
    )]
    WeakSecret { bind: String, reason: &'static str },
    /// `durability = "group"` on a volume where `syncfs` is not known to flush.
    #[error(transparent)]
    Durability(#[from] GroupRefused),
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
            | CliError::WeakSecret { .. }
            | CliError::Durability(_)
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
    Ok(open_storage_on(config)?.0)
}

/// The storage of the data dir, its volume, and the durability mode chosen for that volume
/// (`storage.durability`, `storage.trust_syncfs`).
fn open_storage_on(config: &Config) -> Result<(Storage, Option<Volume>, Durability), CliError> {
    let committer = Identity::new(
        &config.commit.committer_name,
        &config.commit.committer_email,
        "localhost",
    );
    let volume = storage::volume_at_or_above(&config.storage.data_dir).ok();
    let durability = Durability::choose(
        config.storage.durability,
        config.storage.trust_syncfs,
        volume.as_ref(),
    )?;
    let storage = Storage::open(&config.storage.data_dir, committer, durability)?;
    Ok((storage, volume, durability))
}

/// Whether to watch refs with inotify, from `storage.watch_refs` and the kind of volume the
/// tenants are on. `auto` turns the watch off, with one log line, on a volume that other
/// hosts change (inotify would miss their commits); `true` and `false` are honoured as they
/// are, with a warning when `true` is set on such a volume.
fn watch_refs(setting: WatchRefs, volume: std::io::Result<VolumeKind>) -> bool {
    match (setting, volume) {
        (WatchRefs::Off, _) => false,
        (WatchRefs::On, Ok(VolumeKind::Shared(fs))) => {
            tracing::warn!(filesystem = fs, "storage.watch_refs = true on a network or FUSE volume: commits made on other hosts are not seen by inotify, and cached GETs may answer an old version");
            true
        }
        (WatchRefs::On, _) | (WatchRefs::Auto, Ok(VolumeKind::Local)) => true,
        (WatchRefs::Auto, Ok(VolumeKind::Shared(fs))) => {
            tracing::info!(filesystem = fs, "the data dir is on a network or FUSE volume, where inotify misses other hosts' commits: watch_refs off, every GET reads the ref file (set storage.watch_refs = true to override)");
            false
        }
        (WatchRefs::Auto, Err(e)) => {
            tracing::warn!(error = %e, "cannot tell the data dir's volume type: watch_refs off, every GET reads the ref file (set storage.watch_refs = true to override)");
            false
        }
    }
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
                println!("{:<24} {:<15} {:<40} {when}", t.id, flag, head);
            }
            if broken > 0 {
                return Err(CliError::Partial(format!(
                    "{broken} tenant repositories could not be read"
                )));
            }
        }
    }
    Ok(())
}

fn maintain(config: &Config, only: Option<&str>) -> Result<(), CliError> {
    let storage = open_storage(config)?;
    let tenants = match only {
        Some(id) => vec![tenant_id(id)?],
        None => storage.tenant_ids()?,
    };
    let upkeep = Upkeep::new(storage, 0, crate::metrics::Metrics::new());
    let mut failed = 0;
    for id in tenants {
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

/// A weak HS256 secret is refused on an address other hosts can reach, and warned about on
/// loopback.
fn check_secret(config: &Config) -> Result<(), CliError> {
    let Some(reason) = config.auth.weak_secret() else {
        return Ok(());
    };
    if !config.server.binds_loopback() {
        return Err(CliError::WeakSecret {
            bind: config.server.bind.clone(),
            reason,
        });
    }
    tracing::warn!(
        bind = %config.server.bind,
        "serving with {reason}, on loopback only; set PLANFILES_JWT_SECRET to a random secret of at least 32 bytes before binding to another address"
    );
    Ok(())
}

/// The stream limits of `[events]`, fitted under the descriptor limit (raised to the hard
/// one first), with one log line of the limits in force.
fn events_limits(config: &crate::config::EventsConfig) -> crate::config::EventsConfig {
    let limit = match crate::descriptors::raise_limit() {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the descriptor limit; stream limits as configured");
            return config.clone();
        }
    };
    let fitted = crate::descriptors::fit(config, limit.now);
    tracing::info!(
        descriptors = limit.now,
        raised_from = limit.was,
        reserve = crate::descriptors::reserve(limit.now),
        max_streams = fitted.max_streams,
        max_streams_per_tenant = fitted.max_streams_per_tenant,
        "descriptor limit and the stream limits that fit under it"
    );
    if fitted.max_streams < config.max_streams
        || fitted.max_streams_per_tenant < config.max_streams_per_tenant
    {
        tracing::warn!(
            configured = config.max_streams,
            configured_per_tenant = config.max_streams_per_tenant,
            "the stream limits were lowered to fit the descriptor limit; raise the hard limit (LimitNOFILE=) for more"
        );
    }
    fitted
}

fn serve(config: Config) -> Result<(), CliError> {
    crate::telemetry::init(&config.log);
    check_secret(&config)?;
    auth::self_test()?;
    let (storage, volume, durability) = open_storage_on(&config)?;
    let filesystem = volume.map_or_else(|| "unknown".into(), |v| v.name());
    tracing::info!(
        %filesystem,
        durability = durability.name(),
        setting = ?config.storage.durability,
        "{}",
        match durability {
            Durability::Group => "group commit: writers share syncfs calls, which reach the disk on this volume",
            Durability::Fsync => "per-file fsync: every object, ref and folder a write makes is fsynced",
        }
    );
    let watch = watch_refs(
        config.storage.watch_refs,
        storage::volume(storage.tenants_dir()).map(|v| v.kind()),
    );
    let storage = storage
        .watch_refs(watch)
        .head_lookup_threads(config.server.workers)
        .clone_limits(
            storage::CLONE_TURNS,
            Duration::from_secs(config.server.clone_stall_secs),
            Duration::from_secs(config.server.queue_timeout_secs),
        );
    if let Some(fixture) = &config.storage.seed_from {
        if fixture.is_dir() {
            let n = storage::seed_if_empty(fixture, storage.tenants_dir())?;
            if n > 0 {
                tracing::info!(tenants = n, from = %fixture.display(), "seeded an empty data dir");
            }
        } else {
            tracing::warn!(from = %fixture.display(), "seed directory not found; not seeding");
        }
    }
    let state = AppState::new(
        storage,
        Verifier::from_config(&config.auth)?,
        crate::metrics::Metrics::new(),
        &http::Limits::from_config(&config.server),
        config.storage.repack_loose_objects,
    )
    .metrics_require_token(config.metrics.require_token)
    .events_config(events_limits(&config.events));
    let events = state.events.clone();
    let listener = TcpListener::bind(&config.server.bind)
        .map_err(|e| CliError::Io(format!("cannot listen on {}: {e}", config.server.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Io(e.to_string()))?;
    let options = ServerOptions {
        workers: config.server.workers,
        client_request_timeout: Duration::from_secs(config.server.client_request_timeout_secs),
        shutdown_timeout: Duration::from_secs(config.server.shutdown_timeout_secs),
        send_stall: Duration::from_secs(config.server.send_stall_secs),
    };
    tracing::info!(%addr, data_dir = %config.storage.data_dir.display(), "planfiles listening");
    actix_web::rt::System::new()
        .block_on(async move {
            let server = http::serve(state, listener, &options)?;
            http::stop_on_signals(server.handle(), events);
            server.await
        })
        .map_err(|e| CliError::Io(format!("server: {e}")))?;
    tracing::info!("planfiles stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_refs_auto_follows_the_volume_and_explicit_settings_win() {
        let local = || Ok(VolumeKind::Local);
        let nfs = || Ok(VolumeKind::Shared("nfs"));
        let unknown = || Err(std::io::Error::other("statfs failed"));
        for (setting, volume, on) in [
            (WatchRefs::Auto, local(), true),
            (WatchRefs::Auto, nfs(), false),
            (WatchRefs::Auto, unknown(), false),
            (WatchRefs::On, local(), true),
            (WatchRefs::On, nfs(), true),
            (WatchRefs::On, unknown(), true),
            (WatchRefs::Off, local(), false),
            (WatchRefs::Off, nfs(), false),
        ] {
            let label = format!("{setting:?} {volume:?}");
            assert_eq!(watch_refs(setting, volume), on, "{label}");
        }
    }
}
