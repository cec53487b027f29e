use super::*;
use crate::domain::ShardUrl;

/// A delivered attempt of event `msg-n`.
fn delivered(n: u32) -> Attempt {
    Attempt {
        webhook_id: format!("msg-{n}"),
        kind: "integration-file.updated".into(),
        commit_sha: "ab".repeat(20),
        attempt: 1,
        status: AttemptStatus::Http(200),
        duration_ms: 1,
        at: "2026-11-27T00:00:00Z".into(),
        detail: None,
    }
}

fn new_hook() -> NewWebhook {
    NewWebhook {
        url: WebhookUrl::parse("https://hooks.example.com/in").unwrap(),
        events: EventType::ALL.to_vec(),
        description: Some("ci".into()),
        key: None,
    }
}

#[test]
fn subscriptions_live_beside_git_and_start_at_the_head() {
    let (_dir, storage, acme) = crate::storage::test_storage();
    let (hook, _) = storage.add_webhook(&acme, new_hook(), 2).unwrap();
    let head = storage.head_state(&acme).unwrap().commit;
    let cursor = storage
        .claim_webhook_cursor(&acme, &hook.id)
        .unwrap()
        .unwrap();
    assert_eq!(cursor.position(), CursorPosition::at(head));
    assert_eq!(storage.webhooks(&acme).unwrap(), vec![hook.clone()]);
    assert_eq!(storage.tenants_with_webhooks(), vec![acme.clone()]);
    // The secret is readable by the service's user only, and in no git object.
    let file = storage.repo_path(&acme).join("webhooks/subscriptions.json");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o077,
        0
    );
    storage.add_webhook(&acme, new_hook(), 2).unwrap();
    assert!(matches!(
        storage.add_webhook(&acme, new_hook(), 2),
        Err(StorageError::WebhookLimit { limit: 2, .. })
    ));
    let streak = SystemTime::now() - Duration::from_secs(1);
    let failing = storage
        .mark_webhook_failing(&acme, &hook.id, streak)
        .unwrap();
    assert_eq!(failing.state, WebhookState::Failing);
    let resumed = storage.resume_webhook(&acme, &hook.id).unwrap();
    assert_eq!(resumed.state, WebhookState::Active);
    // The dispatcher's verdict on a streak that began before the resume comes too late.
    let late = storage
        .mark_webhook_failing(&acme, &hook.id, streak)
        .unwrap();
    assert_eq!(late.state, WebhookState::Active, "a resume wins the race");
    storage.remove_webhook(&acme, &hook.id).unwrap();
    assert!(matches!(
        storage.remove_webhook(&acme, &hook.id),
        Err(StorageError::WebhookNotFound { .. })
    ));
    // An attempt that finishes after the removal logs nothing (no file comes back).
    let late = delivered(0);
    storage.log_webhook_attempts(&acme, &hook.id, std::slice::from_ref(&late));
    assert!(!storage
        .repo_path(&acme)
        .join(format!("webhooks/{}.log", hook.id))
        .exists());
    assert_eq!(storage.webhooks(&acme).unwrap().len(), 1);
    let last = storage.webhooks(&acme).unwrap().remove(0);
    storage.remove_webhook(&acme, &last.id).unwrap();
    assert!(
        storage.tenants_with_webhooks().is_empty(),
        "no file left to scan"
    );
}

#[test]
fn a_moving_tenant_takes_no_change_and_its_bundle_lands_whole() {
    let (_dir, storage, acme) = crate::storage::test_storage();
    let (hook, _) = storage.add_webhook(&acme, new_hook(), 10).unwrap();
    let mut cursor = storage
        .claim_webhook_cursor(&acme, &hook.id)
        .unwrap()
        .unwrap();
    let head = cursor.position().through;
    let moved_on = CursorPosition {
        through: head,
        partial: Some(head),
    };
    storage
        .advance_webhook_cursor(&acme, &mut cursor, moved_on, &[])
        .unwrap();
    drop(cursor);
    let tried: Vec<Attempt> = (0..25).map(delivered).collect();
    storage.log_webhook_attempts(&acme, &hook.id, &tried);
    storage
        .begin_move(&acme, &ShardUrl::parse("http://b:8080").unwrap())
        .unwrap();
    assert!(matches!(
        storage.add_webhook(&acme, new_hook(), 10),
        Err(StorageError::TenantMoving { .. })
    ));
    assert!(matches!(
        storage.claim_webhook_cursor(&acme, &hook.id),
        Err(StorageError::TenantMoving { .. })
    ));
    let bundle = storage.export_webhooks(&acme).unwrap();
    let target = tempfile::tempdir().unwrap();
    install(&acme, target.path(), &bundle).unwrap();
    assert_eq!(read_all(&acme, target.path()).unwrap(), vec![hook.clone()]);
    assert_eq!(
        cursor::read(&table(target.path()), &hook.id).unwrap(),
        moved_on
    );
    // The deliveries log goes on from the latest attempts: newest first, as listed.
    let moved = log::recent(&dir(target.path()), &hook.id, 100).unwrap();
    let newest_first: Vec<Attempt> = (5..25).rev().map(delivered).collect();
    assert_eq!(moved, newest_first);
    // A tenant without subscriptions says so: one coming back finds none of its old ones.
    let empty = WebhookBundle {
        subscriptions: String::new(),
        cursors: Vec::new(),
    };
    install(&acme, target.path(), &empty).unwrap();
    assert!(read_all(&acme, target.path()).unwrap().is_empty());
    assert!(!target.path().join("webhooks").exists());
    assert!(!format!("{bundle:?}").contains("whsec_"), "{bundle:?}");
}

fn write(storage: &Storage, tenant: &TenantId, text: &str) -> crate::domain::CommitId {
    crate::storage::test_write(storage, tenant, text).unwrap();
    storage.head_state(tenant).unwrap().commit
}

/// `main` moved by hand, as plain git would.
fn set_main(storage: &Storage, tenant: &TenantId, to: crate::domain::CommitId) {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(storage.repo_path(tenant))
        .args(["update-ref", "refs/heads/main", to.as_str()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn a_delivery_plan_steps_along_the_line_waits_when_behind_and_meets_after_a_reset() {
    use crate::storage::DeliveryPlan;
    let (_dir, storage, acme) = crate::storage::test_storage();
    let a = write(&storage, &acme, "n: 1\n");
    let b = write(&storage, &acme, "n: 2\n");
    let c = write(&storage, &acme, "n: 3\n");
    let d = write(&storage, &acme, "n: 4\n");
    let steps = |from, to| match storage.delivery_plan(&acme, from, to, 2).unwrap() {
        DeliveryPlan::Steps(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        steps(a, d),
        vec![a, c, d],
        "the cursor, every second commit, the head"
    );
    assert_eq!(steps(d, d), vec![d]);
    assert!(matches!(
        storage.delivery_plan(&acme, d, b, 2).unwrap(),
        DeliveryPlan::Behind
    ));
    // main back to b, then a new commit on it: the cursor at d meets the new line at b.
    set_main(&storage, &acme, b);
    let e = write(&storage, &acme, "n: 5\n");
    match storage.delivery_plan(&acme, d, e, 2).unwrap() {
        DeliveryPlan::Fork(meet) => assert_eq!(meet.commit, b),
        other => panic!("{other:?}"),
    }
    assert_eq!(steps(b, e), vec![b, e]);
    // A cursor whose commit is gone: start again at the head.
    let gone = crate::domain::CommitId(crate::domain::ObjectId::parse(&"ab".repeat(20)).unwrap());
    match storage.delivery_plan(&acme, gone, e, 2).unwrap() {
        DeliveryPlan::Reset(head) => assert_eq!(head.commit, e),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cursor_move_that_fails_is_an_error_and_never_goes_past_what_was_delivered() {
    use crate::storage::disk::faults::{inject, Op};
    let (_dir, storage, acme) = crate::storage::test_storage();
    let (hook, _) = storage.add_webhook(&acme, new_hook(), 10).unwrap();
    let next = write(&storage, &acme, "a: 1\n");
    let mut cursor = storage
        .claim_webhook_cursor(&acme, &hook.id)
        .unwrap()
        .unwrap();
    let at = cursor.position();
    // The slot cannot be written, or its sync fails (fsync mode: its own fdatasync): an
    // error, and the holder stays where it stood (the event is sent again).
    for op in [Op::Write, Op::Fsync] {
        let fault = inject(op, "webhooks/cursors", libc::EIO, 1);
        let moved =
            storage.advance_webhook_cursor(&acme, &mut cursor, CursorPosition::at(next), &[]);
        assert!(fault.fired(), "{op:?}");
        assert!(moved.is_err(), "{op:?}");
        assert_eq!(cursor.position(), at, "{op:?}");
    }
    drop(cursor);
    // Nothing faulted: it moves.
    let mut cursor = storage
        .claim_webhook_cursor(&acme, &hook.id)
        .unwrap()
        .unwrap();
    storage
        .advance_webhook_cursor(
            &acme,
            &mut cursor,
            CursorPosition::at(next),
            &[delivered(1)],
        )
        .unwrap();
    assert_eq!(cursor.position(), CursorPosition::at(next));
    // The delivered attempt a move carries reaches the log with it.
    assert_eq!(
        storage.webhook_attempts(&acme, &hook.id, 10).unwrap(),
        vec![delivered(1)]
    );
}
