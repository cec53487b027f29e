//! `Application`: the one way the service is built from a `Config`, for `serve`, the tests and the benches alike: storage on the data dir (durability chosen from its volume), seeding, the app state and its limits, the listener, the actix server.
use crate::auth::{AuthSetupError, Verifier};
use crate::config::{Config, WatchRefs};
use crate::domain::Identity;
use crate::events::Events;
use crate::http::{self, AppState, ServerOptions};
use crate::storage::{
    self, Durability, GroupRefused, Storage, StorageError, VolumeKind, WriteHook,
};
use crate::validation::{Reloaded, Validators};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// Why the service could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// `durability = "group"` on a volume where `syncfs` is not known to flush.
    #[error(transparent)]
    Durability(#[from] GroupRefused),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    /// An address other hosts can reach, with a secret anyone may know.
    #[error(
        "refusing to serve on {bind} with {reason}: anyone who knows it can sign tokens for \
         every tenant. Set PLANFILES_JWT_SECRET (or auth.secret, or a file of one in \
         auth.secret_file) to a random secret of at \
         least 32 bytes, or bind to a loopback address"
    )]
    WeakSecret { bind: String, reason: &'static str },
    #[error("{0}")]
    Cluster(String),
    /// A setting found wrong at start (a secret file emptied since the config was read).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Webhooks(#[from] crate::webhooks::BuildError),
    /// A `validation.schemas_dir` the config file names that is not there: validation would
    /// be off in silence.
    #[error("validation.schemas_dir {}: no such folder (the config file names it, relative to the config file's folder); fix the path, or remove the setting to run without schemas", dir.display())]
    SchemasMissing { dir: std::path::PathBuf },
    /// A schema of `validation.schemas_dir` that cannot be used.
    #[error("validation.schemas_dir {}: {source}", dir.display())]
    Schemas {
        dir: std::path::PathBuf,
        #[source]
        source: crate::validation::SchemaError,
    },
    #[error("cannot listen on {bind}: {source}")]
    Bind {
        bind: String,
        #[source]
        source: std::io::Error,
    },
}

/// The service, built and bound, not running yet.
pub struct Application {
    state: AppState,
    listener: TcpListener,
    options: ServerOptions,
    /// How long a tenant that moved away stays before it is archived.
    moved_grace: Duration,
}

impl Application {
    /// Builds what `config` describes: checks the secret against the bind address, opens
    /// the storage (durability from the volume, logged), seeds an empty data dir, makes the
    /// app state (its limits, the stream limits fitted under the descriptor limit) and binds
    /// the listener.
    pub fn build(config: &Config) -> Result<Self, StartupError> {
        Self::build_with(config, None)
    }

    /// [`Application::build`] with a write hook (tests only; see [`WriteHook`]).
    #[doc(hidden)]
    pub fn build_with(config: &Config, hook: Option<WriteHook>) -> Result<Self, StartupError> {
        let with_secret = make_secret_file(config)?;
        let config = with_secret.as_ref().unwrap_or(config);
        check_secret(config)?;
        crate::auth::self_test()?;
        let (storage, volume, durability) = open_storage(config, SigningKey::MakeIfAbsent)?;
        let filesystem = volume.map_or_else(|| "unknown".into(), |v| v.name());
        tracing::info!(
            %filesystem,
            durability = durability.name(),
            setting = ?config.storage.durability,
            // ext4 without a journal: repacks keep the files they retire for new objects.
            recycle_files = storage.recycles_files(),
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
        let storage = match hook {
            Some(hook) => storage.write_hook(hook),
            None => storage,
        };
        seed(config, &storage)?;
        let validators = load_validators(config)?;
        let metrics = crate::metrics::Metrics::new();
        metrics
            .schemas_loaded
            .set(validators.current().count() as i64);
        let storage = storage.judge_with(std::sync::Arc::new(crate::plans::StoredJudge(
            validators.clone(),
        )));
        let state = AppState::new(
            storage,
            Verifier::from_config(&config.auth)?,
            metrics,
            &http::Limits::from_config(&config.server),
            config.storage.repack_loose_objects,
        )
        .metrics_require_token(config.metrics.require_token)
        .validators(validators)
        .push_max_bytes(config.git.push_max_bytes)
        .events_config(events_limits(&config.events))
        .cluster(
            config.cluster.peer_urls().map_err(StartupError::Cluster)?,
            config.cluster.self_url().map_err(StartupError::Cluster)?,
        )
        .webhooks(config.webhooks.clone())?;
        let listener =
            TcpListener::bind(&config.server.bind).map_err(|source| StartupError::Bind {
                bind: config.server.bind.clone(),
                source,
            })?;
        let options = ServerOptions {
            workers: config.server.workers,
            client_request_timeout: Duration::from_secs(config.server.client_request_timeout_secs),
            shutdown_timeout: Duration::from_secs(config.server.shutdown_timeout_secs),
            send_stall: Duration::from_secs(config.server.send_stall_secs),
            cors_allowed_origins: config.server.cors_allowed_origins.clone(),
        };
        Ok(Self {
            state,
            listener,
            options,
            moved_grace: Duration::from_secs(config.cluster.moved_grace_secs),
        })
    }

    /// Where it listens (with port 0 in the config, the port the system chose).
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The change feed, stream limits and shutdown signal (ended first on shutdown).
    pub fn events(&self) -> Events {
        self.state.events.clone()
    }

    /// The actix server; call from inside an actix system, then await it.
    /// Also starts the sweep that archives tenants moved away past their grace period.
    pub fn run(self) -> std::io::Result<actix_web::dev::Server> {
        actix_web::rt::spawn(crate::cluster::archive_moved_loop(
            self.state.storage.clone(),
            self.moved_grace,
        ));
        if let Some(webhooks) = &self.state.webhooks {
            webhooks.start()?;
        }
        actix_web::rt::spawn(reload_on_hangup(
            self.state.validators.clone(),
            self.state.metrics.clone(),
        ));
        http::serve(self.state, self.listener, &self.options)
    }
}

/// The schemas of `validation.schemas_dir`, compiled (an error stops the start).
pub fn load_validators(config: &Config) -> Result<Validators, StartupError> {
    if let Some(named) = config.validation.required_dir().filter(|d| !d.is_dir()) {
        return Err(StartupError::SchemasMissing {
            dir: absolute(named),
        });
    }
    let dir = config.validation.dir().map(std::path::Path::to_owned);
    let validators = Validators::load(dir.clone(), config.validation.unknown_integrations)
        .map_err(|source| StartupError::Schemas {
            dir: dir.clone().unwrap_or_default(),
            source,
        })?;
    let set = validators.current();
    tracing::info!(
        dir = %dir.as_deref().map(absolute).unwrap_or_default().display(),
        set = set.id(),
        empty = set.is_empty(),
        "schemas loaded; SIGHUP reads the folder again"
    );
    if let Some(why) = validators.none_loaded() {
        tracing::warn!("{why}");
    }
    Ok(validators)
}

/// Reads the schemas folder again on each SIGHUP (on the blocking pool); a set that does
/// not compile is logged and counted, and the last good one stays in use.
async fn reload_on_hangup(validators: Validators, metrics: crate::metrics::Metrics) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: the schemas are read only at start");
        return;
    };
    while hangups.recv().await.is_some() {
        let v = validators.clone();
        let result = tokio::task::spawn_blocking(move || v.reload()).await;
        let label = match result {
            Ok(Ok(Reloaded::Changed(set))) => {
                tracing::info!(%set, "schemas reloaded: a new set is in use");
                metrics
                    .schemas_loaded
                    .set(validators.current().count() as i64);
                if let Some(why) = validators.none_loaded() {
                    tracing::warn!("{why}");
                }
                "changed"
            }
            Ok(Ok(Reloaded::Same)) => {
                tracing::info!("schemas reloaded: unchanged");
                "same"
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "schemas not reloaded: the last good set stays in use");
                "failed"
            }
            Err(e) => {
                tracing::error!(error = %e, "schemas not reloaded: the reload failed");
                "failed"
            }
        };
        metrics.schema_reloads.with_label_values(&[label]).inc();
    }
}

/// Whether opening storage may make the commit signing key when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningKey {
    /// The service, and commands that commit: the first of them makes the key.
    MakeIfAbsent,
    /// Commands that make no commit: they sign nothing, so they read the key if it is there
    /// and never make one (run as another user, they would leave a key the service cannot
    /// read).
    ReadIfPresent,
}

/// Storage over the data dir, its volume, and the durability mode chosen for that volume
/// (`storage.durability`, `storage.trust_syncfs`).
pub fn open_storage(
    config: &Config,
    key: SigningKey,
) -> Result<(Storage, Option<storage::Volume>, Durability), StartupError> {
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
    let made = !config.storage.data_dir.is_dir();
    let mut storage = Storage::open(
        &config.storage.data_dir,
        &config.cursor_key_file(),
        committer,
        durability,
    )?;
    let key_file = config.signing_key_file();
    if config.signing.enabled && (key == SigningKey::MakeIfAbsent || key_file.exists()) {
        storage = storage.sign_commits(&key_file, &config.signing.previous_public_keys)?;
    }
    if made {
        // Once, at start: a mistyped path would otherwise serve an empty (or seeded) data dir
        // without a word.
        tracing::warn!(
            data_dir = %absolute(&config.storage.data_dir).display(),
            "the data dir did not exist, so it was made (as on a first start); if you meant another, set storage.data_dir or PLANFILES_DATA_DIR"
        );
    }
    Ok((storage, volume, durability))
}

/// `path` made absolute against the working folder (for a message), as it is when that fails.
pub fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Seeds an empty data dir from `storage.seed_from`, when it is set and exists.
fn seed(config: &Config, storage: &Storage) -> Result<(), StorageError> {
    let Some(fixture) = &config.storage.seed_from else {
        return Ok(());
    };
    if !fixture.is_dir() {
        tracing::warn!(from = %fixture.display(), "seed directory not found; not seeding");
        return Ok(());
    }
    let n = storage::seed_if_empty(fixture, storage.tenants_dir())?;
    if n > 0 {
        tracing::info!(tenants = n, from = %fixture.display(), "seeded an empty data dir");
    }
    Ok(())
}

/// The config with the secret of `auth.secret_file` (HS256), which this makes when it is not
/// there yet (64 random hex digits, mode 0600, synced) and reads again when it is (saying
/// once when other users can read it). `None`: no secret file.
fn make_secret_file(config: &Config) -> Result<Option<Config>, StartupError> {
    let Some(path) = &config.auth.secret_file else {
        return Ok(None);
    };
    if config.auth.algorithm != crate::config::Algorithm::HS256 {
        return Ok(None);
    }
    let made = storage::make_secret_file(path)?;
    if made {
        tracing::info!(secret_file = %path.display(), "made the HS256 secret (auth.secret_file)");
    }
    // Read as every command reads it, under the config's rules (a first line, at least 16
    // bytes): the file may have changed since the config was loaded.
    let mut config = config.clone();
    config.read_secret_file(false)?;
    config.hs256_secret()?;
    config.check()?;
    Ok(Some(config))
}

/// A weak HS256 secret is refused on an address other hosts can reach, and warned about on
/// loopback.
fn check_secret(config: &Config) -> Result<(), StartupError> {
    let Some(reason) = config.auth.weak_secret() else {
        return Ok(());
    };
    if !config.server.binds_loopback() {
        return Err(StartupError::WeakSecret {
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
    let packs = crate::descriptors::pack_files(limit.now);
    crate::storage::limit_open_packs(packs);
    tracing::info!(
        descriptors = limit.now,
        raised_from = limit.was,
        reserve = crate::descriptors::reserve(limit.now),
        open_packs = packs,
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
