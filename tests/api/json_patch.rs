//! The diff's JSON Patch, applied by an independent RFC 6902 implementation (the `json-patch` crate), turns `from` into `to` (proptest).
use planfiles::domain::json_patch::diff;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(|n| json!(n)),
        "[a-c/~]{0,3}".prop_map(Value::String),
    ]
}

/// Objects keyed by `account_id` or `path`, drawn from a small pool so that both sides share,
/// add, drop and reorder elements.
fn keyed(key: &'static str) -> impl Strategy<Value = Value> {
    let ids: Vec<&str> = vec!["1", "2", "3", "4", "5", "a/b", "~"];
    (
        Just(ids).prop_shuffle(),
        0usize..6,
        prop::collection::vec(scalar(), 6),
    )
        .prop_map(move |(ids, n, extras)| {
            Value::Array(
                ids.into_iter()
                    .take(n)
                    .zip(extras)
                    .map(|(id, extra)| json!({key: id, "x": extra}))
                    .collect(),
            )
        })
}

fn doc() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![scalar(), keyed("account_id"), keyed("path")];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-d/~]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    });
    prop::collection::btree_map("[a-d]{1,2}", value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn applying_the_patch_to_from_gives_to(from in doc(), to in doc()) {
        let ops = serde_json::to_value(diff(&from, &to)).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(ops.clone()).unwrap();
        let mut doc = from.clone();
        json_patch::patch(&mut doc, &patch).map_err(|e| TestCaseError::fail(format!("{e}: {ops}")))?;
        prop_assert_eq!(&doc, &to, "patch {}", ops);
        if from == to {
            prop_assert_eq!(ops, json!([]));
        }
    }
}

#[test]
fn keyed_arrays_change_by_element_not_by_rewrite() {
    let from = json!({"gcp": [{"account_id": "a"}, {"account_id": "b"}, {"account_id": "c"}]});
    let to = json!({"gcp": [{"account_id": "c"}, {"account_id": "a", "n": 1}]});
    let ops = serde_json::to_value(diff(&from, &to)).unwrap();
    assert_eq!(
        ops,
        json!([
            {"op": "remove", "path": "/gcp/1"},
            {"op": "move", "from": "/gcp/1", "path": "/gcp/0"},
            {"op": "add", "path": "/gcp/1/n", "value": 1},
        ])
    );
}
