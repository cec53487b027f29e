use super::*;
use crate::validation::UnknownIntegrations;

/// The schemas the repository ships (aws accounts of 12 digits, known regions).
fn shipped() -> SchemaSet {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    SchemaSet::load(Some(&dir), UnknownIntegrations::Allow).expect("the shipped schemas load")
}

const GOOD: &str =
    "aws:\n  - account_id: \"123456789012\"\n    regions: [us-east-1]\n    type: aws\n";
/// Breaks the schema on line 3 (`account_id` is not 12 digits).
const BREAKS: &str =
    "# accounts\naws:\n  - account_id: \"1234\"\n    regions: [us-east-1]\n    type: aws\n";

#[test]
fn a_text_is_valid_unreadable_or_breaks_with_its_line() {
    let set = shipped();
    let doc = text(PlanFile::Integration, GOOD, &set).expect("valid");
    assert_eq!(doc.file(), PlanFile::Integration);
    assert_eq!(doc.raw(), GOOD);
    match text(PlanFile::Integration, BREAKS, &set) {
        Err(Refusal::Breaks(found)) => {
            let v = &found.list[0];
            assert_eq!(v.pointer, "/aws/0/account_id", "relative to the file");
            assert_eq!((v.line, v.column), (Some(3), Some(17)));
        }
        other => panic!("{other:?}"),
    }
    for (bad, pointer) in [
        ("- a list\n", "/:"),
        ("aws: [\n", "/:"),
        ("a: 1\na: 2\n", "/"),
    ] {
        match text(PlanFile::Integration, bad, &set) {
            Err(Refusal::Unreadable(why)) => assert!(why.starts_with(pointer), "{bad:?}: {why}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // An integration file is not a configuration file (the shipped schema requires folders).
    assert!(matches!(
        text(PlanFile::Configuration, GOOD, &set),
        Err(Refusal::Breaks(_))
    ));
}

#[test]
fn a_request_points_under_its_field_and_gives_lines_only_for_text() {
    let set = shipped();
    let as_json = serde_json::json!({"aws": [{"account_id": "1234", "regions": ["us-east-1"], "type": "aws"}]});
    match requested(PlanFile::Integration, as_json, &set) {
        Err(PlanError::SchemaViolation { files, violations }) => {
            assert_eq!(files, vec![PlanFile::Integration]);
            assert_eq!(violations.list[0].pointer, "/content/aws/0/account_id");
            assert_eq!(
                violations.list[0].line, None,
                "JSON has no lines the client sees"
            );
        }
        other => panic!("{other:?}"),
    }
    match requested(PlanFile::Integration, Value::String(BREAKS.into()), &set) {
        Err(PlanError::SchemaViolation { violations, .. }) => {
            assert_eq!(violations.list[0].pointer, "/content/aws/0/account_id");
            assert_eq!(violations.list[0].line, Some(3));
        }
        other => panic!("{other:?}"),
    }
    let (_, json) = requested(PlanFile::Integration, Value::String(GOOD.into()), &set).unwrap();
    assert!(!json, "text is stored byte for byte");
    assert!(matches!(
        requested(PlanFile::Configuration, serde_json::json!(3), &set),
        Err(PlanError::InvalidContent(e)) if e.pointer.starts_with("/payload")
    ));
}

#[test]
fn stored_bytes_are_judged_as_a_read_shows_them_and_a_restore_takes_them() {
    let set = shipped();
    assert!(stored(PlanFile::Integration, GOOD.as_bytes(), &set).passes());
    assert!(passes(PlanFile::Integration, GOOD.as_bytes(), &set));
    match stored(PlanFile::Integration, BREAKS.as_bytes(), &set) {
        Verdict::Breaks(doc, found) => {
            assert_eq!(doc.raw(), BREAKS);
            assert_eq!(found.list[0].line, Some(3));
        }
        other => panic!("{other:?}"),
    }
    assert!(!passes(PlanFile::Integration, BREAKS.as_bytes(), &set));
    match stored(PlanFile::Integration, b"- a list\n", &set) {
        Verdict::Unreadable { content, errors } => {
            assert!(content.is_empty());
            assert!(!errors.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(!passes(PlanFile::Integration, b"- a list\n", &set));
    assert!(restorable(PlanFile::Integration, GOOD.as_bytes(), &set).is_ok());
    assert!(matches!(
        restorable(PlanFile::Integration, b"- a list\n", &set),
        Err(PlanError::InvalidContent(e)) if e.pointer == "/commit"
    ));
    match restorable(PlanFile::Integration, BREAKS.as_bytes(), &set) {
        Err(PlanError::SchemaViolation { violations, .. }) => {
            assert_eq!(violations.list[0].pointer, "/aws/0/account_id");
            assert_eq!(violations.list[0].line, Some(3));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stored_content(PlanFile::Integration, BREAKS.as_bytes())["aws"][0]["type"],
        "aws"
    );
}
