use super::folder::Files;
use super::*;
use serde_json::json;

fn set(files: &[(&str, Value)], unknown: UnknownIntegrations) -> Result<SchemaSet, SchemaError> {
    SchemaSet::compile(&Files::from_values(files), unknown)
}

fn aws() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["account_id", "regions", "type"],
            "properties": {
                "account_id": {"type": "string", "pattern": "^[0-9]{12}$"},
                "regions": {"type": "array", "items": {"$ref": "../common/regions.json"}},
                "type": {"const": "aws"}
            }
        }
    })
}

fn regions() -> Value {
    json!({"enum": ["us-east-1", "eu-west-1"]})
}

fn map(v: Value) -> Mapping {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[test]
fn violations_name_the_pointer_keyword_and_schema_file() {
    let s = set(
        &[
            ("integrations/aws.json", aws()),
            ("common/regions.json", regions()),
        ],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let doc = map(json!({"aws": [
        {"account_id": "123456789012", "regions": ["us-east-1"], "type": "aws"},
        {"account_id": "12345", "regions": ["mars-1"], "type": "aws"}
    ], "other": 1}));
    let found = s.check_integration(&doc);
    let mut got: Vec<(String, String, String)> = found
        .list
        .iter()
        .map(|v| (v.pointer.clone(), v.keyword.clone(), v.schema.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "/aws/1/account_id".into(),
                "pattern".into(),
                "integrations/aws.json#/items/properties/account_id/pattern".into()
            ),
            (
                "/aws/1/regions/0".into(),
                "enum".into(),
                "common/regions.json#/enum".into()
            ),
        ]
    );
    assert!(s
        .check_integration(&map(
            json!({"aws": [{"account_id": "123456789012", "regions": [], "type": "aws"}]})
        ))
        .is_empty());
}

#[test]
fn unknown_integrations_are_refused_only_when_configured() {
    let files = [
        ("integrations/aws.json", aws()),
        ("common/regions.json", regions()),
    ];
    let doc = map(json!({"gcp/x": {}}));
    assert!(set(&files, UnknownIntegrations::Allow)
        .unwrap()
        .check_integration(&doc)
        .is_empty());
    let found = set(&files, UnknownIntegrations::Refuse)
        .unwrap()
        .check_integration(&doc);
    assert_eq!(found.list.len(), 1);
    assert_eq!(found.list[0].pointer, "/gcp~1x");
    assert_eq!(found.list[0].keyword, "unknown_integration");
}

#[test]
fn a_ref_outside_the_folder_or_to_a_url_does_not_compile() {
    for target in [
        "https://example.com/schema.json",
        "file:///etc/passwd",
        "../../outside.json",
        "missing.json",
    ] {
        let e = set(
            &[("integrations/x.json", json!({"$ref": target}))],
            UnknownIntegrations::Allow,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("integrations/x.json#"), "{target}: {e}");
    }
}

#[test]
fn a_broken_schema_is_named_with_its_file_and_pointer() {
    let e = set(
        &[(
            "configuration.json",
            json!({"properties": {"folders": {"type": "lists"}}}),
        )],
        UnknownIntegrations::Allow,
    )
    .unwrap_err();
    match e {
        SchemaError::Invalid { file, pointer, .. } => {
            assert_eq!(file, "configuration.json");
            assert_eq!(pointer, "/properties/folders/type");
        }
        other => panic!("{other}"),
    }
    // Shared definitions are compiled too, though nothing refers to them.
    assert!(set(
        &[("common/x.json", json!({"minLength": -1}))],
        UnknownIntegrations::Allow
    )
    .is_err());
}

#[test]
fn patterns_run_in_linear_time() {
    let s = set(
        &[(
            "configuration.json",
            json!({"properties": {"name": {"pattern": "^(a+)+$"}}}),
        )],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let evil = format!("{}!", "a".repeat(30));
    let started = std::time::Instant::now();
    let found = s.check_configuration(&map(json!({"name": evil})));
    assert_eq!(found.list.len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_millis(100));
}

#[test]
fn at_most_a_hundred_violations_are_listed_and_the_rest_counted() {
    let s = set(
        &[(
            "configuration.json",
            json!({"properties": {"xs": {"items": {"type": "string"}}}}),
        )],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let xs: Vec<Value> = (0..250).map(|i| json!(i)).collect();
    let found = s.check_configuration(&map(json!({"xs": xs})));
    assert_eq!((found.list.len(), found.omitted), (100, 150));
}

#[test]
fn the_set_id_follows_the_files_and_the_setting() {
    let a = set(
        &[("integrations/aws.json", json!({}))],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let b = set(
        &[("integrations/aws.json", json!({"type": "array"}))],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let c = set(
        &[("integrations/aws.json", json!({}))],
        UnknownIntegrations::Refuse,
    )
    .unwrap();
    let again = set(
        &[("integrations/aws.json", json!({}))],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    assert_ne!(a.id(), b.id());
    assert_ne!(a.id(), c.id());
    assert_eq!(a.id(), again.id());
    assert!(SchemaSet::empty().is_empty() && !a.is_empty());
}

#[test]
fn the_combined_schema_validates_as_the_set_does() {
    let s = set(
        &[
            ("integrations/aws.json", aws()),
            ("common/regions.json", regions()),
        ],
        UnknownIntegrations::Refuse,
    )
    .unwrap();
    let combined: Value = serde_json::from_slice(s.integration_schema()).unwrap();
    let whole = jsonschema::options()
        .with_retriever(Files::default().retriever())
        .build(&combined)
        .unwrap();
    for doc in [
        json!({"aws": [{"account_id": "123456789012", "regions": ["eu-west-1"], "type": "aws"}]}),
        json!({"aws": [{"account_id": "1", "regions": ["eu-west-1"], "type": "aws"}]}),
        json!({"aws": [{"account_id": "123456789012", "regions": ["mars"], "type": "aws"}]}),
        json!({"gcp": {}}),
    ] {
        assert_eq!(
            whole.is_valid(&doc),
            s.check_integration(&map(doc.clone())).is_empty(),
            "{doc}"
        );
    }
}

#[test]
fn patterns_the_linear_engine_cannot_run_are_refused_when_compiled() {
    for pattern in ["^(?=a)", "(a)\\1"] {
        let e = set(
            &[(
                "configuration.json",
                json!({"properties": {"x": {"pattern": pattern}}}),
            )],
            UnknownIntegrations::Allow,
        );
        assert!(e.is_err(), "{pattern}");
    }
}

#[test]
fn formats_are_asserted() {
    let s = set(
        &[(
            "configuration.json",
            json!({"properties": {"who": {"format": "email"}}}),
        )],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    assert_eq!(
        s.check_configuration(&map(json!({"who": "nobody"})))
            .list
            .len(),
        1
    );
    assert!(s
        .check_configuration(&map(json!({"who": "a@b.example"})))
        .is_empty());
}

#[test]
fn a_schema_of_another_draft_is_refused() {
    let e = set(
        &[(
            "integrations/x.json",
            json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
        )],
        UnknownIntegrations::Allow,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("integrations/x.json#/$schema") && e.contains("2020-12"),
        "{e}"
    );
    assert!(set(
        &[(
            "integrations/x.json",
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema"})
        )],
        UnknownIntegrations::Allow,
    )
    .is_ok());
}

#[test]
fn a_not_rule_is_said_in_its_schemas_words_not_as_json() {
    let described = json!({
        "type": "object",
        "properties": {
            "path": {
                "description": "A path inside the repository: no leading /, no .. segment.",
                "type": "string",
                "not": { "pattern": "^/|(^|/)\\.\\.(/|$)" }
            },
            "name": { "type": "string", "not": { "const": "root" } }
        }
    });
    let set = set(
        &[("configuration.json", described)],
        UnknownIntegrations::Allow,
    )
    .unwrap();
    let found = set.check_configuration(&map(json!({"path": "../etc", "name": "root"})));
    let message = |pointer: &str| {
        found
            .list
            .iter()
            .find(|v| v.pointer == pointer)
            .map(|v| v.message.clone())
            .unwrap()
    };
    assert_eq!(
        message("/path"),
        "\"../etc\" is not allowed: A path inside the repository: no leading /, no .. segment."
    );
    // No words in the schema: a sentence, still not the subschema's JSON.
    assert_eq!(
        message("/name"),
        "\"root\" is not allowed: it matches what the schema forbids here"
    );
}
