//! Concurrent writers on one tenant: no acknowledged write is lost, and writes to the two
//! files never conflict with each other.
mod common;

use common::{token, TestApp, ALL};
use serde_json::{json, Value};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_modify_write_with_file_sha_loses_nothing() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    let start_head = app.head("acme");
    const WRITERS: usize = 8;
    const EACH: usize = 5;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (app, t) = (app.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflicts) = (0, 0);
            for i in 0..EACH {
                loop {
                    let cur: Value = app.get_configuration(&t).await.json().await.unwrap();
                    let mut content = cur["content"].clone();
                    content["folders"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"path": format!("w{w}-{i}")}));
                    let res = app
                        .put_configuration(&t, &json!({"payload": content, "file_sha": cur["sha"]}))
                        .await;
                    match res.status().as_u16() {
                        200 => {
                            ok += 1;
                            break;
                        }
                        409 => conflicts += 1,
                        other => panic!("unexpected {other}: {}", res.text().await.unwrap()),
                    }
                }
            }
            (ok, conflicts)
        }));
    }
    let mut acknowledged = 0;
    let mut conflicts = 0;
    for task in tasks {
        let (ok, c) = task.await.unwrap();
        acknowledged += ok;
        conflicts += c;
    }
    assert_eq!(acknowledged, WRITERS * EACH);
    let commits: usize = app
        .git(
            "acme",
            &["rev-list", "--count", &format!("{start_head}..main")],
        )
        .parse()
        .unwrap();
    assert_eq!(
        commits, acknowledged,
        "every 200 is exactly one commit ({conflicts} conflicts)"
    );
    let body: Value = app.get_configuration(&t).await.json().await.unwrap();
    let paths: Vec<&str> = body["content"]["folders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for w in 0..WRITERS {
        for i in 0..EACH {
            assert!(
                paths.contains(&format!("w{w}-{i}").as_str()),
                "w{w}-{i} was lost"
            );
        }
    }
    app.fsck("acme");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_sha_exactly_one_writer_wins() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    for round in 0..5 {
        let sha = app.blob("acme", "integrations.yml");
        let mut tasks = Vec::new();
        for w in 0..6 {
            let (app, t, sha) = (app.clone(), t.clone(), sha.clone());
            tasks.push(tokio::spawn(async move {
                app.put_integration(
                    &t,
                    &json!({"content": {"round": round, "writer": w}, "file_sha": sha}),
                )
                .await
                .status()
                .as_u16()
            }));
        }
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.unwrap());
        }
        statuses.sort();
        assert_eq!(statuses, [200, 409, 409, 409, 409, 409], "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_to_the_two_files_never_conflict() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    let start_head = app.head("acme");
    const N: usize = 20;
    let integration = {
        let (app, t) = (app.clone(), t.clone());
        tokio::spawn(async move {
            for i in 0..N {
                let sha = app.get_integration(&t).await.json::<Value>().await.unwrap()["file_sha"]
                    .clone();
                let res = app
                    .put_integration(&t, &json!({"content": {"i": i}, "file_sha": sha}))
                    .await;
                assert_eq!(res.status(), 200, "integration write {i}");
            }
        })
    };
    let configuration = {
        let (app, t) = (app.clone(), t.clone());
        tokio::spawn(async move {
            for i in 0..N {
                let sha = app
                    .get_configuration(&t)
                    .await
                    .json::<Value>()
                    .await
                    .unwrap()["sha"]
                    .clone();
                let res = app.put_configuration(&t, &json!({"payload": {"folders": [{"path": format!("p{i}")}]}, "file_sha": sha})).await;
                assert_eq!(res.status(), 200, "configuration write {i}");
            }
        })
    };
    integration.await.unwrap();
    configuration.await.unwrap();
    let commits: usize = app
        .git(
            "acme",
            &["rev-list", "--count", &format!("{start_head}..main")],
        )
        .parse()
        .unwrap();
    assert_eq!(commits, 2 * N);
    let body: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(body["content"], json!({"i": N - 1}));
    app.fsck("acme");
}
