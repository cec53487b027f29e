use super::*;
use serde_json::json;

fn map(v: Value) -> Mapping {
    v.as_object().unwrap().clone()
}

/// The edited text, failing the test when the splice did not edit.
fn edit(old: &str, new: Value) -> String {
    match rewrite(old, &map(new)) {
        Rewrite::Edited(t) => t,
        other => panic!("{other:?} for {old:?}"),
    }
}

const ACME: &str = "aws:\n  - account_id: \"123456789012\"\n    regions:\n      - us-east-1\n      - eu-west-1\n    type: aws\n  - account_id: \"210987654321\"\n    regions:\n      - us-west-2\n    type: aws\ndrata:\n  user_email: compliance@acme.example\n  workspace: acme-prod\n";

#[test]
fn an_added_account_adds_only_its_lines() {
    let mut content = Value::Object(parse_mapping(ACME).unwrap());
    content["aws"]
        .as_array_mut()
        .unwrap()
        .push(json!({"account_id": "999988887777", "regions": ["eu-central-1"], "type": "aws"}));
    let text = edit(ACME, content);
    let added =
        "  - account_id: \"999988887777\"\n    regions:\n      - eu-central-1\n    type: aws\n";
    let at = ACME.find("drata:").unwrap();
    assert_eq!(text, [&ACME[..at], added, &ACME[at..]].concat());
}

#[test]
fn fresh_emission_has_the_fixture_style() {
    let content = parse_mapping(ACME).unwrap();
    assert_eq!(crate::domain::yaml::emit(&content).unwrap(), ACME);
}

#[test]
fn comments_quoting_and_flow_survive_edits_elsewhere() {
    let old = "# tenant settings\nname: 'demo'   # shown in the UI\n\n# ports\nports: [80, 443]\nowner:\n  email: \"a@b.c\"\n  team: core # the team\n";
    let text = edit(
        old,
        json!({"name": "demo2", "ports": [80, 443], "owner": {"email": "a@b.c", "team": "edge"}}),
    );
    assert_eq!(
        text,
        "# tenant settings\nname: 'demo2'   # shown in the UI\n\n# ports\nports: [80, 443]\nowner:\n  email: \"a@b.c\"\n  team: edge # the team\n"
    );
    // A flow sequence that changes stays a flow sequence.
    let text = edit(
        old,
        json!({"name": "demo", "ports": [80, 8443], "owner": {"email": "a@b.c", "team": "core"}}),
    );
    assert!(text.contains("\nports: [80, 8443]\n"), "{text}");
}

#[test]
fn a_removed_entry_takes_its_comment_above() {
    let old = "a: 1\n\n# about b\nb: 2  # trailing\nc: 3\n";
    assert_eq!(edit(old, json!({"a": 1, "c": 3})), "a: 1\n\nc: 3\n");
    let old = "list:\n  # first\n  - x\n  # second\n  - y\n  - z\n";
    assert_eq!(
        edit(old, json!({"list": ["x", "z"]})),
        "list:\n  # first\n  - x\n  - z\n"
    );
}

#[test]
fn added_keys_go_where_the_client_puts_them() {
    let old = "a: 1  # one\nc: 3\n";
    assert_eq!(
        edit(old, json!({"a": 1, "b": 2, "c": 3})),
        "a: 1  # one\nb: 2\nc: 3\n"
    );
    assert_eq!(
        edit(old, json!({"z": 0, "a": 1, "c": 3})),
        "z: 0\na: 1  # one\nc: 3\n"
    );
    // A reorder moves whole entries with their comments.
    let old = "# A\na: 1\n# C\nc:\n  - 3\n";
    assert_eq!(
        edit(old, json!({"c": [3], "a": 1})),
        "# C\nc:\n  - 3\n# A\na: 1\n"
    );
}

#[test]
fn compact_items_can_lose_or_gain_their_first_key() {
    let old = "items:\n  - id: 1   # first\n    name: web\n  - id: 2\n    name: db\n";
    assert_eq!(
        edit(
            old,
            json!({"items": [{"name": "web"}, {"id": 2, "name": "db"}]})
        ),
        "items:\n  - name: web\n  - id: 2\n    name: db\n"
    );
    assert_eq!(
        edit(
            old,
            json!({"items": [{"new": true, "id": 1, "name": "web"}, {"name": "db", "id": 2}]})
        ),
        "items:\n  - new: true\n    id: 1   # first\n    name: web\n  - name: db\n    id: 2\n"
    );
}

#[test]
fn the_entry_that_moves_to_the_dash_keeps_its_comments() {
    // Found by `random_edits_keep_every_other_line`: the first two keys go, and the comment
    // above the third was dropped as the third moved onto the `- ` line.
    let old = "gamma:\n- alpha: web\n  gamma: \"web\"\n  # note 875\n  # and more\n  beta: \"web\"  # trailing\nend: 1\n";
    assert_eq!(
        edit(old, json!({"gamma": [{"beta": "web"}], "end": 1})),
        "gamma:\n- # note 875\n  # and more\n  beta: \"web\"  # trailing\nend: 1\n"
    );
}

#[test]
fn changed_scalars_are_quoted_when_the_round_trip_needs_it() {
    let old = "a: plain\nb: 'single'\nc: \"double\"\n";
    assert_eq!(
        edit(old, json!({"a": "yes", "b": "0x1F", "c": "~"})),
        "a: \"yes\"\nb: '0x1F'\nc: \"~\"\n"
    );
    assert_eq!(
        edit(old, json!({"a": 12, "b": null, "c": "line\nbreak"})),
        "a: 12\nb: null\nc: \"line\\nbreak\"\n"
    );
}

#[test]
fn type_changes_and_block_scalars_emit_the_entry() {
    let old = "a: 1  # one\nb: |  # block\n  text\n# after b\nc: [1]\nd:  # dee\n  x: 1\n";
    let text = edit(
        old,
        json!({"a": {"x": [1, 2]}, "b": "other", "c": [1], "d": {}}),
    );
    assert_eq!(
        text,
        "a:  # one\n  x:\n    - 1\n    - 2\nb: other\n# after b\nc: [1]\nd: {}  # dee\n"
    );
}

#[test]
fn unchanged_content_keeps_the_text_and_other_files_are_emitted() {
    let old = "# c\nz: 1\na: [x]\n";
    assert_eq!(
        rewrite(old, &map(json!({"z": 1, "a": ["x"]}))),
        Rewrite::Edited(old.into())
    );
    // Key order is part of the content.
    assert_eq!(
        edit(old, json!({"a": ["x"], "z": 1})),
        "a: [x]\n# c\nz: 1\n"
    );
    for stored in ["{}\n", "", "- a\n", "a: [", "{a: 1}\n"] {
        assert_eq!(
            rewrite(stored, &map(json!({"b": 2}))),
            Rewrite::Fresh,
            "{stored:?}"
        );
    }
}

#[test]
fn an_edit_that_does_not_read_back_falls_back() {
    // An ambiguous plain scalar kept from the stored text would read differently elsewhere.
    let old = "legacy: on\nx: 1\n";
    assert_eq!(
        rewrite(old, &map(json!({"legacy": "on", "x": 2}))),
        Rewrite::Fallback
    );
}

#[test]
fn an_edit_from_known_content_is_the_edit_from_the_parsed_text() {
    let old = "# accounts\naws:\n  - account_id: \"1\"  # one\n    regions: [us-east-1]\nx: 1\n";
    let new = map(json!({"aws": [{"account_id": "1", "regions": ["eu-west-1"]}], "x": 2}));
    let known = super::parse_mapping(old).unwrap();
    let from_known = super::rewrite_known(old, Some(&known), &new);
    assert_eq!(from_known, rewrite(old, &new));
    assert!(matches!(&from_known, Rewrite::Edited(t) if t.contains("# one")));
}

/// An edit made with the spans the previous edit's check produced gives exactly the text an
/// edit that parses the stored text again gives, edit after edit.
#[test]
fn the_spans_of_an_edit_serve_the_next_edit() {
    let mut text = ACME.to_owned();
    let mut content = Value::Object(parse_mapping(ACME).unwrap());
    let mut spans: Option<Spans> = None;
    for n in 0..4 {
        content["drata"]["workspace"] = json!(format!("acme-{n}"));
        content["aws"][n % 2]["regions"]
            .as_array_mut()
            .unwrap()
            .push(json!(format!("ap-south-{n}")));
        let new = map(content.clone());
        let known = parse_mapping(&text).unwrap();
        let fresh = rewrite_known(&text, Some(&known), &new);
        let (made, next) = rewrite_spanned(&text, Some(&known), spans.as_ref(), &new);
        assert_eq!(made, fresh, "edit {n}");
        let Rewrite::Edited(edited) = made else {
            panic!("edit {n}: {made:?}")
        };
        assert!(
            next.is_some(),
            "edit {n}: the check gave the edited text's spans"
        );
        text = edited;
        spans = next;
    }
    assert!(
        text.contains("workspace: acme-3") && text.contains("ap-south-3"),
        "{text}"
    );
}
