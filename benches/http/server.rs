//! The planfiles server the benchmarks measure: in process, on a random port, over a data dir, with a token for any tenant.
use planfiles::auth::mint_hs256;
use planfiles::config::Config;
use planfiles::domain::TenantId;
use planfiles::startup::Application;
use planfiles::storage::{self, DurabilitySetting};
use std::path::Path;

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

/// Starts planfiles over `data_dir` on a random port, in its own thread, built as `serve`
/// builds it (`Application::build`) with group commit; returns its address.
pub fn start_planfiles(data_dir: &Path) -> String {
    start_planfiles_with(data_dir, |_| {})
}

/// As [`start_planfiles`], with the config changed by `edit` first.
pub fn start_planfiles_with(data_dir: &Path, edit: impl FnOnce(&mut Config)) -> String {
    storage::init_git();
    let mut config = Config::default();
    config.server.bind = "127.0.0.1:0".into();
    config.server.workers = 2;
    config.server.shutdown_timeout_secs = 1;
    config.storage.data_dir = data_dir.to_owned();
    config.storage.seed_from = None;
    config.storage.durability = DurabilitySetting::Group;
    config.commit.committer_email = "p@localhost".into();
    config.auth.secret = SECRET.into();
    edit(&mut config);
    let app = Application::build(&config).unwrap();
    let addr = format!("http://{}", app.addr().unwrap());
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move { app.run().unwrap().await })
    });
    addr
}
