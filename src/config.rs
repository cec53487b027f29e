//! `Config`: the service's settings from built-in defaults, a TOML file and `PLANFILES_*` variables.
mod sections;

pub use sections::*;

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub auth: AuthConfig,
    pub commit: CommitConfig,
    pub signing: SigningConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    pub events: EventsConfig,
    pub cluster: ClusterConfig,
    pub validation: ValidationConfig,
    pub git: GitConfig,
    pub webhooks: WebhooksConfig,
}

/// A parse error with its line, column, the setting it is about and toml's message, which
/// names the key and the value at fault. toml's own `Display` (which quotes the source line)
/// is not used, and no value of `[auth]` (where the secret is) is shown.
/// A section name at fault is called a section (`[sever]`), not a field.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let span = e.span().unwrap_or(0..0);
    let start = span.start.min(text.len());
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    let message = e.message().trim();
    let line_text = text.lines().nth(line - 1).unwrap_or("").trim();
    // The section in effect at the error: the last `[name]` header at or above its line.
    let section = text
        .lines()
        .take(line)
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix('[')
                .and_then(|l| l.split(']').next())
                .map(|name| name.trim().trim_matches('[').to_owned())
        })
        .last();
    let key = line_text
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches(['"', '\'']).to_owned());
    let message = if line_text.starts_with('[') && message.starts_with("unknown field") {
        // An unknown table at the top: a section, named as it is written.
        let names: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
        match names.split_first() {
            Some((unknown, expected)) if !expected.is_empty() => format!(
                "unknown section [{unknown}], expected one of {}",
                expected
                    .iter()
                    .map(|n| format!("[{n}]"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some((unknown, _)) => format!("unknown section [{unknown}]"),
            None => message.to_owned(),
        }
    } else {
        message.to_owned()
    };
    // `[auth]` holds the secret, and a secret pasted under another key of it (or a typo of
    // `secret`) is one too: its values are never shown.
    let secret = section.as_deref() == Some("auth")
        || key
            .as_deref()
            .is_some_and(|k| k.starts_with("auth.") || k.contains("secret"));
    let message = if secret {
        // What was written is hidden; what is expected (the valid choices) is not a secret.
        let spanned = text.get(span.clone()).unwrap_or("");
        let (written, expected) = match message.find("expected") {
            Some(i) => message.split_at(i),
            None => (message.as_str(), ""),
        };
        let mut found = redact_quoted(written);
        let value = spanned.trim().trim_matches(['"', '\'']);
        if !value.is_empty() {
            found = found.replace(value, "…");
        }
        format!("{found}{expected}")
    } else {
        message
    };
    let message = in_words(&message);
    let message = match (&section, &key) {
        (Some(section), Some(key)) if !line_text.starts_with('[') => {
            format!("{section}.{key}: {message}")
        }
        _ => message,
    };
    ConfigError::Parse {
        path: path.into(),
        line,
        column,
        message,
    }
}

/// The deserializer's Rust type names said as a reader of the config would: `expected usize`
/// becomes `expected a whole number` (the Rust name kept in brackets for searching).
fn in_words(message: &str) -> String {
    let mut out = message.to_owned();
    for (rust, words) in [
        ("usize", "a whole number"),
        ("u64", "a whole number"),
        ("u32", "a whole number"),
        ("u16", "a whole number"),
        ("u8", "a whole number"),
        ("i64", "an integer"),
        ("f64", "a number"),
        ("a boolean", "true or false"),
    ] {
        let from = format!("expected {rust}");
        if out.ends_with(&from)
            || out.contains(&format!("{from} "))
            || out.contains(&format!("{from},"))
        {
            out = out.replacen(
                &from,
                &format!("expected {words} ({rust}; write it without quotes or units)"),
                1,
            );
        }
    }
    out
}

/// Replaces each `` `quoted` `` and `"quoted"` part of a message with `…`.
fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote: Option<char> = None;
    for c in message.chars() {
        match (quote, c) {
            (None, '`' | '"') => {
                quote = Some(c);
                out.push(c);
                out.push('…');
            }
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file's own text is never part of the error: the line may hold the secret.
    #[error("config file {}: line {line}, column {column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{name}: {message}")]
    Env { name: &'static str, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("auth.secret_file {}: {problem}", path.display())]
    SecretFile { path: PathBuf, problem: String },
}

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `--config PATH` or `PLANFILES_CONFIG`: must exist.
    pub explicit_file: Option<PathBuf>,
    /// Environment variables (`PLANFILES_*`), usually [`Sources::process_env`].
    pub env: Vec<(String, String)>,
}

/// The environment variables that override the config file. `PLANFILES_CONFIG` (the file
/// itself) is read by the command line.
pub const ENV_OVERRIDES: [&str; 5] = [
    "PLANFILES_BIND",
    "PLANFILES_DATA_DIR",
    "PLANFILES_JWT_SECRET",
    "PLANFILES_LOG",
    "PLANFILES_LOG_FORMAT",
];

impl Sources {
    /// The [`ENV_OVERRIDES`] set in this process's environment. No other variable is read, so
    /// whatever bytes they hold cannot matter; one of these that is not UTF-8 is an error
    /// naming it (its value is not shown: it may be the secret).
    pub fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
        env_overrides(|name| std::env::var_os(name))
    }
}

fn env_overrides(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut set = Vec::new();
    for name in ENV_OVERRIDES {
        if let Some(value) = get(name) {
            let value = value.into_string().map_err(|_| ConfigError::Env {
                name,
                message: "the value is not valid UTF-8; set it to UTF-8 text or unset it".into(),
            })?;
            set.push((name.to_owned(), value));
        }
    }
    Ok(set)
}

impl Config {
    /// The commit signing key's file: `signing.key_file`, else `<data_dir>/signing_key`.
    pub fn signing_key_file(&self) -> PathBuf {
        self.signing
            .key_file
            .clone()
            .unwrap_or_else(|| self.storage.data_dir.join("signing_key"))
    }

    /// The cursor key's file: `storage.cursor_key_file`, else `<data_dir>/cursor.key`.
    pub fn cursor_key_file(&self) -> PathBuf {
        self.storage
            .cursor_key_file
            .clone()
            .unwrap_or_else(|| self.storage.data_dir.join("cursor.key"))
    }

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
        // Every relative path the config file names is found beside that file (those of the
        // environment, below, are taken from the working directory).
        let folder = sources
            .explicit_file
            .as_deref()
            .or(Some(Path::new("config.toml")).filter(|p| p.is_file()))
            .and_then(Path::parent);
        if let Some(folder) = folder {
            config.resolve_paths(folder);
        }
        for (name, value) in &sources.env {
            config.apply_env(name, value)?;
        }
        let env_secret = sources.env.iter().any(|(n, _)| n == "PLANFILES_JWT_SECRET");
        config.read_secret_file(env_secret)?;
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
        let mut config: Config = toml::from_str(&text).map_err(|e| parse_error(path, &text, &e))?;
        // Parsed once more as a table, only to know whether the folder was written.
        config.validation.schemas_dir_set = text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("validation")?.get("schemas_dir").map(|_| ()))
            .is_some();
        Ok(config)
    }

    /// `auth.secret_file`: its first line becomes the secret. A file that is not there yet
    /// leaves the secret empty: `serve` makes the file at start
    /// ([`crate::startup::make_secret_file`]), and [`Config::hs256_secret`] refuses.
    pub(crate) fn read_secret_file(&mut self, env_secret: bool) -> Result<(), ConfigError> {
        let Some(path) = &self.auth.secret_file else {
            return Ok(());
        };
        if env_secret {
            return Err(ConfigError::Invalid(
                "PLANFILES_JWT_SECRET and auth.secret_file are both set: keep one".into(),
            ));
        }
        self.auth.secret = match std::fs::read_to_string(path) {
            Ok(text) => text.lines().next().unwrap_or("").trim().to_owned(),
            // Empty until `serve` makes it ([`Config::hs256_secret`] refuses meanwhile).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.auth.secret = String::new();
                return Ok(());
            }
            Err(source) => {
                return Err(ConfigError::SecretFile {
                    path: path.clone(),
                    problem: source.to_string(),
                })
            }
        };
        if self.auth.secret.is_empty() {
            // Not a secret that is not made yet: a file that was meant to hold one.
            return Err(ConfigError::SecretFile {
                path: path.clone(),
                problem: "its first line is empty: write a secret of at least 32 bytes there, or remove the file for `planfiles serve` to make one".into(),
            });
        }
        Ok(())
    }

    /// The HS256 secret, for commands that sign tokens.
    pub fn hs256_secret(&self) -> Result<&str, ConfigError> {
        match &self.auth.secret_file {
            Some(path) if self.auth.secret.is_empty() => Err(ConfigError::Invalid(format!(
                "auth.secret_file {}: no such file yet; `planfiles serve` makes it at its first start",
                path.display()
            ))),
            _ => Ok(&self.auth.secret),
        }
    }

    /// Each relative path of the config file placed under `folder`, the file's own.
    fn resolve_paths(&mut self, folder: &Path) {
        use sections::beside;
        beside(folder, &mut self.storage.data_dir);
        if let Some(p) = self.storage.seed_from.as_mut() {
            beside(folder, p);
        }
        if let Some(p) = self.auth.public_key_file.as_mut() {
            beside(folder, p);
        }
        if let Some(p) = self.signing.key_file.as_mut() {
            beside(folder, p);
        }
        if let Some(p) = self.auth.secret_file.as_mut() {
            beside(folder, p);
        }
        if let Some(p) = self.storage.cursor_key_file.as_mut() {
            beside(folder, p);
        }
        beside(folder, &mut self.validation.schemas_dir);
    }

    fn apply_env(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        match name {
            "PLANFILES_BIND" => self.server.bind = value.to_owned(),
            "PLANFILES_DATA_DIR" => self.storage.data_dir = value.into(),
            "PLANFILES_JWT_SECRET" if value.is_empty() => {
                return Err(ConfigError::Invalid(
                    "PLANFILES_JWT_SECRET is set but empty: set it to a random secret of at least \
                     32 bytes (openssl rand -base64 32), or unset it to use auth.secret"
                        .into(),
                ))
            }
            "PLANFILES_JWT_SECRET" => self.auth.secret = value.to_owned(),
            "PLANFILES_LOG" => self.log.filter = value.to_owned(),
            "PLANFILES_LOG_FORMAT" => self.log.format = value.to_owned(),
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if let Some(problem) = self.server.bind_problem() {
            return Err(ConfigError::Invalid(problem));
        }
        if let Some(problem) = self.webhooks.problem() {
            return Err(ConfigError::Invalid(problem));
        }
        if self.git.push_max_bytes == 0 {
            return Err(ConfigError::Invalid(
                "git.push_max_bytes must be at least 1, not 0".into(),
            ));
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(ConfigError::Invalid(format!(
                "log.format must be \"text\" or \"json\", not {:?}",
                self.log.format
            )));
        }
        // One rule for every limit in `[server]`: zero is refused, never read as "off". A
        // zero timeout would either switch a defence off (client_request_timeout_secs),
        // answer every request with an error (body_timeout_secs, queue_timeout_secs) or drop
        // in-flight requests on shutdown (shutdown_timeout_secs). Only `workers` gives 0 a
        // meaning (one per CPU).
        for (name, value) in self.server.positive_settings() {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "server.{name} must be at least 1, not 0"
                )));
            }
        }
        if let Some(origin) = self.server.bad_cors_origin() {
            return Err(ConfigError::Invalid(format!(
                "server.cors_allowed_origins: {origin:?} is not an origin as a browser sends it: \
                 http(s)://host[:port] with the host in lower case, no default port (80, 443), \
                 nothing after (no path, no trailing slash, no *)"
            )));
        }
        for (name, value) in self.events.positive_settings() {
            if value == 0 {
                return Err(ConfigError::Invalid(format!(
                    "events.{name} must be at least 1, not 0"
                )));
            }
        }
        for key in &self.signing.previous_public_keys {
            crate::signing::Keyring::check_public_key(key)
                .map_err(|e| ConfigError::Invalid(format!("signing.previous_public_keys: {e}")))?;
        }
        let peers = self.cluster.peer_urls().map_err(ConfigError::Invalid)?;
        if !peers.is_empty()
            && self
                .cluster
                .self_url()
                .map_err(ConfigError::Invalid)?
                .is_none()
        {
            return Err(ConfigError::Invalid(
                "cluster.peers is set but cluster.self_url is not: an import checks that its \
                 source moves the tenant to this shard, and needs this shard's URL to do so"
                    .into(),
            ));
        }
        if self.events.max_streams_per_tenant > self.events.max_streams {
            return Err(ConfigError::Invalid(
                "events.max_streams_per_tenant must be at most events.max_streams".into(),
            ));
        }
        if self.server.bodies_in_flight_bytes < self.server.body_limit {
            return Err(ConfigError::Invalid(
                "server.bodies_in_flight_bytes must be at least server.body_limit".into(),
            ));
        }
        if self.server.bodies_per_tenant_bytes < self.server.body_limit
            || self.server.bodies_per_tenant_bytes > self.server.bodies_in_flight_bytes
        {
            return Err(ConfigError::Invalid(
                "server.bodies_per_tenant_bytes must be between server.body_limit and server.bodies_in_flight_bytes".into(),
            ));
        }
        match self.auth.algorithm {
            // A secret file not made yet is empty until `serve` makes it.
            Algorithm::HS256 if self.auth.secret_file.is_some() && self.auth.secret.is_empty() => {
                Ok(())
            }
            Algorithm::HS256 if self.auth.secret.len() < 16 => {
                Err(ConfigError::Invalid(match &self.auth.secret_file {
                    Some(p) => format!(
                        "auth.secret_file {}: the secret must be at least 16 bytes for HS256",
                        p.display()
                    ),
                    None => "auth.secret must be at least 16 bytes for HS256".into(),
                }))
            }
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

    /// `auth.secret_file`: beside the config file, its first line the secret; not there yet,
    /// the secret is empty and signing refuses; never beside PLANFILES_JWT_SECRET; too short
    /// is refused, naming the file.
    #[test]
    fn the_secret_file_is_read_beside_the_config_and_not_made_by_loading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[auth]\nsecret_file = \"jwt.secret\"\n").unwrap();
        let load = |env_pairs: &[(&str, &str)]| {
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: env(env_pairs),
            })
        };
        let c = load(&[]).unwrap();
        assert_eq!(c.auth.secret_file, Some(dir.path().join("jwt.secret")));
        assert_eq!(c.auth.secret, "");
        assert!(
            !dir.path().join("jwt.secret").exists(),
            "loading makes nothing"
        );
        let e = c.hs256_secret().unwrap_err().to_string();
        assert!(
            e.contains("jwt.secret") && e.contains("planfiles serve"),
            "{e}"
        );
        std::fs::write(
            dir.path().join("jwt.secret"),
            "s3cret-s3cret-s3cret-s3cret-s3cret\n",
        )
        .unwrap();
        let c = load(&[]).unwrap();
        assert_eq!(
            c.hs256_secret().unwrap(),
            "s3cret-s3cret-s3cret-s3cret-s3cret"
        );
        let e = load(&[("PLANFILES_JWT_SECRET", "x".repeat(40).as_str())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both set"), "{e}");
        // A file meant to hold one that holds none (`openssl rand ... >` where there is no
        // openssl) is refused, never read as "make one" or as an empty key.
        std::fs::write(dir.path().join("jwt.secret"), " \r\n").unwrap();
        let e = load(&[]).unwrap_err().to_string();
        assert!(
            e.contains("jwt.secret") && e.contains("first line is empty"),
            "{e}"
        );
        std::fs::write(dir.path().join("jwt.secret"), "short\n").unwrap();
        let e = load(&[]).unwrap_err().to_string();
        assert!(e.contains("jwt.secret") && e.contains("16 bytes"), "{e}");
    }

    /// Only the listed variables are read; a non-UTF-8 one is an error that names it and does
    /// not show its bytes.
    #[test]
    fn env_overrides_are_read_by_name_and_must_be_utf8() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || std::ffi::OsString::from_vec(b"s3cr\xffet".to_vec());
        let got = env_overrides(|name| match name {
            "PLANFILES_LOG" => Some("debug".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(got, env(&[("PLANFILES_LOG", "debug")]));
        for name in ENV_OVERRIDES {
            let err = env_overrides(|n| (n == name).then(bad)).unwrap_err();
            assert!(
                matches!(err, ConfigError::Env { name: n, .. } if n == name),
                "{name}: {err:?}"
            );
            let shown = err.to_string();
            assert!(
                shown.starts_with(name) && shown.contains("UTF-8"),
                "{shown}"
            );
            assert!(!shown.contains("s3cr"), "{shown}");
        }
    }

    /// Every number in `[events]` is refused at 0 with an error naming it, and a tenant
    /// share above the process limit is refused.
    #[test]
    fn zero_and_inverted_event_limits_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            })
        };
        for key in [
            "heartbeat_secs",
            "max_streams",
            "max_streams_per_tenant",
            "max_wait_secs",
            "poll_interval_ms",
        ] {
            match load(&format!("[events]\n{key} = 0\n")) {
                Err(ConfigError::Invalid(m)) => {
                    assert!(m.contains(&format!("events.{key} ")), "{m}")
                }
                other => panic!("{key} = 0: {other:?}"),
            }
        }
        assert!(matches!(
            load("[events]\nmax_streams = 10\nmax_streams_per_tenant = 11\n"),
            Err(ConfigError::Invalid(_))
        ));
        let ok = load("[events]\nmax_streams = 10\nmax_streams_per_tenant = 10\n").unwrap();
        assert_eq!(ok.events.max_streams_per_tenant, 10);
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
        // Peers without this shard's own URL: an import could not check where the source
        // moves the tenant.
        std::fs::write(&path, "[cluster]\npeers = [\"http://a:8080\"]\n").unwrap();
        let load = || {
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            })
        };
        assert!(matches!(load(), Err(ConfigError::Invalid(m)) if m.contains("self_url")));
        std::fs::write(
            &path,
            "[cluster]\npeers = [\"http://a:8080\"]\nself_url = \"http://b:8080\"\n",
        )
        .unwrap();
        assert!(load().is_ok());
    }

    /// Every number in `[server]` is refused at 0 with an error naming it, and accepted at 1,
    /// except `workers` (0 = one per CPU). Each integer key of `config.toml`'s `[server]` must
    /// be in the table, so a new setting gets the rule too.
    #[test]
    fn zero_limits_in_server_are_refused() {
        let table = [
            ("body_limit", true),
            ("workers", false),
            ("client_request_timeout_secs", true),
            ("shutdown_timeout_secs", true),
            ("drain_secs", false),
            ("body_timeout_secs", true),
            ("queue_timeout_secs", true),
            ("body_min_bytes_per_sec", true),
            ("write_queue_depth", true),
            ("clone_stall_secs", true),
            ("send_stall_secs", true),
            ("bodies_in_flight_bytes", true),
            ("bodies_per_tenant_bytes", true),
        ];
        let shipped =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml"))
                .unwrap();
        let shipped: toml::Table = toml::from_str(&shipped).unwrap();
        for (key, value) in shipped["server"].as_table().unwrap() {
            if value.is_integer() {
                assert!(
                    table.iter().any(|(k, _)| k == key),
                    "server.{key} is not in the table"
                );
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: String| {
            std::fs::write(&path, text).unwrap();
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            })
        };
        for (key, refused) in table {
            match load(format!("[server]\n{key} = 0\n")) {
                Err(ConfigError::Invalid(message)) if refused => {
                    assert!(
                        message.contains(&format!("server.{key} ")),
                        "{key}: {message}"
                    )
                }
                Ok(_) if !refused => {}
                other => panic!("{key} = 0: {other:?}"),
            }
            // 1 is fine (the byte budgets need body_limit no larger).
            let one = if key.starts_with("bodies_") {
                "[server]\nbody_limit = 1\nbodies_per_tenant_bytes = 1\nbodies_in_flight_bytes = 1\n"
                    .to_owned()
            } else {
                format!("[server]\n{key} = 1\n")
            };
            assert!(load(one).is_ok(), "{key} = 1");
        }
    }

    #[test]
    fn cors_origins_must_be_origins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |origins: &str| {
            std::fs::write(
                &path,
                format!("[server]\ncors_allowed_origins = {origins}\n"),
            )
            .unwrap();
            Config::load(&Sources {
                explicit_file: Some(path.clone()),
                env: vec![],
            })
        };
        assert!(Config::default().server.cors_allowed_origins.is_empty());
        let good = load(r#"["https://console.example.com", "http://localhost:3000"]"#).unwrap();
        assert_eq!(good.server.cors_allowed_origins.len(), 2);
        for bad in [
            r#"["*"]"#,
            r#"["https://console.example.com/"]"#,
            r#"["console.example.com"]"#,
        ] {
            match load(bad) {
                Err(ConfigError::Invalid(m)) => {
                    assert!(m.contains("server.cors_allowed_origins"), "{m}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
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
        // The default, relative: read from the config file's folder, as every relative path.
        assert_eq!(load(""), Some(dir.path().join("repos-fixture")));
        assert_eq!(load("[storage]\nseed_from = \"\"\n"), None);
        assert_eq!(
            load("[storage]\nseed_from = \"/x\"\n"),
            Some(PathBuf::from("/x"))
        );
    }

    /// Whatever is broken on the secret's line, the error names the line and column and
    /// never prints the value.
    #[test]
    fn a_parse_error_does_not_echo_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let secret = "Zq8vK2pL9xR4tW7mN3bH6cJ1";
        let cases = [
            format!("[auth]\nsecret = \"{secret}\n"),
            format!("[auth]\nsecret = {secret}\n"),
            format!("[auth]\nsecret = \"{secret}\" trailing\n"),
            format!("[auth]\nsecret = '{secret}' '{secret}'\n"),
            format!("[auth]\nsecret = \"\"\"{secret}\n"),
            format!("[auth]\nsecret = [\"{secret}\"]\n"),
            format!("[auth]\nsecret = {{ v = \"{secret}\" }}\n"),
            format!("[auth]\nsecret = \"{secret}\"\nsecret = \"{secret}\"\n"),
            format!("[auth]\nsecrett = \"{secret}\"\n"),
            format!("[auth]\n{secret}\n"),
            format!("[auth]\nsecret =\n{secret}\n"),
            format!("[auth]\nalgorithm = \"{secret}\"\n"),
            "[auth]\nsecret = 918273645546372819\n".to_owned(),
            "[auth]\nsecret = 9182.73645546372819\n".to_owned(),
        ];
        for text in &cases {
            std::fs::write(&path, text).unwrap();
            let err = Config::from_file(&path).unwrap_err();
            let shown = err.to_string();
            assert!(
                matches!(err, ConfigError::Parse { line: 2 | 3, .. }),
                "{text}: {shown}"
            );
            for needle in [secret, "Zq8vK2", "918273645546372819", "9182"] {
                assert!(!shown.contains(needle), "{text}: {shown}");
            }
        }
    }

    #[test]
    fn watch_refs_is_auto_true_or_false() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let parse = |value: &str| {
            std::fs::write(&path, format!("[storage]\nwatch_refs = {value}\n")).unwrap();
            Config::from_file(&path).map(|c| c.storage.watch_refs)
        };
        assert_eq!(Config::default().storage.watch_refs, WatchRefs::Auto);
        assert_eq!(parse("\"auto\"").unwrap(), WatchRefs::Auto);
        assert_eq!(parse("true").unwrap(), WatchRefs::On);
        assert_eq!(parse("false").unwrap(), WatchRefs::Off);
        for bad in ["\"yes\"", "\"Auto\"", "1", "\"\""] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("true, false or \"auto\""), "{bad}: {err}");
        }
    }

    #[test]
    fn durability_is_auto_by_default_and_group_needs_no_trust_to_parse() {
        use crate::storage::DurabilitySetting;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let parse = |text: &str| {
            std::fs::write(&path, format!("[storage]\n{text}\n")).unwrap();
            Config::from_file(&path).map(|c| (c.storage.durability, c.storage.trust_syncfs))
        };
        let default = Config::default().storage;
        assert_eq!(
            (default.durability, default.trust_syncfs),
            (DurabilitySetting::Auto, false)
        );
        assert_eq!(
            parse("durability = \"group\"\ntrust_syncfs = true").unwrap(),
            (DurabilitySetting::Group, true)
        );
        assert_eq!(
            parse("durability = \"fsync\"").unwrap(),
            (DurabilitySetting::Fsync, false)
        );
        for bad in [
            "durability = \"syncfs\"",
            "durability = true",
            "trust_syncfs = \"yes\"",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_binds() {
        for (bind, loopback) in [
            ("127.0.0.1:8080", true),
            ("127.3.4.5:1", true),
            ("[::1]:8080", true),
            ("localhost:8080", true),
            ("LOCALHOST:0", true),
            ("[::ffff:127.0.0.1]:80", true),
            ("0.0.0.0:8080", false),
            ("[::]:8080", false),
            ("10.0.0.1:8080", false),
            ("128.0.0.1:8080", false),
            (":8080", false),
            ("example.com:8080", false),
            ("localhost.example.com:80", false),
            ("8080", false),
        ] {
            let server = ServerConfig {
                bind: bind.into(),
                ..ServerConfig::default()
            };
            assert_eq!(server.binds_loopback(), loopback, "{bind}");
        }
    }

    #[test]
    fn weak_secrets() {
        let auth = |algorithm, secret: &str| AuthConfig {
            algorithm,
            secret: secret.into(),
            public_key_file: Some("/k.pem".into()),
            ..AuthConfig::default()
        };
        assert!(AuthConfig::default().weak_secret().is_some());
        assert!(auth(Algorithm::HS256, DEMO_SECRET).weak_secret().is_some());
        assert!(auth(Algorithm::HS256, &"x".repeat(31))
            .weak_secret()
            .is_some());
        assert!(auth(Algorithm::HS256, &"x".repeat(32))
            .weak_secret()
            .is_none());
        assert!(auth(Algorithm::RS256, DEMO_SECRET).weak_secret().is_none());
        assert!(auth(Algorithm::ES256, "").weak_secret().is_none());
    }

    #[test]
    fn the_debug_form_hides_the_secret() {
        let c = Config::default();
        assert!(!format!("{c:?}").contains(&c.auth.secret));
    }
}
