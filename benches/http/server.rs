//! The planfiles server the benchmarks measure: in process, on a random port, over a data dir, with a token for any tenant.
use planfiles::auth::{mint_hs256, Verifier};
use planfiles::config::AuthConfig;
use planfiles::domain::{Identity, TenantId};
use planfiles::http::{self, AppState, ServerOptions};
use planfiles::storage::{self, Storage};
use std::path::Path;
use std::time::Duration;

pub const SECRET: &str = "bench-secret-0123456789abcdef";

/// A token with both write permissions (which imply the reads) for `tenant`.
pub fn token(tenant: &str) -> String {
    mint_hs256(
        SECRET,
        &planfiles::auth::MintRequest {
            tenant: TenantId::parse(tenant).unwrap(),
            permissions: vec![
                "jit.integrations.write".into(),
                "jit.preferences.write".into(),
            ],
            sub: Some("bench".into()),
            email: Some("bench@example.com".into()),
            name: Some("Bench".into()),
            ttl_secs: 3600,
        },
    )
    .unwrap()
}

/// Starts planfiles over `data_dir` on a random port, in its own thread; returns its address.
pub fn start_planfiles(data_dir: &Path) -> String {
    storage::init_git();
    let storage = Storage::open(
        data_dir,
        Identity::new("planfiles", "p@localhost", "x"),
        planfiles::storage::Durability::Group,
    )
    .unwrap()
    .head_lookup_threads(2);
    let state = AppState::new(
        storage,
        Verifier::from_config(&AuthConfig {
            secret: SECRET.into(),
            ..AuthConfig::default()
        })
        .unwrap(),
        planfiles::metrics::Metrics::new(),
        &Default::default(),
        2000,
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let options = ServerOptions {
        workers: 2,
        client_request_timeout: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(1),
        send_stall: Duration::from_secs(30),
    };
    std::thread::spawn(move || {
        actix_web::rt::System::new()
            .block_on(async move { http::serve(state, listener, &options).unwrap().await })
    });
    addr
}
