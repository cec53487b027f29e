//! Test harness: the real server on port 0 over a temp copy of `repos-fixture/`, real JWTs
//! minted here (independently of the service's own minting code), and the git CLI.
#![allow(dead_code)]

pub mod process;
pub mod receiver;
pub mod relay;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use planfiles::config::{AuthConfig, Config, WatchRefs};
use planfiles::startup::Application;
use planfiles::storage;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

pub const SECRET: &str = "test-secret-0123456789abcdef";
pub const ALL: &[&str] = &["jit.integrations.write", "jit.preferences.write"];

/// `[webhooks]` for a receiver on this machine: http and loopback allowed, retries after 1 s
/// and 1 s, attempts cut after 2 s.
pub fn local_webhooks() -> planfiles::config::WebhooksConfig {
    planfiles::config::WebhooksConfig {
        allow_http: true,
        allow_private_networks: true,
        retry_schedule_secs: vec![1, 1],
        attempt_timeout_secs: 2,
        ..Default::default()
    }
}

/// The `webhook-id`s of the integration file's events on `main`'s first-parent line after
/// `from`, oldest first, in the repository of `tenant` at `repo`.
pub fn integration_event_ids(repo: &Path, tenant: &str, from: &str) -> Vec<String> {
    git_in(
        repo,
        &[
            "rev-list",
            "--first-parent",
            "--reverse",
            &format!("{from}..main"),
        ],
    )
    .lines()
    .map(|c| format!("msg_{tenant}_{c}_integration-file"))
    .collect()
}

/// The token that manages webhooks.
pub fn webhooks_token(tenant: &str) -> String {
    token(tenant, &["planfiles.webhooks.write"])
}

/// Gives a shard's data dir the secrets every shard shares (docs/SCALING.md): the data dir
/// key (`cursor.key`: idempotency fingerprints and history cursors made on one shard hold on
/// the others) and the commit signing key (`signing_key`, mode 0600: a tenant's history keeps
/// its signer across a move, which checks it).
pub fn shared_shard_secrets(data_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(data_dir.join("cursor.key"), "5eed".repeat(16)).unwrap();
    let key = planfiles::signing::Signer::from_seed(&[0x5e; 32], "planfiles@localhost");
    let path = data_dir.join("signing_key");
    std::fs::write(&path, key.to_openssh().as_bytes()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The example schemas that ship with the project (`schemas/`).
pub fn shipped_schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("repos-fixture")
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Signs any claims as an HS256 JWT with `secret`.
pub fn sign_hs256(secret: &str, header: &Value, claims: &Value) -> String {
    let signing_input = format!(
        "{}.{}",
        B64.encode(serde_json::to_vec(header).unwrap()),
        B64.encode(serde_json::to_vec(claims).unwrap())
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        B64.encode(mac.finalize().into_bytes())
    )
}

/// A valid token for `tenant` with `permissions`, signed with the test secret.
pub fn token(tenant: &str, permissions: &[&str]) -> String {
    sign_hs256(
        SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": tenant, "permissions": permissions, "exp": now() + 600,
                "sub": "tester", "email": "tester@example.com", "name": "Test Er"}),
    )
}

/// A valid token for `tenant` as the person `sub` (name and email made from it).
pub fn token_as(tenant: &str, sub: &str, permissions: &[&str]) -> String {
    sign_hs256(
        SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": tenant, "permissions": permissions, "exp": now() + 600,
                "sub": sub, "email": format!("{sub}@example.com"), "name": sub}),
    )
}

pub struct TestApp {
    pub addr: String,
    pub data_dir: tempfile::TempDir,
    pub client: reqwest::Client,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Ended first on drop, so that open streams do not hold the graceful stop.
    pub events: planfiles::events::Events,
    /// Every tenant's repository is checked with `git fsck --strict` on drop, unless the
    /// test itself wrote objects fsck refuses ([`TestApp::wrote_objects_fsck_refuses`]).
    fsck_on_drop: bool,
}

/// `count` commits on top of `main`, each setting `path` to `<i>\n` (valid YAML), made now
/// by git fast-import (thousands in a second).
pub fn fast_commits(repo: &Path, count: usize, path: &str) {
    let head = git_in(repo, &["rev-parse", "main"]);
    let now = now();
    let mut stream = String::new();
    for i in 0..count {
        let msg = format!("outside {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter o <o@x> {now} +0000\ndata {}\n{msg}",
            msg.len()
        ));
        if i == 0 {
            stream.push_str(&format!("from {head}\n"));
        }
        let text = format!("n: {i}\n");
        stream.push_str(&format!(
            "M 100644 inline {path}\ndata {}\n{text}\n",
            text.len()
        ));
    }
    git_stdin(repo, &["fast-import", "--quiet"], &stream);
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// How a test's server is set up, as production reads it from its config file: each
/// setting a test needs, then [`Spawn::spawn`] (zero2prod's `spawn_app`, with a builder).
#[derive(Default)]
pub struct Spawn {
    data_dir: Option<tempfile::TempDir>,
    auth: Option<AuthConfig>,
    repack_threshold: usize,
    metrics_require_token: bool,
    limits: Option<planfiles::http::Limits>,
    write_hook: Option<storage::WriteHook>,
    events: Option<(planfiles::config::EventsConfig, bool)>,
    signing: Option<planfiles::config::SigningConfig>,
    validation: Option<planfiles::config::ValidationConfig>,
    webhooks: Option<planfiles::config::WebhooksConfig>,
    cors_origins: Vec<String>,
    cursor_key_file: Option<PathBuf>,
}

impl Spawn {
    /// Over this data dir (default: a fresh copy of the fixture's tenants).
    pub fn data_dir(mut self, dir: tempfile::TempDir) -> Self {
        self.data_dir = Some(dir);
        self
    }

    /// With these `[auth]` settings (default: HS256 with [`SECRET`]).
    pub fn auth(mut self, auth: AuthConfig) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Repacking a tenant in the background once it has about `threshold` loose objects.
    pub fn repack(mut self, threshold: usize) -> Self {
        self.repack_threshold = threshold;
        self
    }

    /// With `metrics.require_token`.
    pub fn metrics_require_token(mut self) -> Self {
        self.metrics_require_token = true;
        self
    }

    /// With these limits (body, budgets, the write queue).
    pub fn limits(mut self, limits: planfiles::http::Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// With a hook storage runs before it moves a ref.
    pub fn write_hook(mut self, hook: storage::WriteHook) -> Self {
        self.write_hook = Some(hook);
        self
    }

    /// With these `[events]` settings, and `storage.watch_refs` on or off.
    pub fn events(mut self, events: planfiles::config::EventsConfig, watch_refs: bool) -> Self {
        self.events = Some((events, watch_refs));
        self
    }

    /// With these `[signing]` settings.
    pub fn signing(mut self, signing: planfiles::config::SigningConfig) -> Self {
        self.signing = Some(signing);
        self
    }

    /// With the schemas of `dir` (`unknown` for `validation.unknown_integrations`); by
    /// default the tests run with none.
    pub fn schemas(mut self, dir: &Path, unknown: &str) -> Self {
        self.validation = Some(planfiles::config::ValidationConfig {
            schemas_dir: dir.to_owned(),
            unknown_integrations: serde_json::from_value(json!(unknown)).unwrap(),
            schemas_dir_set: true,
        });
        self
    }

    /// With these `[webhooks]` settings.
    pub fn webhooks(mut self, webhooks: planfiles::config::WebhooksConfig) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// With `server.cors_allowed_origins`.
    pub fn cors_origins(mut self, origins: Vec<String>) -> Self {
        self.cors_origins = origins;
        self
    }

    /// With `storage.cursor_key_file`.
    pub fn cursor_key_file(mut self, path: &Path) -> Self {
        self.cursor_key_file = Some(path.to_owned());
        self
    }

    /// Builds what production builds (`Application::build`) from a config of these settings:
    /// no seeding, two workers, and runs it on port 0.
    pub async fn spawn(self) -> TestApp {
        storage::init_git();
        let data_dir = self.data_dir.unwrap_or_else(|| {
            let dir = tempfile::tempdir().unwrap();
            copy_tree(&fixture_dir().join("tenants"), &dir.path().join("tenants"));
            dir
        });
        let mut config = Config::default();
        config.server.bind = "127.0.0.1:0".into();
        config.server.workers = 2;
        config.server.shutdown_timeout_secs = 5;
        config.storage.data_dir = data_dir.path().to_owned();
        config.storage.seed_from = None;
        config.storage.repack_loose_objects = self.repack_threshold;
        config.storage.cursor_key_file = self.cursor_key_file;
        config.commit.committer_email = "planfiles@test".into();
        config.auth = self.auth.unwrap_or_else(|| AuthConfig {
            secret: SECRET.into(),
            ..AuthConfig::default()
        });
        config.metrics.require_token = self.metrics_require_token;
        config.server.cors_allowed_origins = self.cors_origins;
        if let Some(limits) = self.limits {
            let server = &mut config.server;
            server.body_limit = limits.body_limit;
            server.body_timeout_secs = limits.body_pace.total.as_secs();
            server.body_min_bytes_per_sec = limits.body_pace.min_bytes_per_sec;
            server.bodies_in_flight_bytes = limits.bodies_in_flight;
            server.bodies_per_tenant_bytes = limits.bodies_per_tenant;
            server.write_queue_depth = limits.write_queue_depth;
            server.queue_timeout_secs = limits.queue_timeout.as_secs();
        }
        if let Some((events, watch_refs)) = self.events {
            config.events = events;
            config.storage.watch_refs = if watch_refs {
                WatchRefs::On
            } else {
                WatchRefs::Off
            };
        }
        if let Some(signing) = self.signing {
            config.signing = signing;
        }
        config.validation =
            self.validation
                .unwrap_or_else(|| planfiles::config::ValidationConfig {
                    schemas_dir: PathBuf::new(),
                    ..Default::default()
                });
        config.webhooks = self.webhooks.unwrap_or_default();
        let app = Application::build_with(&config, self.write_hook).unwrap();
        let events = app.events();
        let addr = format!("http://{}", app.addr().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = app.run().unwrap();
                tx.send(server.handle()).unwrap();
                server.await.unwrap();
            })
        });
        let handle = rx.recv().unwrap();
        TestApp {
            addr,
            data_dir,
            // Idle connections are dropped before the server's keep-alive (5 s) closes them:
            // a request sent on a connection the server is closing at that moment fails
            // (`IncompleteMessage`), which a loaded machine made happen once.
            client: reqwest::Client::builder()
                .pool_idle_timeout(std::time::Duration::from_secs(3))
                .build()
                .unwrap(),
            handle,
            fsck_on_drop: true,
            thread: Some(thread),
            events,
        }
    }
}

impl TestApp {
    /// A server to set up: `TestApp::with().limits(..).spawn().await`.
    pub fn with() -> Spawn {
        Spawn::default()
    }

    /// The server over a fresh copy of the fixture, with default settings.
    pub async fn spawn() -> Self {
        Self::with().spawn().await
    }

    pub async fn spawn_with(auth: AuthConfig) -> Self {
        Self::with().auth(auth).spawn().await
    }

    pub async fn spawn_on(data_dir: tempfile::TempDir, auth: AuthConfig) -> Self {
        Self::with().data_dir(data_dir).auth(auth).spawn().await
    }

    /// The server over a fresh copy of the fixture, repacking a tenant in the background
    /// once it has about `threshold` loose objects.
    pub async fn spawn_with_repack(threshold: usize) -> Self {
        Self::with().repack(threshold).spawn().await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.addr, path)
    }

    /// `GET` of a console path (`/ui/...`) with extra headers.
    pub async fn ui(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.client.get(self.url(path));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.send().await.unwrap()
    }

    /// A CORS preflight (`OPTIONS`) of `path` from `origin` for `method` with `headers`.
    pub async fn preflight(
        &self,
        path: &str,
        origin: &str,
        method: &str,
        headers: &str,
    ) -> reqwest::Response {
        self.client
            .request(reqwest::Method::OPTIONS, self.url(path))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", method)
            .header("Access-Control-Request-Headers", headers)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/events` with a bearer token (if any), a query and a `Last-Event-ID`.
    pub async fn events(
        &self,
        token: Option<&str>,
        query: &str,
        last_event_id: Option<&str>,
    ) -> reqwest::Response {
        let mut req = self.client.get(self.url(&format!("/plans/events{query}")));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        req.send().await.unwrap()
    }

    /// `POST /admin/tenants/<tenant>/import`.
    pub async fn import(
        &self,
        token: &str,
        tenant: &str,
        content_type: &str,
        body: String,
    ) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/admin/tenants/{tenant}/import")))
            .bearer_auth(token)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /plans/events/tickets`.
    pub async fn event_ticket(&self, token: &str) -> reqwest::Response {
        self.client
            .post(self.url("/plans/events/tickets"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// A GET of a file with `If-None-Match` and, if given, `Prefer: wait=N`.
    pub async fn get_if_none_match(
        &self,
        file: &str,
        token: &str,
        etag: &str,
        wait: Option<u64>,
    ) -> reqwest::Response {
        let mut req = self
            .client
            .get(self.url(&format!("/plans/{file}")))
            .bearer_auth(token)
            .header("If-None-Match", etag);
        if let Some(secs) = wait {
            req = req.header("Prefer", format!("wait={secs}"));
        }
        req.send().await.unwrap()
    }

    pub async fn get_integration(&self, token: &str) -> reqwest::Response {
        self.client
            .get(self.url("/plans/integration-file"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub async fn put_integration(&self, token: &str, body: &Value) -> reqwest::Response {
        self.client
            .put(self.url("/plans/integration-file"))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn get_configuration(&self, token: &str) -> reqwest::Response {
        self.client
            .get(self.url("/plans/configuration-file"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub async fn put_configuration(&self, token: &str, body: &Value) -> reqwest::Response {
        self.client
            .put(self.url("/plans/configuration-file"))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/<file>/history?<query>`; `file` is `integration-file` or `configuration-file`.
    pub async fn history(&self, token: &str, file: &str, query: &str) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/plans/{file}/history?{query}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/<file>?ref=<commit>`.
    pub async fn get_at(&self, token: &str, file: &str, commit: &str) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/plans/{file}?ref={commit}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// Any request: `method` on `path` with a bearer token, an optional JSON body and headers.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .client
            .request(method, self.url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(body);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.send().await.unwrap()
    }

    /// `POST /plans/commits` (`query` such as `?dry_run=true`, or empty).
    pub async fn post_commits(&self, token: &str, query: &str, body: &Value) -> reqwest::Response {
        self.send(
            "POST",
            &format!("/plans/commits{query}"),
            token,
            Some(body),
            &[],
        )
        .await
    }

    /// `POST /plans/proposals`.
    pub async fn propose(&self, token: &str, body: &Value) -> reqwest::Response {
        self.send("POST", "/plans/proposals", token, Some(body), &[])
            .await
    }

    /// `PUT /plans/proposals/<n>`.
    pub async fn update_proposal(&self, token: &str, n: u64, body: &Value) -> reqwest::Response {
        self.send(
            "PUT",
            &format!("/plans/proposals/{n}"),
            token,
            Some(body),
            &[],
        )
        .await
    }

    /// `GET /plans/proposals<query>`.
    pub async fn proposals(&self, token: &str, query: &str) -> reqwest::Response {
        self.send("GET", &format!("/plans/proposals{query}"), token, None, &[])
            .await
    }

    /// `GET /plans/proposals/<n>`.
    pub async fn proposal(&self, token: &str, n: u64) -> reqwest::Response {
        self.send("GET", &format!("/plans/proposals/{n}"), token, None, &[])
            .await
    }

    /// `POST /plans/proposals/<n>/<step>` (`approve`, `apply`, `close`), with an optional
    /// body.
    pub async fn proposal_step(
        &self,
        token: &str,
        n: u64,
        step: &str,
        body: Option<&Value>,
    ) -> reqwest::Response {
        self.send(
            "POST",
            &format!("/plans/proposals/{n}/{step}"),
            token,
            body,
            &[],
        )
        .await
    }

    /// `planfiles tenant set <tenant> --require-approval <n>` on this app's data dir, as an
    /// operator runs it beside the running server.
    pub fn require_approval(&self, tenant: &str, n: u32) {
        let out = Command::new(env!("CARGO_BIN_EXE_planfiles"))
            .env_remove("PLANFILES_CONFIG")
            .env("PLANFILES_DATA_DIR", self.data_dir.path())
            .env("PLANFILES_JWT_SECRET", SECRET)
            .args([
                "tenant",
                "set",
                tenant,
                "--require-approval",
                &n.to_string(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `POST /plans/<file>/restore`; `file` is `integration-file` or `configuration-file`.
    pub async fn restore(&self, token: &str, file: &str, body: &Value) -> reqwest::Response {
        self.send(
            "POST",
            &format!("/plans/{file}/restore"),
            token,
            Some(body),
            &[],
        )
        .await
    }

    /// `GET /plans/schemas/<file>` (`integration-file` or `configuration-file`), with
    /// `If-None-Match` when given.
    pub async fn schema(&self, token: &str, file: &str, etag: Option<&str>) -> reqwest::Response {
        let mut req = self
            .client
            .get(self.url(&format!("/plans/schemas/{file}")))
            .bearer_auth(token);
        if let Some(etag) = etag {
            req = req.header("if-none-match", etag);
        }
        req.send().await.unwrap()
    }

    /// Starts the app with the schemas of `dir` (`unknown` for
    /// `validation.unknown_integrations`); other tests run with none.
    pub async fn spawn_with_schemas(dir: &Path, unknown: &str) -> Self {
        Self::with().schemas(dir, unknown).spawn().await
    }

    /// Starts the app with these `[webhooks]` settings.
    pub async fn spawn_with_webhooks(webhooks: planfiles::config::WebhooksConfig) -> Self {
        Self::with().webhooks(webhooks).spawn().await
    }

    /// `POST /plans/webhooks`.
    pub async fn create_webhook(&self, token: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url("/plans/webhooks"))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/webhooks`.
    pub async fn webhooks(&self, token: &str) -> reqwest::Response {
        self.client
            .get(self.url("/plans/webhooks"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/webhooks/{id}`.
    pub async fn webhook(&self, token: &str, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/plans/webhooks/{id}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `DELETE /plans/webhooks/{id}`.
    pub async fn delete_webhook(&self, token: &str, id: &str) -> reqwest::Response {
        self.client
            .delete(self.url(&format!("/plans/webhooks/{id}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `POST /plans/webhooks/{id}/resume`.
    pub async fn resume_webhook(&self, token: &str, id: &str) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/plans/webhooks/{id}/resume")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/webhooks/{id}/deliveries`.
    pub async fn webhook_deliveries(
        &self,
        token: &str,
        id: &str,
        query: &str,
    ) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/plans/webhooks/{id}/deliveries{query}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// `GET /plans/signing-keys` (no token), with `Accept` when given.
    pub async fn signing_keys(&self, accept: Option<&str>) -> reqwest::Response {
        let mut req = self.client.get(self.url("/plans/signing-keys"));
        if let Some(accept) = accept {
            req = req.header("accept", accept);
        }
        req.send().await.unwrap()
    }

    /// `GET /plans/<file>/diff?<query>`.
    pub async fn diff(&self, token: &str, file: &str, query: &str) -> reqwest::Response {
        self.send(
            "GET",
            &format!("/plans/{file}/diff?{query}"),
            token,
            None,
            &[],
        )
        .await
    }

    /// The text of `/metrics` (without a token).
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The path of a tenant's bare repository.
    pub fn repo(&self, tenant: &str) -> PathBuf {
        self.data_dir
            .path()
            .join("tenants")
            .join(format!("{tenant}.git"))
    }

    /// Runs the git CLI in a tenant's repository and returns its trimmed stdout.
    pub fn git(&self, tenant: &str, args: &[&str]) -> String {
        git_in(&self.repo(tenant), args)
    }

    /// How many commits `main` of `tenant` has gained since `start`.
    pub fn commits_since(&self, tenant: &str, start: &str) -> usize {
        self.git(tenant, &["rev-list", "--count", &format!("{start}..main")])
            .parse()
            .unwrap()
    }

    pub fn head(&self, tenant: &str) -> String {
        self.git(tenant, &["rev-parse", "main"])
    }

    pub fn blob(&self, tenant: &str, file: &str) -> String {
        self.git(tenant, &["rev-parse", &format!("main:{file}")])
    }

    /// Asserts `git fsck --strict` finds nothing wrong.
    pub fn fsck(&self, tenant: &str) {
        git_in(&self.repo(tenant), &["fsck", "--strict", "--no-dangling"]);
    }

    /// Stops the server and hands its data dir back, to start another one on it.
    pub async fn stop(mut self) -> tempfile::TempDir {
        self.events.shut_down();
        self.handle.stop(true).await;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap())
    }

    /// Commits `content` as `file` with plain git, as someone outside the service would.
    /// Says that the test wrote, by hand and on purpose, objects `git fsck --strict` refuses:
    /// no fsck of the repositories on drop.
    pub fn wrote_objects_fsck_refuses(&mut self) {
        self.fsck_on_drop = false;
    }

    pub fn outside_commit(&self, tenant: &str, file: &str, content: &str) -> String {
        commit_outside(&self.repo(tenant), file, content)
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.events.shut_down();
        let stop = self.handle.stop(true);
        std::thread::spawn(move || futures_executor(stop));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Whatever a test looked at, no path of the service may leave a repository that
        // git refuses: every tenant's is checked as a clone with fsckObjects would.
        if self.fsck_on_drop && !std::thread::panicking() {
            fsck_every_tenant(&self.data_dir.path().join("tenants"));
        }
    }
}

/// `git fsck --strict` of every tenant repository under `tenants` (archived ones too): a
/// failure fails the test that left it. A background repack may still be packing loose
/// objects and removing them while fsck lists them ("unable to mmap"): a failure is looked
/// at again, up to 5 times over 2 s; what is broken stays broken.
pub fn fsck_every_tenant(tenants: &Path) {
    let Ok(entries) = std::fs::read_dir(tenants) else {
        return;
    };
    for entry in entries.flatten() {
        let repo = entry.path();
        if !repo.join("HEAD").is_file() {
            continue;
        }
        let fsck = || {
            Command::new("git")
                .arg("--git-dir")
                .arg(&repo)
                .args(["fsck", "--strict", "--no-dangling", "--no-progress"])
                .output()
                .unwrap()
        };
        let mut out = fsck();
        for _ in 0..5 {
            if out.status.success() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(400));
            out = fsck();
        }
        assert!(
            out.status.success(),
            "git fsck --strict of {} failed: {}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn futures_executor(f: impl std::future::Future<Output = ()>) {
    actix_web::rt::System::new().block_on(f);
}

fn git_cmd(repo: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(repo).args(args);
    cmd.env("GIT_AUTHOR_NAME", "Outside Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@outside.example");
    cmd.env("GIT_COMMITTER_NAME", "Outside Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@outside.example");
    cmd
}

/// Commits `content` as `file` on `main` of the repository at `repo` with plain git.
pub fn commit_outside(repo: &Path, file: &str, content: &str) -> String {
    let blob = git_stdin(repo, &["hash-object", "-w", "--stdin"], content);
    let other = if file == "integrations.yml" {
        "configuration.yml"
    } else {
        "integrations.yml"
    };
    let other_blob = git_in(repo, &["rev-parse", &format!("main:{other}")]);
    let tree = git_stdin(
        repo,
        &["mktree"],
        &format!("100644 blob {blob}\t{file}\n100644 blob {other_blob}\t{other}\n"),
    );
    let commit = git_in(
        repo,
        &["commit-tree", &tree, "-p", "main", "-m", "outside edit"],
    );
    git_in(repo, &["update-ref", "refs/heads/main", &commit]);
    commit
}

pub fn git_in(repo: &Path, args: &[&str]) -> String {
    let out = git_cmd(repo, args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `git_in` with git's local time zone set to UTC, so that `format-local` dates do not
/// depend on the machine's `TZ`.
pub fn git_in_utc(repo: &Path, args: &[&str]) -> String {
    let out = git_cmd(repo, args).env("TZ", "UTC").output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Whether a git command succeeds (for commands that may lose a race, such as `update-ref`).
pub fn git_succeeds(repo: &Path, args: &[&str]) -> bool {
    git_cmd(repo, args)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Runs `cmd` with `input` on its standard input; what it printed on stdout (stderr is
/// inherited).
pub fn run_with_stdin(cmd: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A git command with `input` on its standard input.
pub fn git_stdin(repo: &Path, args: &[&str], input: &str) -> String {
    let out = run_with_stdin(&mut git_cmd(repo, args), input.as_bytes());
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Reads a problem+json response, checking the media type and the members every problem has.
pub async fn problem(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let rid = res
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let body: Value = res.json().await.unwrap();
    assert_eq!(ct.as_deref(), Some("application/problem+json"), "{body}");
    for member in ["type", "title", "status", "detail", "code", "request_id"] {
        assert!(
            body.get(member).is_some(),
            "problem without {member}: {body}"
        );
    }
    assert_eq!(body["status"], status);
    assert_eq!(body["request_id"].as_str(), rid.as_deref());
    (status, body)
}

/// Whether `python3` can import every one of `modules`. Where it cannot, the check that needs
/// them is skipped (with a line saying so), except in CI (`CI` set), where that fails the test:
/// CI installs them (`.ci/run`).
pub fn python_has(modules: &[&str]) -> bool {
    let imports = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let ok = Command::new("python3")
        .args(["-c", &imports])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have the Python modules {modules:?} (.ci/run installs them)"
        );
        eprintln!("skipping a cross-check: python3 lacks one of {modules:?}");
    }
    ok
}

/// Whether `ssh-keygen` (OpenSSH's, which git runs to verify SSH signatures) is here. Where it
/// is not, the cross-check with stock git is skipped (with a line saying so), except in CI.
pub fn ssh_keygen_present() -> bool {
    let ok = Command::new("ssh-keygen").arg("-?").output().is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have ssh-keygen (.ci/run installs openssh-client)"
        );
        eprintln!("skipping a cross-check with stock git: ssh-keygen is not installed");
    }
    ok
}

/// Runs the Python `script` with `input` as JSON on its stdin: whether it exited 0, and what
/// it printed (its verdict, or the cases it disagreed on).
pub fn python_check<T: serde::Serialize + ?Sized>(script: &str, input: &T) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(input).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs the git commands of `cycle` in turn on `repo` until `stop` (each must succeed):
/// plain git's housekeeping beside a test's writes. The thread returns how many ran.
pub fn git_in_a_loop(
    repo: PathBuf,
    cycle: Vec<Vec<&'static str>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut runs = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let args = &cycle[runs % cycle.len()];
            let out = Command::new("git")
                .arg("--git-dir")
                .arg(&repo)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            runs += 1;
        }
        runs
    })
}

/// A test whose tool or privilege is missing here: skipped with its reason on a developer's
/// machine, failed in CI (`CI` set), where a skip would pass without proving anything.
pub fn skip_unless_ci(test: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} cannot run in CI: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
}

/// Holds the write lock of the repository at `repo` as another planfiles process would (its
/// OS file lock), so that the tenant's writes wait until it is dropped.
pub fn hold_write_lock(repo: &Path) -> std::fs::File {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(repo.join("planfiles-write.lock"))
        .unwrap();
    lock.lock().unwrap();
    lock
}
