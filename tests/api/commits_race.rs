//! Two `planfiles serve` processes on one data dir race `POST /plans/commits` against single-file PUTs: nothing is lost, nothing half-applied.
use crate::common;

use common::process::{data_dir_with_fixture, serve};
use common::{git_in, token, ALL};
use serde_json::{json, Value};
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_and_single_file_puts_from_two_processes() {
    let dir = data_dir_with_fixture();
    let repo = dir.path().join("data/tenants/globex.git");
    let start = git_in(&repo, &["rev-parse", "main"]);
    let servers = [serve(dir.path(), &[]), serve(dir.path(), &[])];
    let t = token("globex", ALL);
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..60 {
        let base = servers[i % 2].url("");
        let (client, t, start) = (client.clone(), t.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let id = format!("w{i}");
            // A commit hash as file_sha forces the configuration file; the integration file
            // of this tenant takes none.
            let (method, path, body) = match i % 3 {
                0 => ("POST", "/plans/commits", json!({
                    "integration-file": {"content": {"writer": id}},
                    "configuration-file": {"payload": {"folders": [], "writer": id}, "file_sha": start},
                })),
                1 => ("PUT", "/plans/integration-file", json!({"content": {"writer": id}})),
                _ => ("PUT", "/plans/configuration-file", json!({"payload": {"folders": [], "writer": id}, "file_sha": start})),
            };
            loop {
                let res = client
                    .request(method.parse().unwrap(), format!("{base}{path}"))
                    .bearer_auth(&t)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                match res.status().as_u16() {
                    200 => {
                        let b: Value = res.json().await.unwrap();
                        return (i, b["commit_sha"].as_str().unwrap().to_owned());
                    }
                    503 => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                    s => panic!("{method} {path}: {s} {}", res.text().await.unwrap()),
                }
            }
        }));
    }
    let mut answered: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        let (i, commit) = task.await.unwrap();
        assert!(
            answered.insert(commit, i).is_none(),
            "two writes answered one commit"
        );
    }
    let log = git_in(
        &repo,
        &["rev-list", "--first-parent", &format!("{start}..main")],
    );
    let commits: Vec<&str> = log.lines().collect();
    assert_eq!(commits.len(), 60, "one commit per write, none lost");
    for commit in commits {
        let i = *answered.get(commit).expect("every commit was answered");
        let stat = git_in(&repo, &["show", "--stat", "--format=%s", commit]);
        let id = format!("w{i}");
        let int = git_in(&repo, &["show", &format!("{commit}:integrations.yml")]);
        let conf = git_in(&repo, &["show", &format!("{commit}:configuration.yml")]);
        match i % 3 {
            0 => {
                assert!(
                    stat.starts_with("Update integrations.yml, configuration.yml"),
                    "{stat}"
                );
                assert!(stat.contains("2 files changed"), "{stat}");
                assert!(
                    int.contains(&id) && conf.contains(&id),
                    "half applied: {commit}"
                );
            }
            1 => {
                assert!(
                    stat.contains("integrations.yml") && !stat.contains("configuration.yml"),
                    "{stat}"
                );
                assert!(stat.contains("1 file changed"), "{stat}");
                assert!(int.contains(&id));
            }
            _ => {
                assert!(
                    stat.contains("configuration.yml") && !stat.contains("integrations.yml"),
                    "{stat}"
                );
                assert!(stat.contains("1 file changed"), "{stat}");
                assert!(conf.contains(&id));
            }
        }
    }
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
}
