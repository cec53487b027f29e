//! Proposals: four eyes on a tenant's plans. Another person approves the exact commit, the author or an approver applies it as one signed commit with its trailers; an update voids approvals; a file moved on main makes it stale; a tenant that requires approval refuses every other way to move main (PUT, commits, restore, push) while dry runs answer; bad requests are refused with their codes and change nothing.
use crate::common::{git_in, problem, token, token_as, TestApp, ALL};
use crate::events::Sse;
use crate::push::{clone, push, WRITE_BOTH};
use crate::signing::{allowed_signers, git_verifies};
use serde_json::{json, Value};

pub(crate) const APPROVE: &str = "planfiles.proposals.approve";
pub(crate) const WRITER: &[&str] = &["jit.integrations.write", "jit.preferences.write"];
pub(crate) const APPROVER: &[&str] = &[APPROVE, "jit.integrations.read", "jit.preferences.read"];

fn aws(account: &str) -> Value {
    json!({"aws": [{"account_id": account, "regions": ["us-east-1"], "type": "aws"}]})
}

/// Opens a proposal of the integration file as `sub`; its body.
pub(crate) async fn open(app: &TestApp, tenant: &str, sub: &str, account: &str) -> Value {
    let res = app
        .propose(
            &token_as(tenant, sub, WRITER),
            &json!({"integration-file": {"content": aws(account)}, "title": format!("Add {account}"),
                    "message": "Why:\nthe new account"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(location, format!("/plans/proposals/{}", body["number"]));
    body
}

pub(crate) async fn step(
    app: &TestApp,
    tenant: &str,
    sub: &str,
    perms: &[&str],
    n: u64,
    what: &str,
) -> (u16, Value) {
    // An approval names the commit reviewed: the one the proposal is at now.
    let body = match what {
        "approve" => {
            let p: Value = app
                .proposal(&token(tenant, ALL), n)
                .await
                .json()
                .await
                .unwrap();
            Some(json!({"commit": p["commit"]}))
        }
        _ => None,
    };
    let res = app
        .proposal_step(&token_as(tenant, sub, perms), n, what, body.as_ref())
        .await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

#[tokio::test]
async fn another_person_approves_the_exact_commit_and_the_apply_is_one_signed_commit() {
    let app = TestApp::spawn().await;
    app.require_approval("globex", 1);
    let before = app.head("globex");
    // Every other way to move main is refused; a dry run still answers.
    let put = json!({"content": aws("111122223333")});
    let (status, body) = problem(app.put_integration(&token("globex", ALL), &put).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("approval_required")),
        "{body}"
    );
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("/plans/proposals"));
    let dry = app
        .send(
            "PUT",
            "/plans/integration-file?dry_run=true",
            &token("globex", ALL),
            Some(&put),
            &[],
        )
        .await;
    assert_eq!(dry.status(), 200);
    let both = json!({"integration-file": {"content": aws("111122223333")}});
    let (status, body) = problem(app.post_commits(&token("globex", ALL), "", &both).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("approval_required")),
        "{body}"
    );
    assert_eq!(app.head("globex"), before);

    let p = open(&app, "globex", "ann", "111122223333").await;
    let n = p["number"].as_u64().unwrap();
    assert_eq!(p["state"], "open");
    assert_eq!(p["approvals"], json!([]));
    assert_eq!(p["approvals_required"], 1);
    assert_eq!(p["base"], before.as_str());
    assert_eq!(p["files"], json!(["integration-file"]));
    // The proposal is a commit on main's head under refs/proposals/<n>; main did not move.
    let commit = p["commit"].as_str().unwrap().to_owned();
    assert_eq!(
        app.git("globex", &["rev-parse", &format!("refs/proposals/{n}")]),
        commit
    );
    assert_eq!(
        app.git("globex", &["rev-parse", &format!("{commit}^")]),
        before
    );
    assert_eq!(app.head("globex"), before);

    // The author cannot approve; a reader without the permission cannot either.
    let (status, body) = step(&app, "globex", "ann", &[APPROVE], n, "approve").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("own_proposal")),
        "{body}"
    );
    let (status, _) = step(
        &app,
        "globex",
        "bo",
        &["jit.integrations.read"],
        n,
        "approve",
    )
    .await;
    assert_eq!(status, 403);
    // Not enough approvals yet.
    let (status, body) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("approvals_missing")),
        "{body}"
    );
    // An approval of a commit the proposal is not at is refused.
    let stale_seen = json!({"commit": before});
    let res = app
        .proposal_step(
            &token_as("globex", "bo", APPROVER),
            n,
            "approve",
            Some(&stale_seen),
        )
        .await;
    assert_eq!(problem(res).await.1["code"], "proposal_changed");
    let seen = json!({"commit": commit});
    let res = app
        .proposal_step(
            &token_as("globex", "bo", APPROVER),
            n,
            "approve",
            Some(&seen),
        )
        .await;
    assert_eq!(res.status(), 200);
    let approved: Value = res.json().await.unwrap();
    assert_eq!(approved["approvals"][0]["by"]["sub"], "bo");
    assert_eq!(approved["approvals"][0]["commit"], commit.as_str());
    // The same person under another token (same sub, other name) cannot approve twice.
    let twice = crate::common::sign_hs256(
        crate::common::SECRET,
        &json!({"alg": "HS256"}),
        &json!({"tenant_id": "globex", "permissions": [APPROVE], "exp": crate::common::now() + 600,
                "sub": "bo", "name": "Bo Again", "email": "other@example.com"}),
    );
    let res = app.proposal_step(&twice, n, "approve", Some(&seen)).await;
    assert_eq!(problem(res).await.1["code"], "already_approved");
    // Without naming the commit reviewed, nobody approves anything.
    let res = app
        .proposal_step(&token_as("globex", "cy", APPROVER), n, "approve", None)
        .await;
    let (status, body) = problem(res).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("invalid_content")),
        "{body}"
    );
    // Someone who neither wrote nor approved it cannot apply it.
    let (status, body) = step(&app, "globex", "cy", APPROVER, n, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("not_proposal_participant")),
        "{body}"
    );
    assert_eq!(app.head("globex"), before);

    let (status, applied) = step(&app, "globex", "bo", APPROVER, n, "apply").await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["state"], "applied");
    let on_main = applied["applied_commit"].as_str().unwrap().to_owned();
    assert_eq!(app.head("globex"), on_main);
    assert_eq!(
        app.git("globex", &["rev-parse", &format!("{on_main}^")]),
        before
    );
    assert_eq!(
        app.blob("globex", "integrations.yml"),
        app.git(
            "globex",
            &["rev-parse", &format!("{commit}:integrations.yml")]
        )
    );
    let message = app.git("globex", &["log", "-1", "--format=%an <%ae>%n%B", "main"]);
    assert!(
        message.starts_with("ann <ann@example.com>\nAdd 111122223333\n\nWhy:\nthe new account\n\n"),
        "{message}"
    );
    let trailers = app.git(
        "globex",
        &["log", "-1", "--format=%(trailers:only,unfold)", "main"],
    );
    assert!(trailers.contains(&format!("Proposal: {n}\n")), "{trailers}");
    assert!(
        trailers.contains("Proposed-by: ann <ann@example.com>\n"),
        "{trailers}"
    );
    assert!(
        trailers.contains("Approved-by: bo <bo@example.com>"),
        "{trailers}"
    );
    assert!(trailers.contains("Request-Id: "), "{trailers}");
    let scratch = tempfile::tempdir().unwrap();
    let allowed = allowed_signers(&app, scratch.path()).await;
    let (ok, why) = git_verifies(&app.repo("globex"), &allowed, &on_main);
    assert!(ok, "{why}");
    let (ok, why) = git_verifies(&app.repo("globex"), &allowed, &commit);
    assert!(ok, "the proposal's own commit: {why}");
    let records = app.git("globex", &["rev-parse", "refs/proposals/records"]);
    let (ok, why) = git_verifies(&app.repo("globex"), &allowed, &records);
    assert!(ok, "the records' commit: {why}");
    // Applied once: a second apply, an approval or an update is refused.
    let (status, body) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("proposal_not_open")),
        "{body}"
    );
    assert_eq!(app.head("globex"), on_main);
    let got: Value = app
        .proposal(&token("globex", ALL), n)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["state"], "applied");
    assert_eq!(got["applied_commit"], on_main.as_str());
    // History links the applied commit to its proposal.
    let history: Value = app
        .history(&token("globex", ALL), "integration-file", "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(history["entries"][0]["commit_sha"], on_main.as_str());
    assert_eq!(history["entries"][0]["proposal"], n, "{history}");
    assert!(history["entries"][1].get("proposal").is_none(), "{history}");
}

#[tokio::test]
async fn an_update_voids_the_approvals_and_only_the_author_updates_or_closes() {
    let app = TestApp::spawn().await;
    app.require_approval("globex", 1);
    let p = open(&app, "globex", "ann", "111122223333").await;
    let n = p["number"].as_u64().unwrap();
    let (status, _) = step(&app, "globex", "bo", APPROVER, n, "approve").await;
    assert_eq!(status, 200);
    let change = json!({"integration-file": {"content": aws("999988887777")}, "title": "Add 9999"});
    let res = app
        .update_proposal(&token_as("globex", "bo", WRITER), n, &change)
        .await;
    assert_eq!(problem(res).await.1["code"], "not_proposal_author");
    let res = app
        .update_proposal(&token_as("globex", "ann", WRITER), n, &change)
        .await;
    assert_eq!(res.status(), 200);
    let updated: Value = res.json().await.unwrap();
    assert_ne!(updated["commit"], p["commit"]);
    assert_eq!(
        updated["approvals"],
        json!([]),
        "an update voids every approval"
    );
    assert_eq!(updated["title"], "Add 9999");
    assert_eq!(
        app.git("globex", &["rev-parse", &format!("refs/proposals/{n}")]),
        updated["commit"].as_str().unwrap()
    );
    let (status, body) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("approvals_missing")),
        "{body}"
    );
    // bo approves the new commit (the old approval counted for the old one only).
    let (status, _) = step(&app, "globex", "bo", APPROVER, n, "approve").await;
    assert_eq!(status, 200);
    let (status, body) = step(&app, "globex", "bo", APPROVER, n, "close").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("not_proposal_author")),
        "{body}"
    );
    let (status, closed) = step(&app, "globex", "ann", WRITER, n, "close").await;
    assert_eq!(status, 200);
    assert_eq!(
        (closed["state"].as_str(), closed["closed_by"].as_str()),
        (Some("closed"), Some("ann"))
    );
    let (status, body) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("proposal_not_open")),
        "{body}"
    );
}

#[tokio::test]
async fn apply_is_stale_when_its_file_moved_and_keeps_a_file_it_does_not_change() {
    let app = TestApp::spawn().await;
    // No approval required: a proposal applies at once, by its author.
    let p = open(&app, "globex", "ann", "111122223333").await;
    let n = p["number"].as_u64().unwrap();
    // The configuration file moves on main: the proposal does not change it.
    let cfg = app
        .get_configuration(&token("globex", ALL))
        .await
        .json::<Value>()
        .await
        .unwrap();
    let res = app
        .put_configuration(
            &token("globex", ALL),
            &json!({"payload": {"folders": [{"path": "moved"}]}, "file_sha": cfg["sha"]}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let cfg_blob = app.blob("globex", "configuration.yml");
    let (status, applied) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(
        app.blob("globex", "configuration.yml"),
        cfg_blob,
        "the file it does not change"
    );
    assert_eq!(
        app.blob("globex", "integrations.yml"),
        app.git(
            "globex",
            &[
                "rev-parse",
                &format!("{}:integrations.yml", p["commit"].as_str().unwrap())
            ]
        )
    );
    // The next one: its file moves on main before the apply.
    let q = open(&app, "globex", "ann", "444455556666").await;
    let m = q["number"].as_u64().unwrap();
    assert_eq!(m, n + 1);
    let res = app
        .put_integration(
            &token("globex", ALL),
            &json!({"content": aws("777700001111")}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let head = app.head("globex");
    let got: Value = app
        .proposal(&token("globex", ALL), m)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["stale"], true, "{got}");
    assert!(got["diffs"][0]["from_main"]["text"]
        .as_str()
        .unwrap()
        .contains("777700001111"));
    assert!(got["diffs"][0]["from_base"]["text"]
        .as_str()
        .unwrap()
        .contains("444455556666"));
    let (status, body) = step(&app, "globex", "ann", WRITER, m, "apply").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("proposal_stale")),
        "{body}"
    );
    assert_eq!(
        body["current_sha"],
        app.blob("globex", "integrations.yml").as_str()
    );
    assert_eq!(app.head("globex"), head, "a stale apply changes nothing");
    // The author updates it on today's main; then it applies.
    let res = app
        .update_proposal(
            &token_as("globex", "ann", WRITER),
            m,
            &json!({"integration-file": {"content": aws("444455556666")}, "title": "Again"}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let (status, body) = step(&app, "globex", "ann", WRITER, m, "apply").await;
    assert_eq!(status, 200, "{body}");
    app.fsck("globex");
}

#[tokio::test]
async fn a_push_to_main_of_a_protected_tenant_is_refused() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    let (_work, dir) = clone(&app, "acme", &t);
    app.require_approval("acme", 2);
    let before = app.head("acme");
    std::fs::write(
        dir.join("configuration.yml"),
        "folders:\n  - path: pushed\n",
    )
    .unwrap();
    crate::push::ok(crate::push::git(&dir, "", &["commit", "-qam", "Pushed"]));
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(!pushed);
    assert!(stderr.contains("approval required"), "{stderr}");
    assert_eq!(app.head("acme"), before);
    // Restores too.
    let res = app
        .restore(
            &token("acme", ALL),
            "integration-file",
            &json!({"commit": before}),
        )
        .await;
    assert_eq!(problem(res).await.1["code"], "approval_required");
    // refs/for/main proposes instead, under the push's checks; git's output names it.
    let (pushed, stderr) = push(&dir, &t, &["HEAD:refs/for/main"]);
    assert!(pushed, "{stderr}");
    assert!(
        stderr.contains("planfiles: proposal #1 opened: Pushed"),
        "{stderr}"
    );
    let local = git_in(&dir.join(".git"), &["rev-parse", "HEAD"]);
    assert!(
        !crate::common::git_succeeds(&app.repo("acme"), &["cat-file", "-e", &local]),
        "nothing of the pack is kept"
    );
    assert_eq!(app.head("acme"), before);
    let p: Value = app
        .proposal(&token("acme", ALL), 1)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&p["title"], &p["files"], &p["author"]["sub"]),
        (
            &json!("Pushed"),
            &json!(["configuration-file"]),
            &json!("tester")
        ),
        "{p}"
    );
    let proposed = |p: &Value| {
        app.git(
            "acme",
            &[
                "show",
                &format!("{}:configuration.yml", p["commit"].as_str().unwrap()),
            ],
        )
    };
    assert_eq!(proposed(&p), "folders:\n  - path: pushed");
    // The next commit's `Proposal: 1` trailer updates it (the head's files count).
    std::fs::write(
        dir.join("configuration.yml"),
        "folders:\n  - path: pushed-again\n",
    )
    .unwrap();
    crate::push::ok(crate::push::git(
        &dir,
        "",
        &[
            "commit",
            "-qam",
            "Pushed again",
            "-m",
            "It scans more.",
            "-m",
            "Proposal: 1",
        ],
    ));
    let (pushed, stderr) = push(&dir, &t, &["HEAD:refs/for/main"]);
    assert!(pushed, "{stderr}");
    assert!(
        stderr.contains("planfiles: proposal #1 updated: Pushed again"),
        "{stderr}"
    );
    let p: Value = app
        .proposal(&token("acme", ALL), 1)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&p["title"], &p["message"]),
        (&json!("Pushed again"), &json!("It scans more.")),
        "{p}"
    );
    assert_eq!(proposed(&p), "folders:\n  - path: pushed-again");
    // Another's proposal is not the pusher's to update; another ref is refused.
    let (pushed, stderr) = push(
        &dir,
        &token_as("acme", "someone-else", WRITE_BOTH),
        &["HEAD:refs/for/main"],
    );
    assert!(!pushed && stderr.contains("only the author"), "{stderr}");
    let (pushed, stderr) = push(&dir, &t, &["HEAD:refs/for/other"]);
    assert!(
        !pushed && stderr.contains("refs/for/main, to propose"),
        "{stderr}"
    );
    assert_eq!(app.head("acme"), before);
    // Turned off again: the push of the first commit (its message names no proposal) lands.
    app.require_approval("acme", 0);
    let (pushed, stderr) = push(&dir, &t, &["HEAD~1:main"]);
    assert!(pushed, "{stderr}");
}

#[tokio::test]
async fn listing_filters_by_state_and_pages_newest_first() {
    let app = TestApp::spawn().await;
    for i in 0..5 {
        open(&app, "initech", "ann", &format!("10000000000{i}")).await;
    }
    let (status, _) = step(&app, "initech", "ann", WRITER, 2, "close").await;
    assert_eq!(status, 200);
    let list = |q: &'static str| {
        let app = &app;
        async move {
            let res = app
                .proposals(&token("initech", &["jit.integrations.read"]), q)
                .await;
            assert_eq!(res.status(), 200);
            res.json::<Value>().await.unwrap()
        }
    };
    let numbers = |v: &Value| -> Vec<u64> {
        v["proposals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["number"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(numbers(&list("").await), [5, 4, 3, 2, 1]);
    // A reader of the configuration file alone sees none of these (they change the other).
    let other: Value = app
        .proposals(&token("initech", &["jit.preferences.read"]), "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(numbers(&other), Vec::<u64>::new());
    assert_eq!(numbers(&list("?state=open").await), [5, 4, 3, 1]);
    assert_eq!(numbers(&list("?state=closed").await), [2]);
    let page = list("?limit=2").await;
    assert_eq!(
        (numbers(&page), page["next"].as_u64()),
        (vec![5, 4], Some(4))
    );
    let page = list("?limit=2&before=4").await;
    assert_eq!(
        (numbers(&page), page["next"].as_u64()),
        (vec![3, 2], Some(2))
    );
    let page = list("?limit=2&before=2").await;
    assert_eq!((numbers(&page), page["next"].as_u64()), (vec![1], None));
    // A clone carries the proposals (a backup keeps open ones).
    let mirror = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("git")
        .args(["clone", "-q", "--mirror", "-c"])
        .arg(format!(
            "http.extraHeader=Authorization: Bearer {}",
            token("initech", &["planfiles.repos.read"])
        ))
        .arg(app.url("/git/initech.git"))
        .arg(mirror.path().join("m.git"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refs = git_in(
        &mirror.path().join("m.git"),
        &["for-each-ref", "--format=%(refname)", "refs/proposals/"],
    );
    assert_eq!(refs.lines().count(), 6, "{refs}");
    assert!(refs.contains("refs/proposals/records"), "{refs}");
}

#[tokio::test]
async fn bad_proposal_requests_are_refused_and_change_nothing() {
    let app = TestApp::spawn().await;
    let p = open(&app, "globex", "ann", "111122223333").await;
    let n = p["number"].as_u64().unwrap();
    let records = app.git("globex", &["rev-parse", "refs/proposals/records"]);
    let head = app.head("globex");
    let no_sub = crate::common::sign_hs256(
        crate::common::SECRET,
        &json!({"alg": "HS256"}),
        &json!({"tenant_id": "globex", "permissions": [APPROVE, "jit.integrations.write"], "exp": crate::common::now() + 600}),
    );
    let valid = json!({"integration-file": {"content": aws("222233334444")}, "title": "t"});
    let (one, approve, close, apply) = (
        format!("/plans/proposals/{n}"),
        format!("/plans/proposals/{n}/approve"),
        format!("/plans/proposals/{n}/close"),
        format!("/plans/proposals/{n}/apply"),
    );
    // Method, path, token, body; the status and code it gets.
    type Case<'a> = (&'a str, &'a str, String, Option<Value>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/plans/proposals",
            no_sub.clone(),
            Some(valid.clone()),
            403,
            "sub_required",
        ),
        ("POST", &approve, no_sub.clone(), None, 403, "sub_required"),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", &["jit.preferences.write"]),
            Some(valid.clone()),
            403,
            "insufficient_scope",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(json!({"integration-file": {"content": {}}})),
            422,
            "invalid_content",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(json!({"title": "nothing"})),
            422,
            "invalid_content",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(
                json!({"integration-file": {"content": {"aws": [{"account_id": "555566667777", "regions": ["ap-southeast-2"], "type": "aws"}]}}, "title": "same"}),
            ),
            422,
            "nothing_proposed",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(json!({"configuration-file": {"payload": {"folders": []}}, "title": "no sha"})),
            428,
            "precondition_required",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(
                json!({"integration-file": {"content": {"aws": "not a list"}}, "title": "t", "message": 5}),
            ),
            422,
            "invalid_content",
        ),
        (
            "GET",
            "/plans/proposals/999",
            token("globex", ALL),
            None,
            404,
            "proposal_not_found",
        ),
        (
            "GET",
            "/plans/proposals/0",
            token("globex", ALL),
            None,
            404,
            "not_found",
        ),
        (
            "GET",
            "/plans/proposals/01",
            token("globex", ALL),
            None,
            404,
            "not_found",
        ),
        (
            "GET",
            "/plans/proposals?state=merged",
            token("globex", ALL),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/plans/proposals?limit=0",
            token("globex", ALL),
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/plans/proposals",
            token("globex", &["planfiles.repos.read"]),
            None,
            403,
            "insufficient_scope",
        ),
        (
            "POST",
            "/plans/proposals/999/approve",
            token_as("globex", "bo", &[APPROVE]),
            Some(json!({"commit": "ab".repeat(20)})),
            404,
            "proposal_not_found",
        ),
        (
            "GET",
            &one,
            token("globex", &["jit.preferences.read"]),
            None,
            403,
            "insufficient_scope",
        ),
        (
            "POST",
            "/plans/proposals",
            token_as("globex", "x", WRITER),
            Some(
                json!({"integration-file": {"content": aws("222233334444")}, "title": "t",
                        "message": "why\n\nApproved-by: eve <e@x>"}),
            ),
            422,
            "invalid_content",
        ),
        (
            "POST",
            &approve,
            token_as("globex", "bo", &[APPROVE]),
            Some(json!({"commit": "xyz"})),
            422,
            "invalid_content",
        ),
        (
            "POST",
            &close,
            token_as("globex", "bo", WRITER),
            None,
            403,
            "not_proposal_author",
        ),
        (
            "POST",
            &apply,
            token_as("globex", "bo", &["jit.integrations.read"]),
            None,
            403,
            "insufficient_scope",
        ),
        (
            "POST",
            "/plans/proposals?dry_run=true",
            token_as("globex", "x", WRITER),
            Some(valid.clone()),
            400,
            "invalid_query",
        ),
        (
            "DELETE",
            &one,
            token("globex", ALL),
            None,
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, tok, body, status, code) in cases {
        let res = app.send(method, path, &tok, body.as_ref(), &[]).await;
        let (got, body) = problem(res).await;
        assert_eq!(
            (got, body["code"].as_str().unwrap_or("")),
            (status, code),
            "{method} {path}: {body}"
        );
    }
    assert_eq!(
        app.git("globex", &["rev-parse", "refs/proposals/records"]),
        records
    );
    assert_eq!(app.head("globex"), head);
    let got: Value = app
        .proposal(&token("globex", ALL), n)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            got["state"].as_str(),
            got["approvals"].as_array().map(Vec::len)
        ),
        (Some("open"), Some(0))
    );
    app.fsck("globex");
}

/// The state a crash between an apply's record and its move of `main` leaves (the record
/// says applied, `main` does not hold the commit; made here by putting `main` back with plain
/// git): the proposal reads as open, the list says so, and it applies again.
#[tokio::test]
async fn an_apply_whose_main_move_was_lost_reads_open_and_applies_again() {
    let app = TestApp::spawn().await;
    // A history longer than the first parents looked at before git's ancestry is asked.
    crate::common::fast_commits(&app.repo("globex"), 100, "configuration.yml");
    let before = app.head("globex");
    let p = open(&app, "globex", "ann", "111122223333").await;
    let n = p["number"].as_u64().unwrap();
    let (status, _) = step(&app, "globex", "bo", APPROVER, n, "approve").await;
    assert_eq!(status, 200);
    let (status, applied) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(status, 200);
    let lost = applied["applied_commit"].as_str().unwrap().to_owned();
    app.git("globex", &["update-ref", "refs/heads/main", &before, &lost]);
    // Nothing keeps the lost commit: git's gc takes it, and the records still name it.
    app.git("globex", &["gc", "--quiet", "--prune=now"]);
    assert!(!crate::common::git_succeeds(
        &app.repo("globex"),
        &["cat-file", "-e", &lost]
    ));
    let got: Value = app
        .proposal(&token("globex", ALL), n)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["state"], "open", "{got}");
    assert!(got.get("applied_commit").is_none(), "{got}");
    assert_eq!(
        got["approvals"][0]["by"]["sub"], "bo",
        "the approval is kept"
    );
    let open_ones: Value = app
        .proposals(&token("globex", ALL), "?state=open")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(open_ones["proposals"][0]["number"], n);
    // The change stream tells of no apply that did not happen: a resume from before gives
    // the opening and the approval, then waits (the lost step is the last, and `main` is
    // where it found it: its move may still come).
    let mut stream = Sse::open(&app, &token("globex", ALL), "", Some(&before)).await;
    let seen: Vec<String> = [
        stream.next().await,
        stream.next().await,
        stream.next().await,
    ]
    .into_iter()
    .map(|e| e.kind)
    .collect();
    assert_eq!(seen, ["proposal.opened", "proposal.approved", "head"]);
    let (status, again) = step(&app, "globex", "ann", WRITER, n, "apply").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        app.head("globex"),
        again["applied_commit"].as_str().unwrap()
    );
    let (applied_step, file) = (stream.next().await, stream.next().await);
    assert_eq!(
        (applied_step.kind.as_str(), &applied_step.data["applied"]),
        ("proposal.applied", &again["applied_commit"])
    );
    assert_eq!(file.id, again["applied_commit"].as_str().unwrap());
    assert!(stream
        .next_within(std::time::Duration::from_millis(500))
        .await
        .is_none());
    // A later step settles the record: it stays applied once main holds the commit.
    let q = open(&app, "globex", "ann", "444455556666").await;
    let got: Value = app
        .proposal(&token("globex", ALL), n)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["state"], "applied");
    assert_ne!(q["number"], n);
}

/// A proposal opened while the validators allowed it is held to today's at its apply: the
/// operator added a rule since (SIGHUP), and the apply is refused with the rule it breaks.
#[tokio::test]
async fn an_apply_is_held_to_todays_validators() {
    let dir = crate::common::process::data_dir_with_fixture();
    let schemas = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[validation]\nschemas_dir = {:?}\n",
            schemas.path().display().to_string()
        ),
    )
    .unwrap();
    let server = crate::common::process::serve(dir.path(), &[]);
    let client = reqwest::Client::new();
    let bad = json!({"integration-file": {"content": {"aws": [{"account_id": "12345", "regions": ["mars-1"], "type": "aws"}]}}, "title": "t"});
    let res = client
        .post(server.url("/plans/proposals"))
        .bearer_auth(token_as("globex", "ann", WRITER))
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "no rule yet");
    let p: Value = res.json().await.unwrap();
    crate::common::copy_tree(&crate::common::shipped_schemas(), schemas.path());
    server.signal("HUP");
    let mut reloaded = false;
    for _ in 0..100 {
        let m = client
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.contains("planfiles_schema_reloads_total{result=\"changed\"} 1") {
            reloaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reloaded, "the schemas were not read again");
    let res = client
        .post(server.url("/plans/proposals/1/apply"))
        .bearer_auth(token_as("globex", "ann", WRITER))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422);
    let refused: Value = res.json().await.unwrap();
    assert_eq!(refused["code"], "schema_violation", "{refused}");
    assert!(
        refused["errors"][0]["pointer"]
            .as_str()
            .unwrap()
            .starts_with("/aws/0"),
        "{refused}"
    );
    let got: Value = client
        .get(server.url("/plans/proposals/1"))
        .bearer_auth(token("globex", ALL))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (got["state"].as_str(), got["commit"].clone()),
        (Some("open"), p["commit"].clone())
    );
}

/// What one client's loop of proposal steps was told: (number, commit) of each 200.
#[derive(Default)]
struct Acked {
    opened: Vec<(u64, String)>,
    approved: Vec<(u64, String)>,
    applied: Vec<(u64, String)>,
}

/// Opens, approves and applies proposals of the integration file on `addr` until the server
/// goes away; what was acknowledged.
async fn steps_until_gone(addr: String, worker: u64) -> Acked {
    let client = reqwest::Client::new();
    let (ann, bo) = (
        token_as("globex", "ann", WRITER),
        token_as("globex", &format!("bo{worker}"), APPROVER),
    );
    let mut acked = Acked::default();
    for i in 0u64.. {
        let body = json!({"integration-file": {"content": aws(&format!("{:012}", worker * 1_000_000 + i))},
                          "title": format!("Round {worker}/{i}")});
        let Ok(res) = client
            .post(format!("{addr}/plans/proposals"))
            .bearer_auth(&ann)
            .json(&body)
            .send()
            .await
        else {
            break;
        };
        if res.status() != 201 {
            assert!(res.status().is_server_error(), "open: {}", res.status());
            continue;
        }
        let Ok(p) = res.json::<Value>().await else {
            break;
        };
        let (n, commit) = (
            p["number"].as_u64().unwrap(),
            p["commit"].as_str().unwrap().to_owned(),
        );
        acked.opened.push((n, commit.clone()));
        let Ok(res) = client
            .post(format!("{addr}/plans/proposals/{n}/approve"))
            .bearer_auth(&bo)
            .json(&json!({"commit": commit}))
            .send()
            .await
        else {
            break;
        };
        if res.status() != 200 {
            continue;
        }
        acked.approved.push((n, commit));
        let Ok(res) = client
            .post(format!("{addr}/plans/proposals/{n}/apply"))
            .bearer_auth(&ann)
            .send()
            .await
        else {
            break;
        };
        let status = res.status();
        let Ok(p) = res.json::<Value>().await else {
            break;
        };
        match status.as_u16() {
            200 => acked
                .applied
                .push((n, p["applied_commit"].as_str().unwrap().to_owned())),
            // The other loop's apply moved the file since this one's base.
            409 => assert_eq!(p["code"], "proposal_stale", "{p}"),
            s => assert!(s >= 500, "apply: {s} {p}"),
        }
    }
    acked
}

/// kill -9 at moments spread over open, approve and apply, under two clients' steps on a
/// tenant that requires approval: after each restart every acknowledged step is there (an
/// applied proposal's commit on `main`, every approval recorded), no proposal reads applied
/// whose commit is not on `main`, every signed `Proposal:` commit on `main` is its
/// proposal's, and `git fsck --strict` is clean.
#[tokio::test]
async fn kill_9_during_proposal_steps_loses_no_acknowledged_step() {
    use crate::common::process::{data_dir_with_fixture, serve};
    let dir = data_dir_with_fixture();
    let set = std::process::Command::new(env!("CARGO_BIN_EXE_planfiles"))
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", dir.path().join("data"))
        .env("PLANFILES_JWT_SECRET", crate::common::SECRET)
        .args(["tenant", "set", "globex", "--require-approval", "1"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    let repo = dir.path().join("data/tenants/globex.git");
    let mut all = Acked::default();
    for round in 0..5u64 {
        let mut server = serve(dir.path(), &[]);
        let loops: Vec<_> = (0..2)
            .map(|w| tokio::spawn(steps_until_gone(server.addr.clone(), round * 10 + w)))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(600 + 137 * round)).await;
        server.kill9();
        for l in loops {
            let acked = l.await.unwrap();
            all.opened.extend(acked.opened);
            all.approved.extend(acked.approved);
            all.applied.extend(acked.applied);
        }
        git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
    }
    assert!(
        !all.applied.is_empty(),
        "no apply was acknowledged in 5 rounds"
    );
    let server = serve(dir.path(), &[]);
    let client = reqwest::Client::new();
    let get = |n: u64| {
        let (client, url) = (&client, server.url(&format!("/plans/proposals/{n}")));
        async move {
            client
                .get(url)
                .bearer_auth(token("globex", ALL))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    for (n, commit) in &all.opened {
        assert_eq!(get(*n).await["commit"], commit.as_str(), "opened #{n}");
    }
    for (n, commit) in &all.approved {
        let p = get(*n).await;
        let found = p["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["commit"] == commit.as_str());
        assert!(found, "approval of #{n} lost: {p}");
    }
    for (n, applied) in &all.applied {
        let p = get(*n).await;
        assert_eq!(
            (p["state"].as_str(), p["applied_commit"].as_str()),
            (Some("applied"), Some(applied.as_str())),
            "#{n}"
        );
        assert!(
            crate::common::git_succeeds(&repo, &["merge-base", "--is-ancestor", applied, "main"]),
            "#{n}"
        );
    }
    // Nothing reads applied off main, and main's proposal commits are their proposals'.
    let listed: Value = client
        .get(server.url("/plans/proposals?state=applied&limit=1000"))
        .bearer_auth(token("globex", ALL))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let applied: std::collections::HashMap<String, u64> = listed["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["applied_commit"].as_str().unwrap().to_owned(),
                p["number"].as_u64().unwrap(),
            )
        })
        .collect();
    for commit in applied.keys() {
        assert!(
            crate::common::git_succeeds(&repo, &["merge-base", "--is-ancestor", commit, "main"]),
            "{commit}"
        );
    }
    let on_main = git_in(
        &repo,
        &[
            "log",
            "--first-parent",
            "--format=%H %(trailers:key=Proposal,valueonly,separator=)",
            "main",
        ],
    );
    let mut seen = 0;
    for line in on_main.lines() {
        let Some((commit, n)) = line.split_once(' ').filter(|(_, n)| !n.is_empty()) else {
            continue;
        };
        seen += 1;
        assert_eq!(
            applied.get(commit),
            Some(&n.trim().parse().unwrap()),
            "{line}"
        );
    }
    assert_eq!(
        seen,
        applied.len(),
        "every applied proposal's commit is on main once"
    );
    eprintln!(
        "acknowledged: {} opened, {} approved, {} applied over 5 kills",
        all.opened.len(),
        all.approved.len(),
        all.applied.len()
    );
}
