//! The sections of `config.toml` (`[server]`, `[storage]`, `[auth]`, `[commit]`, `[signing]`, `[log]`, `[metrics]`, `[events]`, `[cluster]`, `[validation]`, `[git]`): each setting, its default and what it means.
use serde::Deserialize;
use std::path::PathBuf;

/// `[events]`: the change stream (`GET /plans/events`) and long-polls (`Prefer: wait`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Seconds between `: keep-alive` comments on an idle stream.
    pub heartbeat_secs: u64,
    /// Streams and held long-polls open at once in the process; more get 503 `busy`.
    pub max_streams: usize,
    /// Streams and held long-polls of one tenant at once; more get 503 `busy`.
    pub max_streams_per_tenant: usize,
    /// The longest `Prefer: wait` honoured, in seconds.
    pub max_wait_secs: u64,
    /// With `storage.watch_refs` off: how often (ms) each watched tenant's ref is read.
    pub poll_interval_ms: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            heartbeat_secs: 15,
            max_streams: 10_000,
            max_streams_per_tenant: 1_000,
            max_wait_secs: 60,
            poll_interval_ms: 500,
        }
    }
}

impl EventsConfig {
    /// The settings that must be positive, by name.
    pub(super) fn positive_settings(&self) -> [(&'static str, u64); 5] {
        [
            ("heartbeat_secs", self.heartbeat_secs),
            ("max_streams", self.max_streams as u64),
            ("max_streams_per_tenant", self.max_streams_per_tenant as u64),
            ("max_wait_secs", self.max_wait_secs),
            ("poll_interval_ms", self.poll_interval_ms),
        ]
    }
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
    /// Seconds a SIGTERM keeps serving with `/readyz` answering 503 before the listener
    /// closes, so that load balancers stop sending first; 0: close at once.
    pub drain_secs: u64,
    /// Seconds a client has to send a whole body once it has its turn.
    pub body_timeout_secs: u64,
    /// Bytes of request bodies (by Content-Length; body_limit when chunked) read and
    /// processed at once; more wait their turn.
    pub bodies_in_flight_bytes: usize,
    /// Seconds a request waits for a turn (its tenant's writer, the body budget, a clone
    /// slot) before it is answered 503 `busy` with `Retry-After`.
    pub queue_timeout_secs: u64,
    /// Bytes of request bodies one tenant may have in flight (at least body_limit).
    pub bodies_per_tenant_bytes: usize,
    /// After a grace of 5 s, a body must keep arriving at this many bytes per second on
    /// average, or it is cut off with 408 (slow-body defence, like Apache's MinRate).
    pub body_min_bytes_per_sec: u64,
    /// Writes of one tenant queued or running at most; more are answered 503 `busy`.
    pub write_queue_depth: usize,
    /// Seconds a clone or fetch may go without the client accepting a byte; then its
    /// `git upload-pack` is stopped and its turn given to the next.
    pub clone_stall_secs: u64,
    /// Seconds any answer may go without the client accepting a byte; then the connection
    /// is closed (TCP_USER_TIMEOUT), so a client that stops reading holds no socket buffers.
    pub send_stall_secs: u64,
    /// Origins (`scheme://host[:port]`) whose pages may call the API from a browser (CORS);
    /// none by default, so only pages the service serves itself (the console) can.
    pub cors_allowed_origins: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Where tenant repositories live: `<data_dir>/tenants/<tenant_id>.git`.
    pub data_dir: PathBuf,
    /// Copy the demo tenants from this directory into an empty data dir on start; `""` (or
    /// `None`) turns seeding off.
    pub seed_from: Option<PathBuf>,
    /// How writes reach the disk: `auto` (group commit where `syncfs` is known to flush,
    /// fsync elsewhere), `group` (shared `syncfs`) or `fsync` (libgit2's fsyncs).
    pub durability: crate::storage::DurabilitySetting,
    /// The operator knows that `syncfs` flushes this volume although planfiles does not
    /// recognise it as one that does (virtiofs reports the FUSE type): `auto` then means
    /// group commit, and `group` starts.
    pub trust_syncfs: bool,
    /// Repack a tenant once it holds about this many loose objects; 0 turns upkeep off.
    pub repack_loose_objects: usize,
    /// Learn through inotify that a tenant's `main` has not moved, so cached GETs need no
    /// disk read. `auto`: on unless the data dir is on a network, cluster or FUSE volume,
    /// whose other hosts' changes inotify does not see.
    pub watch_refs: WatchRefs,
    /// The secret that signs history cursors and keys idempotency fingerprints (64 hex
    /// digits), made at the first start when absent; default `<data_dir>/cursor.key`.
    /// Shards share it, as they share the signing key.
    pub cursor_key_file: Option<PathBuf>,
}

/// `storage.watch_refs`: `"auto"`, or `true`/`false`, which are always honoured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WatchRefs {
    /// On, unless the data dir's volume is shared with other hosts.
    #[default]
    Auto,
    On,
    Off,
}

impl<'de> Deserialize<'de> for WatchRefs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WatchRefs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<WatchRefs, E> {
                Ok(if on { WatchRefs::On } else { WatchRefs::Off })
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<WatchRefs, E> {
                match text {
                    "auto" => Ok(WatchRefs::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(text), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
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
    /// The HS256 secret's file (its first line), used instead of `secret`; `serve` makes it
    /// (64 random hex digits, mode 0600) when absent. Shards and containers share it.
    pub secret_file: Option<PathBuf>,
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
            .field("secret_file", &self.secret_file)
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

/// `[signing]`: the SSH signature (ed25519, namespace `git`) on every commit the service makes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SigningConfig {
    /// Sign commits. Off only to measure what signing costs; no key then counts, so every
    /// commit (also those signed before) reads `verified: false`.
    pub enabled: bool,
    /// The private key (OpenSSH ed25519, mode 0600), made at the first start when absent and
    /// no unlisted key signed in the data dir before (`signing-key-in-use.pub`); default
    /// `<data_dir>/signing_key`. Shards share it, as they share `cursor.key`.
    pub key_file: Option<PathBuf>,
    /// Retired keys whose signatures still verify (OpenSSH public key lines).
    pub previous_public_keys: Vec<String>,
}

impl Default for SigningConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            key_file: None,
            previous_public_keys: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A tracing filter such as `info` or `planfiles=debug,actix_web=info`.
    pub filter: String,
    /// `text` or `json`.
    pub format: String,
}

/// The secret that ships in `config.toml` and the README: anyone can sign tokens with it.
pub const DEMO_SECRET: &str = "planfiles-demo-secret-change-me";
/// The shortest HS256 secret `serve` accepts on an address other hosts can reach.
pub const MIN_SERVING_SECRET_LEN: usize = 32;

impl AuthConfig {
    /// Why the HS256 secret must not be used on an address other hosts can reach, if it must
    /// not: the demo value, or fewer than [`MIN_SERVING_SECRET_LEN`] bytes. RS256 and ES256
    /// use no secret.
    pub fn weak_secret(&self) -> Option<&'static str> {
        if self.algorithm != Algorithm::HS256 {
            None
        } else if self.secret == DEMO_SECRET {
            Some("the demo HS256 secret")
        } else if self.secret.len() < MIN_SERVING_SECRET_LEN {
            Some("an HS256 secret shorter than 32 bytes")
        } else {
            None
        }
    }
}

impl ServerConfig {
    /// The settings that must be positive, by name: every timeout, rate, depth and size.
    pub(super) fn positive_settings(&self) -> [(&'static str, u64); 9] {
        [
            ("body_limit", self.body_limit as u64),
            (
                "client_request_timeout_secs",
                self.client_request_timeout_secs,
            ),
            ("shutdown_timeout_secs", self.shutdown_timeout_secs),
            ("body_timeout_secs", self.body_timeout_secs),
            ("queue_timeout_secs", self.queue_timeout_secs),
            ("body_min_bytes_per_sec", self.body_min_bytes_per_sec),
            ("write_queue_depth", self.write_queue_depth as u64),
            ("clone_stall_secs", self.clone_stall_secs),
            ("send_stall_secs", self.send_stall_secs),
        ]
    }

    /// The first entry of `cors_allowed_origins` that is not an origin as a browser sends it
    /// (`http` or `https`, `://`, a lower-case host, an optional port, nothing after), if any.
    pub(super) fn bad_cors_origin(&self) -> Option<&str> {
        self.cors_allowed_origins
            .iter()
            .find(|o| !is_origin(o))
            .map(String::as_str)
    }

    /// What is wrong with `bind`, if anything: it must be `host:port`, the host an IP address
    /// (`[v6]` in brackets) or a host name, the port a number from 0 to 65535.
    pub fn bind_problem(&self) -> Option<String> {
        let bind = self.bind.trim();
        let example =
            "for example \"127.0.0.1:8080\" (this host only) or \"0.0.0.0:8080\" (every interface)";
        let Some((host, port)) = bind.rsplit_once(':') else {
            return Some(format!(
                "server.bind = {bind:?} has no port: write host:port, {example}"
            ));
        };
        if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
            return Some(format!(
                "server.bind = {bind:?}: an IPv6 address goes in brackets with its port, as \"[::1]:8080\""
            ));
        }
        if port.parse::<u16>().is_err() {
            return Some(format!(
                "server.bind = {bind:?}: the port {port:?} is not a number from 0 to 65535; {example}"
            ));
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let is_ip = bare.parse::<std::net::IpAddr>().is_ok();
        let is_name = !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !is_ip && !is_name {
            return Some(format!(
                "server.bind = {bind:?}: {host:?} is neither an IP address nor a host name; {example}"
            ));
        }
        None
    }

    /// Whether `bind` names a loopback address (127.0.0.0/8, `::1`, `localhost`), which only
    /// this host can reach. Any other host, name or form counts as reachable.
    pub fn binds_loopback(&self) -> bool {
        let Some((host, _port)) = self.bind.rsplit_once(':') else {
            return false;
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        match host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(std::net::IpAddr::V6(ip)) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            Err(_) => false,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            body_limit: 1024 * 1024,
            workers: 0,
            client_request_timeout_secs: 5,
            shutdown_timeout_secs: 30,
            drain_secs: 0,
            bodies_in_flight_bytes: 16 * 1024 * 1024,
            body_timeout_secs: 30,
            queue_timeout_secs: 10,
            bodies_per_tenant_bytes: 4 * 1024 * 1024,
            body_min_bytes_per_sec: 8 * 1024,
            write_queue_depth: 16,
            clone_stall_secs: 30,
            send_stall_secs: 30,
            cors_allowed_origins: Vec::new(),
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
            trust_syncfs: false,
            watch_refs: WatchRefs::Auto,
            cursor_key_file: None,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::HS256,
            secret: DEMO_SECRET.into(),
            secret_file: None,
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

/// An origin exactly as browsers send it in `Origin` (the WHATWG URL serialization):
/// `http` or `https`, `://`, the host in its canonical form (a lower-case ASCII name of
/// non-empty labels, an IPv4 address in dotted decimal, or a bracketed IPv6 address as
/// RFC 5952 writes it), the port only when it is not the scheme's default, nothing after.
/// The listed origin is compared byte for byte with the header, so any other spelling would
/// never match. (Checked here rather than with the `url` crate, which would add about
/// 300 KB to the binary for this one check.)
fn is_origin(origin: &str) -> bool {
    let (rest, default_port) = if let Some(rest) = origin.strip_prefix("https://") {
        (rest, "443")
    } else if let Some(rest) = origin.strip_prefix("http://") {
        (rest, "80")
    } else {
        return false;
    };
    let (host, port) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains(']') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    let port_ok = port.is_none_or(|p| {
        p != default_port
            && !p.starts_with('0')
            && p.parse::<u16>().is_ok_and(|n| n > 0)
            && p.bytes().all(|b| b.is_ascii_digit())
    });
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.to_string() == v6)
    } else if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        host.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.to_string() == host)
    } else {
        host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
    };
    port_ok && host_ok
}

#[cfg(test)]
mod tests {
    #[test]
    fn cors_origins_are_what_browsers_send_in_origin() {
        for good in [
            "https://console.example.com",
            "http://localhost:3000",
            "http://127.0.0.1:8081",
            "http://[::1]:8080",
            "https://a-b.example",
            "http://under_score.example",
            "https://xn--bcher-kva.example",
            "http://[2001:db8::1]:8443",
            "http://192.168.0.10:65535",
        ] {
            assert!(super::is_origin(good), "{good}");
        }
        for bad in [
            "*",
            "null",
            "console.example.com",
            "https://console.example.com/",
            "https://console.example.com/ui",
            "https://Console.example.com",
            "ftp://example.com",
            "https://",
            "https://example.com:",
            "https://example.com:80a",
            "https://user@example.com",
            "https://example.com?x",
            "http://[::1",
            "https://x.example:443",
            "http://x.example:80",
            "http://x.example:65536",
            "http://x.example:080",
            "http://[0:0:0:0:0:0:0:1]:8080",
            "http://010.0.0.1",
            "https://bücher.example",
            "chrome-extension://abcdef",
            "http://a..b",
            "http://.",
            "http://x.example:0",
            "http://256.0.0.1",
            "http://[2001:DB8::1]",
            "http://x.example:8080/",
        ] {
            assert!(!super::is_origin(bad), "{bad}");
        }
    }
}

/// `[cluster]`: this instance as one shard among several behind a router (docs/SCALING.md).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This shard's base URL as the other shards reach it (`http://10.0.0.1:8080`): the
    /// source a target imports from when `tenant move` runs here. "" until set.
    pub self_url: String,
    /// The shards this one may import tenants from (`POST /admin/tenants/{id}/import`). Empty:
    /// imports over HTTP are refused, so that a token can never make this shard fetch from
    /// an address of its choosing.
    pub peers: Vec<String>,
    /// Seconds a tenant that moved away stays here (answering 421) before its repository is
    /// archived to `<data_dir>/archive/` (the service's sweep, `maintain`); archived
    /// repositories are never deleted.
    pub moved_grace_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            self_url: String::new(),
            peers: Vec::new(),
            moved_grace_secs: 300,
        }
    }
}

impl ClusterConfig {
    /// The peers, parsed; the first that is not a shard URL is the error.
    pub fn peer_urls(&self) -> Result<Vec<crate::domain::ShardUrl>, String> {
        self.peers
            .iter()
            .map(|p| {
                crate::domain::ShardUrl::parse(p).map_err(|e| format!("cluster.peers: {p:?}: {e}"))
            })
            .collect()
    }

    /// `self_url`, parsed; `None` while unset.
    pub fn self_url(&self) -> Result<Option<crate::domain::ShardUrl>, String> {
        if self.self_url.is_empty() {
            return Ok(None);
        }
        crate::domain::ShardUrl::parse(&self.self_url)
            .map(Some)
            .map_err(|e| format!("cluster.self_url: {:?}: {e}", self.self_url))
    }
}

/// `[validation]`: the operator's JSON Schemas for the two files (`src/validation.rs`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ValidationConfig {
    /// The schemas folder: `integrations/<kind>.json`, `configuration.json` and what they
    /// `$ref`. Relative to the config file's folder; `""`: no schemas. Set in the config
    /// file, a folder that does not exist refuses the start; the default's absence is a
    /// warning (log, `/readyz`, `planfiles_schemas_loaded`).
    pub schemas_dir: PathBuf,
    /// Whether a top-level key of the integration file without a schema is allowed.
    pub unknown_integrations: crate::validation::UnknownIntegrations,
    /// Whether `schemas_dir` was written in the config file (not the default).
    #[serde(skip)]
    pub schemas_dir_set: bool,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        Self {
            schemas_dir: PathBuf::from("schemas"),
            unknown_integrations: crate::validation::UnknownIntegrations::Allow,
            schemas_dir_set: false,
        }
    }
}

impl ValidationConfig {
    /// The folder to read, if any.
    pub fn dir(&self) -> Option<&std::path::Path> {
        (!self.schemas_dir.as_os_str().is_empty()).then_some(self.schemas_dir.as_path())
    }

    /// The folder that must be there before the service starts: one the config file names.
    pub fn required_dir(&self) -> Option<&std::path::Path> {
        self.dir().filter(|_| self.schemas_dir_set)
    }
}

/// `path` placed under `base` (the config file's folder) when it is relative and not empty.
pub fn beside(base: &std::path::Path, path: &mut PathBuf) {
    if path.is_relative() && !path.as_os_str().is_empty() && !base.as_os_str().is_empty() {
        *path = base.join(&*path);
    }
}

/// `[git]`: `git push` to `/git/<tenant>.git`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GitConfig {
    /// The largest push (its request body: commands and pack), in bytes; larger ones get 413.
    pub push_max_bytes: usize,
}

impl Default for GitConfig {
    fn default() -> Self {
        Self {
            push_max_bytes: 10 * 1024 * 1024,
        }
    }
}

/// `[webhooks]`: deliveries of each commit to the tenants' subscriptions (`src/webhooks.rs`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Seconds to wait before each retry of a failed delivery (each with up to 10% jitter);
    /// after the last, the subscription is `failing` until it is resumed.
    pub retry_schedule_secs: Vec<u64>,
    /// Allow `http://` destinations (else only `https://`).
    pub allow_http: bool,
    /// Allow destinations in private, loopback, link-local or reserved address ranges.
    pub allow_private_networks: bool,
    /// Host names deliveries may go to (`*.example.com` for every name under it); empty: any.
    pub allowed_hosts: Vec<String>,
    /// The most subscriptions a tenant may have.
    pub max_per_tenant: usize,
    /// Attempts in flight at once, in all and per tenant.
    pub max_in_flight: usize,
    pub max_in_flight_per_tenant: usize,
    /// An attempt's connection, and the whole attempt (connection, request, reply).
    pub connect_timeout_secs: u64,
    pub attempt_timeout_secs: u64,
    /// The CPU the dispatcher may use, in cores (its threads' CPU time over time); 0: no
    /// limit.
    pub cpu_share: f64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            retry_schedule_secs: vec![5, 300, 1800, 7200, 18000, 36000, 36000],
            allow_http: false,
            allow_private_networks: false,
            allowed_hosts: Vec::new(),
            max_per_tenant: 100,
            max_in_flight: 64,
            max_in_flight_per_tenant: 8,
            connect_timeout_secs: 5,
            attempt_timeout_secs: 15,
            cpu_share: 0.25,
        }
    }
}

impl WebhooksConfig {
    /// A setting that cannot work, named.
    pub fn problem(&self) -> Option<String> {
        let zero = [
            ("max_per_tenant", self.max_per_tenant as u64),
            ("max_in_flight", self.max_in_flight as u64),
            (
                "max_in_flight_per_tenant",
                self.max_in_flight_per_tenant as u64,
            ),
            ("connect_timeout_secs", self.connect_timeout_secs),
            ("attempt_timeout_secs", self.attempt_timeout_secs),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        if let Some((name, _)) = zero {
            return Some(format!("webhooks.{name} must be at least 1, not 0"));
        }
        if self.cpu_share != 0.0 && !(0.01..=1024.0).contains(&self.cpu_share) {
            return Some(format!(
                "webhooks.cpu_share must be 0 (no limit) or between 0.01 and 1024 cores, not {}",
                self.cpu_share
            ));
        }
        if self.retry_schedule_secs.len() > 100 {
            return Some("webhooks.retry_schedule_secs has at most 100 entries".into());
        }
        if let Some(s) = self.retry_schedule_secs.iter().find(|s| **s > 7 * 86_400) {
            return Some(format!(
                "webhooks.retry_schedule_secs: {s} is more than a week (604800)"
            ));
        }
        if let Some(h) = self.allowed_hosts.iter().find(|h| {
            let name = h.strip_prefix("*.").unwrap_or(h);
            name.is_empty()
                || name.contains(['*', '/', ':', ' '])
                || *name != name.to_ascii_lowercase()
        }) {
            return Some(format!(
                "webhooks.allowed_hosts: {h:?} is not a lowercase host name (or *.name)"
            ));
        }
        None
    }
}
