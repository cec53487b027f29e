//! Proposals' steps as events: `proposal.opened|updated|approved|applied|closed` on the change stream (each after the commit `main` was at when it was taken, `id:` the step's commit on `refs/proposals/records`, a resume from any id repeating nothing and missing nothing, only to readers who may see the proposal) and to webhooks (each step once, in order, signed, only to subscriptions that asked).
use crate::common::receiver::Receiver;
use crate::common::{git_in, local_webhooks, token, webhooks_token, TestApp, ALL};
use crate::events::{Event, Sse};
use crate::proposals::{open, step, APPROVER, WRITER};
use serde_json::{json, Value};
use std::time::Duration;

/// Opens #1 (ann), approves and applies it (bo), opens #2 (ann) and closes it (ann); the
/// commit the apply put on `main`.
async fn four_eyes_round(app: &TestApp, tenant: &str) -> String {
    let one = open(app, tenant, "ann", "111122223333").await["number"]
        .as_u64()
        .unwrap();
    let (status, body) = step(app, tenant, "bo", APPROVER, one, "approve").await;
    assert_eq!(status, 200, "{body}");
    let (status, applied) = step(app, tenant, "bo", APPROVER, one, "apply").await;
    assert_eq!(status, 200, "{applied}");
    let two = open(app, tenant, "ann", "444455556666").await["number"]
        .as_u64()
        .unwrap();
    let (status, body) = step(app, tenant, "ann", WRITER, two, "close").await;
    assert_eq!(status, 200, "{body}");
    app.head(tenant)
}

/// The steps' commits on the records ref, oldest first.
fn records_line(app: &TestApp, tenant: &str) -> Vec<String> {
    let out = git_in(
        &app.repo(tenant),
        &[
            "rev-list",
            "--first-parent",
            "--reverse",
            "refs/proposals/records",
        ],
    );
    out.lines().map(str::to_owned).collect()
}

async fn events(stream: &mut Sse, n: usize) -> Vec<Event> {
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(stream.next().await);
    }
    got
}

fn kinds(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.kind.clone(), e.id.clone()))
        .collect()
}

/// Live: each step arrives once, in order, after the commit `main` was at when it was taken
/// (the applied step before the commit it put on `main`), with the proposal as it left it.
/// A reader of the other file alone sees none. A resume from before them, from any step's id
/// or from the applied commit gives exactly what came after, then `head`.
#[tokio::test]
async fn every_step_is_streamed_in_place_and_a_resume_from_any_id_repeats_none() {
    let app = TestApp::spawn().await;
    app.require_approval("globex", 1);
    let before = app.head("globex");
    let all = token("globex", ALL);
    let mut live = Sse::open(&app, &all, "", None).await;
    assert_eq!(live.next().await.kind, "head");
    let conf_only = token("globex", &["jit.preferences.read"]);
    let mut conf = Sse::open(&app, &conf_only, "", None).await;
    assert_eq!(conf.next().await.kind, "head");

    let applied = four_eyes_round(&app, "globex").await;
    let got = events(&mut live, 6).await;
    let steps = records_line(&app, "globex");
    assert_eq!(steps.len(), 5);
    assert_eq!(
        kinds(&got),
        vec![
            ("proposal.opened".into(), steps[0].clone()),
            ("proposal.approved".into(), steps[1].clone()),
            ("proposal.applied".into(), steps[2].clone()),
            ("integration-file".into(), applied.clone()),
            ("proposal.opened".into(), steps[3].clone()),
            ("proposal.closed".into(), steps[4].clone()),
        ]
    );
    let numbers: Vec<&Value> = got.iter().map(|e| &e.data["number"]).collect();
    assert_eq!(
        numbers,
        [
            &json!(1),
            &json!(1),
            &json!(1),
            &Value::Null,
            &json!(2),
            &json!(2)
        ]
    );
    let (opened, approved, done) = (&got[0].data, &got[1].data, &got[2].data);
    assert_eq!(opened["step"], "opened");
    assert_eq!(opened["step_sha"], steps[0].as_str());
    assert_eq!(opened["state"], "open");
    assert_eq!(opened["title"], "Add 111122223333");
    assert_eq!(opened["author"]["name"], "ann");
    assert_eq!(opened["files"], json!(["integration-file"]));
    assert_eq!(opened["approvals"], 0);
    assert_eq!(opened["base"], before.as_str());
    assert_eq!(
        (
            approved["by"]["name"].as_str(),
            approved["approvals"].as_u64()
        ),
        (Some("bo"), Some(1))
    );
    assert_eq!(done["state"], "applied");
    assert_eq!(done["applied"], applied.as_str());
    assert_eq!(got[3].data["proposal"], 1);
    assert_eq!(got[5].data["state"], "closed");
    assert!(
        live.next_within(Duration::from_millis(500)).await.is_none(),
        "one event per step"
    );
    // The configuration's reader may not read the proposals' file: nothing of them.
    assert!(conf.next_within(Duration::from_secs(1)).await.is_none());

    // Resumes: from before them all, from each event's id.
    let mut resumes = vec![(before.clone(), 0)];
    resumes.extend(got.iter().enumerate().map(|(i, e)| (e.id.clone(), i + 1)));
    for (last, from) in resumes {
        let mut again = Sse::open(&app, &all, "", Some(&last)).await;
        let replayed = events(&mut again, got.len() - from).await;
        assert_eq!(
            kinds(&replayed),
            kinds(&got[from..]),
            "resumed after {last}"
        );
        let head = again.next().await;
        assert_eq!(
            (head.kind.as_str(), head.id.as_str()),
            ("head", applied.as_str())
        );
    }
    // `?since=` a step's id, as a client that kept it says it.
    let mut since = Sse::open(&app, &all, &format!("?since={}", steps[3]), None).await;
    assert_eq!(kinds(&[since.next().await]), kinds(&got[5..]));
}

/// Webhooks: each step once, in order, signed, with the proposal as the step left it; the
/// commit the apply made is delivered once too; a subscription to `proposal.applied` alone
/// gets that one; the deliveries log names the step's commit.
#[tokio::test]
async fn every_step_reaches_the_webhooks_that_asked_once_and_in_order() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    app.require_approval("acme", 1);
    let create = |path: &str, events: Option<Value>| {
        let mut body = json!({"url": rx.url(path)});
        if let Some(events) = events {
            body["events"] = events;
        }
        body
    };
    let mut ids = Vec::new();
    for (path, events) in [
        ("/hook/all", None),
        ("/hook/applied", Some(json!(["proposal.applied"]))),
    ] {
        let res = app
            .create_webhook(&webhooks_token("acme"), &create(path, events))
            .await;
        assert_eq!(res.status(), 201);
        let created: Value = res.json().await.unwrap();
        rx.set_secret(path, created["secret"].as_str().unwrap());
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let applied = four_eyes_round(&app, "acme").await;
    let steps = records_line(&app, "acme");

    let got = rx.wait_for("/hook/all", 6, Duration::from_secs(30)).await;
    assert!(got.iter().all(|d| d.verified), "{got:?}");
    let proposals: Vec<(String, String, Value)> = got
        .iter()
        .filter(|d| d.kind().starts_with("proposal."))
        .map(|d| {
            let data = &d.body["data"];
            (
                d.kind().to_owned(),
                data["step_sha"].as_str().unwrap().to_owned(),
                data["number"].clone(),
            )
        })
        .collect();
    let expected: Vec<(String, String, Value)> = [
        ("proposal.opened", 1),
        ("proposal.approved", 1),
        ("proposal.applied", 1),
        ("proposal.opened", 2),
        ("proposal.closed", 2),
    ]
    .iter()
    .zip(&steps)
    .map(|((kind, n), sha)| (kind.to_string(), sha.clone(), json!(n)))
    .collect();
    assert_eq!(proposals, expected);
    let files: Vec<_> = got
        .iter()
        .filter(|d| d.kind() == "integration-file.updated")
        .collect();
    assert_eq!(files.len(), 1);
    assert_eq!(
        (files[0].commit(), &files[0].body["data"]["proposal"]),
        (applied.as_str(), &json!(1))
    );
    let mut webhook_ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    webhook_ids.sort();
    webhook_ids.dedup();
    assert_eq!(webhook_ids.len(), 6, "one webhook-id per event");
    assert!(got.iter().all(|d| d.body["data"]["tenant"] == "acme"));

    let only = rx
        .wait_for("/hook/applied", 1, Duration::from_secs(30))
        .await;
    assert_eq!(only[0].kind(), "proposal.applied");
    assert_eq!(only[0].body["data"]["applied"], applied.as_str());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.deliveries("/hook/applied").len(), 1);
    assert_eq!(rx.deliveries("/hook/all").len(), 6, "nothing twice");
    // The log names each step by its commit.
    let log: Value = app
        .webhook_deliveries(&webhooks_token("acme"), &ids[1], "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        log["deliveries"][0]["commit_sha"],
        steps[2].as_str(),
        "{log}"
    );
}

/// The feed follows the records however git keeps them: loose, packed by `git pack-refs
/// --all`, and loose again.
#[tokio::test]
async fn steps_arrive_live_across_packed_refs() {
    let app = TestApp::spawn().await;
    let all = token("globex", ALL);
    let mut live = Sse::open(&app, &all, "", None).await;
    assert_eq!(live.next().await.kind, "head");
    for round in 0..3u64 {
        let n = open(&app, "globex", "ann", &format!("11112222333{round}")).await["number"]
            .as_u64()
            .unwrap();
        let got = live.next().await;
        assert_eq!(
            (got.kind.as_str(), &got.data["number"]),
            ("proposal.opened", &json!(n))
        );
        git_in(&app.repo("globex"), &["pack-refs", "--all"]);
        assert!(!app.repo("globex").join("refs/proposals/records").exists());
        let (status, body) = step(&app, "globex", "ann", WRITER, n, "close").await;
        assert_eq!(status, 200, "{body}");
        let got = live.next().await;
        assert_eq!(
            (got.kind.as_str(), &got.data["number"]),
            ("proposal.closed", &json!(n))
        );
    }
}

/// Resume points that read like a step but are none: a proposal's own commit titled like one
/// (it is not on `main`: a reset), `main`'s commit that applied it (its subject and `Proposal`
/// trailer: a resume after it), and another tenant's step (unknown here: a reset). No 500, no
/// closed stream.
#[tokio::test]
async fn ids_that_read_like_steps_resume_as_what_they_are() {
    let app = TestApp::spawn().await;
    let all = token("globex", ALL);
    let res = app
        .propose(
            &crate::common::token_as("globex", "ann", WRITER),
            &json!({"integration-file": {"content": {"aws": []}}, "title": "Approve proposal 1"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let own: Value = res.json().await.unwrap();
    let (status, body) = step(&app, "globex", "bo", APPROVER, 1, "approve").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = step(&app, "globex", "bo", APPROVER, 1, "apply").await;
    assert_eq!(status, 200, "{body}");
    let applied = app.head("globex");
    let later = app
        .put_configuration(&all, &json!({"payload": {"folders": []}, "file_sha": app.blob("globex", "configuration.yml")}))
        .await;
    assert_eq!(later.status(), 200);
    let head = app.head("globex");
    four_eyes_round(&app, "acme").await;
    let elsewhere = records_line(&app, "acme").pop().unwrap();
    for (since, first) in [
        (own["commit"].as_str().unwrap(), ("reset", head.as_str())),
        (applied.as_str(), ("configuration-file", head.as_str())),
        (elsewhere.as_str(), ("reset", head.as_str())),
    ] {
        let mut stream = Sse::open(&app, &all, &format!("?since={since}"), None).await;
        let got = stream.next().await;
        assert_eq!((got.kind.as_str(), got.id.as_str()), first, "since {since}");
    }
}
