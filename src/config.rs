//! `Config`: the service's settings from built-in defaults, a TOML file and `PLANFILES_*` variables.
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub auth: AuthConfig,
    pub commit: CommitConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// When true, `/metrics` needs a token with the permission `planfiles.metrics.read`.
    pub require_token: bool,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on, `host:port`.
    pub bind: String,
    /// Largest request body in bytes; larger bodies get 413.
    pub body_limit: usize,
    /// HTTP worker threads; 0 means one per CPU.
    pub workers: usize,
    /// Seconds a client has to send its request headers.
    pub client_request_timeout_secs: u64,
    /// Seconds in-flight requests get to finish on shutdown.
    pub shutdown_timeout_secs: u64,
    /// Seconds a client has to send a whole body once it has its turn.
    pub body_timeout_secs: u64,
    /// Bytes of request bodies (by Content-Length; body_limit when chunked) read and
    /// processed at once; more wait their turn.
    pub bodies_in_flight_bytes: usize,
    /// Seconds a request waits for a turn (its tenant's writer, the body budget, a clone
    /// slot) before it is answered 503 `busy` with `Retry-After`.
    pub queue_timeout_secs: u64,
    /// Seconds a clone or fetch may go without the client accepting a byte; then its
    /// `git upload-pack` is stopped and its turn given to the next.
    pub clone_stall_secs: u64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Where tenant repositories live: `<data_dir>/tenants/<tenant_id>.git`.
    pub data_dir: PathBuf,
    /// Copy the demo tenants from this directory into an empty data dir on start; `""` (or
    /// `None`) turns seeding off.
    pub seed_from: Option<PathBuf>,
    /// How writes reach the disk: shared `syncfs` (group commit) or libgit2's fsyncs.
    pub durability: crate::storage::Durability,
    /// Repack a tenant once it holds about this many loose objects; 0 turns upkeep off.
    pub repack_loose_objects: usize,
    /// Learn through inotify that a tenant's `main` has not moved, so cached GETs need no
    /// disk read. Turn off when processes on other hosts write to the data dir.
    pub watch_refs: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Algorithm {
    HS256,
    RS256,
    ES256,
}

#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The one algorithm tokens may use.
    pub algorithm: Algorithm,
    /// HS256 shared secret (also used by `planfiles token`).
    pub secret: String,
    /// PEM public key file for RS256 or ES256.
    pub public_key_file: Option<PathBuf>,
    /// When set, tokens must carry this `iss`.
    pub issuer: Option<String>,
    /// When set, tokens must carry this `aud`.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp`, `nbf` and `iat`, in seconds.
    pub leeway_secs: u64,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("algorithm", &self.algorithm)
            .field("secret", &"<redacted>")
            .field("public_key_file", &self.public_key_file)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway_secs", &self.leeway_secs)
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CommitConfig {
    /// Committer name on every commit the service makes.
    pub committer_name: String,
    /// Committer email on every commit the service makes.
    pub committer_email: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A tracing filter such as `info` or `planfiles=debug,actix_web=info`.
    pub filter: String,
    /// `text` or `json`.
    pub format: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            body_limit: 1024 * 1024,
            workers: 0,
            client_request_timeout_secs: 5,
            shutdown_timeout_secs: 30,
            bodies_in_flight_bytes: 16 * 1024 * 1024,
            body_timeout_secs: 30,
            queue_timeout_secs: 10,
            clone_stall_secs: 30,
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: "data".into(),
            seed_from: Some("repos-fixture".into()),
            repack_loose_objects: 2000,
            durability: Default::default(),
            watch_refs: true,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::HS256,
            secret: "planfiles-demo-secret-change-me".into(),
            public_key_file: None,
            issuer: None,
            audience: None,
            leeway_secs: 30,
        }
    }
}

impl Default for CommitConfig {
    fn default() -> Self {
        Self {
            committer_name: "planfiles".into(),
            committer_email: "planfiles@localhost".into(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            filter: "info".into(),
            format: "text".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{name}: {message}")]
    Env { name: &'static str, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `--config PATH` or `PLANFILES_CONFIG`: must exist.
    pub explicit_file: Option<PathBuf>,
    /// Environment variables (`PLANFILES_*`), usually `std::env::vars()`.
    pub env: Vec<(String, String)>,
}

impl Config {
    /// Built-in defaults, then the config file, then environment overrides.
    /// Without an explicit file, `config.toml` in the current directory is used if present.
    pub fn load(sources: &Sources) -> Result<Self, ConfigError> {
        let mut config = match &sources.explicit_file {
            Some(path) => Self::from_file(path)?,
            None if Path::new("config.toml").is_file() => {
                Self::from_file(Path::new("config.toml"))?
            }
            None => Self::default(),
        };
        for (name, value) in &sources.env {
            config.apply_env(name, value)?;
        }
        if config
            .storage
            .seed_from
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            config.storage.seed_from = None;
        }
        config.check()?;
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source: Box::new(source),
        })
    }

    fn apply_env(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        match name {
            "PLANFILES_BIND" => self.server.bind = value.to_owned(),
            "PLANFILES_DATA_DIR" => self.storage.data_dir = value.into(),
            "PLANFILES_JWT_SECRET" => self.auth.secret = value.to_owned(),
            "PLANFILES_LOG" => self.log.filter = value.to_owned(),
            "PLANFILES_LOG_FORMAT" => self.log.format = value.to_owned(),
            _ => {}
        }
        Ok(())
    }

    fn check(&self) -> Result<(), ConfigError> {
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(ConfigError::Invalid(format!(
                "log.format must be \"text\" or \"json\", not {:?}",
                self.log.format
            )));
        }
        if self.server.bodies_in_flight_bytes < self.server.body_limit {
            return Err(ConfigError::Invalid(
                "server.bodies_in_flight_bytes must be at least server.body_limit".into(),
            ));
        }
        if self.server.clone_stall_secs == 0 {
            return Err(ConfigError::Invalid(
                "server.clone_stall_secs must be positive".into(),
            ));
        }
        if self.server.body_limit == 0 {
            return Err(ConfigError::Invalid(
                "server.body_limit must be positive".into(),
            ));
        }
        match self.auth.algorithm {
            Algorithm::HS256 if self.auth.secret.len() < 16 => Err(ConfigError::Invalid(
                "auth.secret must be at least 16 bytes for HS256".into(),
            )),
            Algorithm::RS256 | Algorithm::ES256 if self.auth.public_key_file.is_none() => Err(
                ConfigError::Invalid("auth.public_key_file is required for RS256 and ES256".into()),
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn environment_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[server]\nbind = \"0.0.0.0:1\"\n[storage]\ndata_dir = \"/a\"\n",
        )
        .unwrap();
        let sources = Sources {
            explicit_file: Some(path),
            env: env(&[
                ("PLANFILES_DATA_DIR", "/b"),
                ("PLANFILES_LOG", "debug"),
                ("OTHER", "x"),
            ]),
        };
        let c = Config::load(&sources).unwrap();
        assert_eq!(c.server.bind, "0.0.0.0:1");
        assert_eq!(c.storage.data_dir, PathBuf::from("/b"));
        assert_eq!(c.log.filter, "debug");
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        let sources = Sources {
            explicit_file: Some("/nonexistent/planfiles.toml".into()),
            env: vec![],
        };
        assert!(matches!(
            Config::load(&sources),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[server]\nbnd = \"x\"\n").unwrap();
        assert!(matches!(
            Config::from_file(&path),
            Err(ConfigError::Parse { .. })
        ));
        std::fs::write(&path, "[server]\nclone_stall_secs = 0\n").unwrap();
        assert!(matches!(
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            }),
            Err(ConfigError::Invalid(_))
        ));
        let short = Sources {
            explicit_file: None,
            env: env(&[("PLANFILES_JWT_SECRET", "short")]),
        };
        assert!(matches!(Config::load(&short), Err(ConfigError::Invalid(_))));
    }

    #[test]
    fn seeding_is_on_by_default_and_an_empty_seed_from_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            })
            .unwrap()
            .storage
            .seed_from
        };
        assert_eq!(load(""), Some(PathBuf::from("repos-fixture")));
        assert_eq!(load("[storage]\nseed_from = \"\"\n"), None);
        assert_eq!(
            load("[storage]\nseed_from = \"/x\"\n"),
            Some(PathBuf::from("/x"))
        );
    }

    #[test]
    fn the_debug_form_hides_the_secret() {
        let c = Config::default();
        assert!(!format!("{c:?}").contains(&c.auth.secret));
    }
}
