//! The cursor table's rules: durable moves, torn slots, one holder per record, records reused safely, old cursor files adopted.
use super::*;

fn commit(n: u8) -> CommitId {
    CommitId(ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap())
}

fn ids(n: usize) -> Vec<WebhookId> {
    (0..n).map(|_| WebhookId::generate()).collect()
}

/// Subscriptions made one after another, each cursor at `commit(n)`: the ones before it are
/// live when it is inserted.
fn made(path: &Path, hooks: &[(&WebhookId, u8)]) {
    let mut live = Vec::new();
    for (id, n) in hooks {
        insert(path, id, CursorPosition::at(commit(*n)), &live).unwrap();
        live.push((*id).clone());
    }
}

#[test]
fn a_cursor_moves_durably_and_a_torn_slot_falls_back_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cursors");
    let [a, b] = <[WebhookId; 2]>::try_from(ids(2)).unwrap();
    made(&path, &[(&a, 1), (&b, 9)]);
    let mut c = DeliveryCursor::claim(&path, &a).unwrap().unwrap();
    let half = CursorPosition {
        through: commit(1),
        partial: Some(commit(2)),
    };
    c.advance(half, true).unwrap();
    c.advance(CursorPosition::at(commit(2)), true).unwrap();
    assert_eq!(read(&path, &a).unwrap(), CursorPosition::at(commit(2)));
    drop(c);
    // Creation wrote seq 0 and 1; the moves seq 2 (slot 0) and 3 (slot 1). The newest torn:
    // the one before it (seq 2) is read, and the other record is untouched.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0u8; 64], SLOT as u64).unwrap();
    assert_eq!(read(&path, &a).unwrap(), half);
    assert_eq!(read(&path, &b).unwrap(), CursorPosition::at(commit(9)));
    // Both gone: the cursor is not found, never guessed.
    f.write_all_at(&[0u8; RECORD], 0).unwrap();
    assert_eq!(read(&path, &a).unwrap_err().kind(), io::ErrorKind::NotFound);
    assert_eq!(read(&path, &b).unwrap(), CursorPosition::at(commit(9)));
}

#[test]
fn each_record_has_one_holder_at_a_time_and_others_are_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cursors");
    let hooks = ids(3);
    made(&path, &[(&hooks[0], 0), (&hooks[1], 1), (&hooks[2], 2)]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * RECORD as u64);
    let held = DeliveryCursor::claim(&path, &hooks[1]).unwrap().unwrap();
    assert!(
        DeliveryCursor::claim(&path, &hooks[1]).unwrap().is_none(),
        "one holder at a time, within a process too"
    );
    for other in [&hooks[0], &hooks[2]] {
        assert!(DeliveryCursor::claim(&path, other).unwrap().is_some());
    }
    drop(held);
    assert!(DeliveryCursor::claim(&path, &hooks[1]).unwrap().is_some());
    let unknown = WebhookId::generate();
    assert_eq!(
        DeliveryCursor::claim(&path, &unknown).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn a_removed_record_is_reused_only_once_its_last_holder_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cursors");
    let [a, b, c, d] = <[WebhookId; 4]>::try_from(ids(4)).unwrap();
    made(&path, &[(&a, 1), (&b, 2)]);
    // A delivery of `a` under way while `a` is removed: its late moves do not bring the
    // cursor back, so no delivery can claim it again.
    let mut late = DeliveryCursor::claim(&path, &a).unwrap().unwrap();
    remove(&path, &a).unwrap();
    assert!(!holds(&path, &a));
    // A move that raced the removal (its record read before, its slot written after).
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&slot(2, &a, CursorPosition::at(commit(3))), 0)
        .unwrap();
    assert!(!holds(&path, &a));
    let refused = late
        .advance(CursorPosition::at(commit(4)), true)
        .unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::NotFound);
    assert!(!holds(&path, &a));
    drop(late);
    assert_eq!(
        DeliveryCursor::claim(&path, &a).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    // `b` removed while held: `c` must not take the record `late` still writes to, but may
    // take `a`'s, which no one holds.
    let mut late = DeliveryCursor::claim(&path, &b).unwrap().unwrap();
    remove(&path, &b).unwrap();
    assert!(late.advance(CursorPosition::at(commit(3)), true).is_err());
    insert(&path, &c, CursorPosition::at(commit(4)), &[]).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * RECORD as u64);
    insert(
        &path,
        &d,
        CursorPosition::at(commit(5)),
        std::slice::from_ref(&c),
    )
    .unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        3 * RECORD as u64,
        "b's record is held: d goes to the end"
    );
    drop(late);
    assert!(!holds(&path, &a) && !holds(&path, &b));
    for (id, n) in [(&c, 4), (&d, 5)] {
        assert_eq!(read(&path, id).unwrap(), CursorPosition::at(commit(n)));
    }
}

#[test]
fn the_cursor_files_from_before_the_table_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let id = WebhookId::generate();
    // The old format: `<id>.cursor`, two 128-byte slots, no id in them.
    let old = |seq: u64, at: CommitId| {
        let body = format!("{seq:016x} {at} {}", "-".repeat(40));
        let mut s = format!("{body} {}", &hex(&Sha256::digest(body.as_bytes()))[..16]);
        s.push_str(&" ".repeat(LEGACY_SLOT - 1 - s.len()));
        s.push('\n');
        s
    };
    let text = old(6, commit(6)) + &old(7, commit(7));
    std::fs::write(dir.path().join(format!("{id}.cursor")), text).unwrap();
    std::fs::write(dir.path().join("subscriptions.json"), "{}").unwrap();
    let live = [id.clone()];
    assert_eq!(
        legacy(dir.path(), &live).unwrap(),
        vec![(id.clone(), CursorPosition::at(commit(7)))]
    );
    assert!(
        legacy(dir.path(), &[]).unwrap().is_empty(),
        "a removed one's file"
    );
    std::fs::write(dir.path().join(format!("{id}.cursor")), [0u8; 256]).unwrap();
    assert!(
        legacy(dir.path(), &live).unwrap().is_empty(),
        "a torn old cursor is passed by, never guessed"
    );
}
