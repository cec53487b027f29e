use super::*;
use crate::domain::ShardUrl;

fn new_hook() -> NewWebhook {
    NewWebhook {
        url: WebhookUrl::parse("https://hooks.example.com/in").unwrap(),
        events: EventType::ALL.to_vec(),
        description: Some("ci".into()),
    }
}

#[test]
fn subscriptions_live_beside_git_and_start_at_the_head() {
    let (_dir, storage, acme) = crate::storage::test_storage();
    let hook = storage.add_webhook(&acme, new_hook(), 2).unwrap();
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
    let hook = storage.add_webhook(&acme, new_hook(), 10).unwrap();
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
        .advance_webhook_cursor(&acme, &mut cursor, moved_on)
        .unwrap();
    drop(cursor);
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
        cursor::read(&cursor_path(target.path(), &hook.id)).unwrap(),
        moved_on
    );
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
