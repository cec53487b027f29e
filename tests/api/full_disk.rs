//! A full data volume: writes answer 507, reads keep working, nothing is corrupted, and writes
//! work again once space returns. Needs root to mount a small tmpfs; otherwise it says why it
//! is skipped.
use crate::common;

use common::{copy_tree, fixture_dir, problem, token, TestApp, ALL};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::Command;

fn mount_tmpfs(at: &Path, size: &str) -> Result<(), String> {
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Unmounts its tmpfs when dropped, also when an assertion failed.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `dir` until writes fail with ENOSPC.
fn fill(dir: &Path) -> std::fs::File {
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    loop {
        match filler.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    // Whatever small remainder is left.
    while filler.write_all(&[0u8; 512]).is_ok() {}
    filler
}

#[tokio::test]
async fn a_full_disk_answers_507_and_recovers() {
    let mount_point = tempfile::tempdir().unwrap();
    if let Err(why) = mount_tmpfs(mount_point.path(), "8m") {
        assert!(
            std::env::var_os("PLANFILES_REQUIRE_TMPFS").is_none(),
            "tmpfs required: {why}"
        );
        crate::common::skip_unless_ci(
            "the full-disk test",
            &format!("cannot mount a tmpfs ({why}); run as root to include it"),
        );
        return;
    }
    let path = mount_point.path().to_owned();
    let _mounted = Mounted(path.clone());
    let data_dir = tempfile::Builder::new().tempdir_in(&path).unwrap();
    copy_tree(
        &fixture_dir().join("tenants"),
        &data_dir.path().join("tenants"),
    );
    let app = TestApp::spawn_on(
        data_dir,
        planfiles::config::AuthConfig {
            secret: common::SECRET.into(),
            ..Default::default()
        },
    )
    .await;
    let t = token("acme", ALL);
    let head = app.head("acme");

    let filler = fill(&path);
    let (status, body) = problem(
        app.put_integration(&t, &json!({"content": {"big": "x".repeat(64 * 1024)}}))
            .await,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (507, Some("storage_full")),
        "{body}"
    );
    let (status, _) = problem(
        app.put_configuration(&t, &json!({"payload": {"folders": [{"path": "y".repeat(64 * 1024)}]}, "file_sha": app.blob("acme", "configuration.yml")}))
            .await,
    )
    .await;
    assert_eq!(status, 507);
    assert_eq!(
        app.get_integration(&t).await.status(),
        200,
        "reads must keep working"
    );
    assert_eq!(app.get_configuration(&t).await.status(), 200);
    assert_eq!(app.head("acme"), head);

    drop(filler);
    std::fs::remove_file(path.join("filler")).unwrap();
    let res = app
        .put_integration(&t, &json!({"content": {"after": "space returned"}}))
        .await;
    assert_eq!(res.status(), 200);
    app.fsck("acme");
    drop(app);
}
