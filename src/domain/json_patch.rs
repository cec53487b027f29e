//! RFC 6902 JSON Patch between two documents; arrays of objects with a natural key (`account_id`, `path`) are diffed by that key.
use serde::Serialize;
use serde_json::{Map, Value};

/// The fields that name an element of an array of objects, tried in order.
pub const NATURAL_KEYS: [&str; 2] = ["account_id", "path"];

/// One operation of a patch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    Add { path: String, value: Value },
    Remove { path: String },
    Replace { path: String, value: Value },
    Move { from: String, path: String },
}

/// The operations that turn `from` into `to`, applied in order.
pub fn diff(from: &Value, to: &Value) -> Vec<Op> {
    let mut ops = Vec::new();
    diff_at(from, to, &mut String::new(), &mut ops);
    ops
}

fn diff_at(from: &Value, to: &Value, at: &mut String, ops: &mut Vec<Op>) {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => diff_objects(a, b, at, ops),
        (Value::Array(a), Value::Array(b)) => match natural_key(a, b) {
            Some(key) => diff_keyed(a, b, key, at, ops),
            None => diff_arrays(a, b, at, ops),
        },
        (a, b) if a == b => {}
        (_, b) => ops.push(Op::Replace {
            path: at.clone(),
            value: b.clone(),
        }),
    }
}

/// Appends `/<token>` (escaped) to `at`, runs `f`, and takes it off again.
fn within(at: &mut String, token: &str, f: impl FnOnce(&mut String)) {
    let len = at.len();
    at.push('/');
    at.push_str(&token.replace('~', "~0").replace('/', "~1"));
    f(at);
    at.truncate(len);
}

fn child(at: &str, token: &str) -> String {
    let mut out = at.to_owned();
    out.push('/');
    out.push_str(&token.replace('~', "~0").replace('/', "~1"));
    out
}

fn diff_objects(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    at: &mut String,
    ops: &mut Vec<Op>,
) {
    for key in a.keys().filter(|k| !b.contains_key(*k)) {
        ops.push(Op::Remove {
            path: child(at, key),
        });
    }
    for (key, value) in b {
        match a.get(key) {
            Some(old) => within(at, key, |at| diff_at(old, value, at, ops)),
            None => ops.push(Op::Add {
                path: child(at, key),
                value: value.clone(),
            }),
        }
    }
}

/// By position: the common length element by element, then removals from the end or
/// additions at the end.
fn diff_arrays(a: &[Value], b: &[Value], at: &mut String, ops: &mut Vec<Op>) {
    let common = a.len().min(b.len());
    for i in 0..common {
        within(at, &i.to_string(), |at| diff_at(&a[i], &b[i], at, ops));
    }
    for i in (common..a.len()).rev() {
        ops.push(Op::Remove {
            path: child(at, &i.to_string()),
        });
    }
    for (i, value) in b.iter().enumerate().skip(common) {
        ops.push(Op::Add {
            path: child(at, &i.to_string()),
            value: value.clone(),
        });
    }
}

/// The natural key both arrays are keyed by: every element an object holding that field as
/// a string or number, unique within each array.
fn natural_key(a: &[Value], b: &[Value]) -> Option<&'static str> {
    if a.is_empty() && b.is_empty() {
        return None;
    }
    NATURAL_KEYS.into_iter().find(|key| {
        [a, b].iter().all(|items| {
            let ids: Option<Vec<String>> = items.iter().map(|v| key_of(v, key)).collect();
            ids.is_some_and(|mut ids| {
                let n = ids.len();
                ids.sort();
                ids.dedup();
                ids.len() == n
            })
        })
    })
}

fn key_of(value: &Value, key: &str) -> Option<String> {
    match value.as_object()?.get(key)? {
        Value::String(s) => Some(format!("s{s}")),
        Value::Number(n) => Some(format!("n{n}")),
        _ => None,
    }
}

/// By key: removed elements go (from the end), then each position of `b` in turn is taken by
/// a move of its element (when it sits elsewhere) or an add, and kept elements are diffed.
fn diff_keyed(a: &[Value], b: &[Value], key: &str, at: &mut String, ops: &mut Vec<Op>) {
    let wanted: Vec<String> = b.iter().filter_map(|v| key_of(v, key)).collect();
    let mut current: Vec<(String, &Value)> = Vec::new();
    let mut removals = Vec::new();
    for (i, v) in a.iter().enumerate() {
        let k = key_of(v, key).expect("checked by natural_key");
        if wanted.contains(&k) {
            current.push((k, v));
        } else {
            removals.push(i);
        }
    }
    for i in removals.into_iter().rev() {
        ops.push(Op::Remove {
            path: child(at, &i.to_string()),
        });
    }
    for (i, (k, target)) in wanted.iter().zip(b).enumerate() {
        match current.iter().position(|(c, _)| c == k) {
            Some(j) => {
                if j != i {
                    let item = current.remove(j);
                    current.insert(i, item);
                    ops.push(Op::Move {
                        from: child(at, &j.to_string()),
                        path: child(at, &i.to_string()),
                    });
                }
                let old = current[i].1;
                within(at, &i.to_string(), |at| diff_at(old, target, at, ops));
            }
            None => {
                current.insert(i, (k.clone(), target));
                ops.push(Op::Add {
                    path: child(at, &i.to_string()),
                    value: target.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_added_account_is_one_add() {
        let from = json!({"aws": [{"account_id": "1", "name": "a"}, {"account_id": "2"}]});
        let to = json!({"aws": [{"account_id": "1", "name": "a"}, {"account_id": "3"}, {"account_id": "2"}]});
        assert_eq!(
            diff(&from, &to),
            vec![Op::Add {
                path: "/aws/1".into(),
                value: json!({"account_id": "3"})
            }]
        );
    }

    #[test]
    fn keys_are_escaped_and_folders_keyed_by_path() {
        let from = json!({"a/b~": 1, "folders": [{"path": "x", "exclude": []}, {"path": "y"}]});
        let to = json!({"a/b~": 2, "folders": [{"path": "y"}, {"path": "x", "exclude": ["z"]}]});
        assert_eq!(
            diff(&from, &to),
            vec![
                Op::Replace {
                    path: "/a~1b~0".into(),
                    value: json!(2)
                },
                Op::Move {
                    from: "/folders/1".into(),
                    path: "/folders/0".into()
                },
                Op::Add {
                    path: "/folders/1/exclude/0".into(),
                    value: json!("z")
                },
            ]
        );
    }
}
