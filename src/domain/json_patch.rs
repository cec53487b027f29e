//! RFC 6902 JSON Patch between two documents; arrays of objects with a natural key (`account_id`, `path`) are diffed by that key, in O(n log n).
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

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
/// a string or number, unique within each array. O(n) per key tried (hash sets).
fn natural_key(a: &[Value], b: &[Value]) -> Option<&'static str> {
    if a.is_empty() && b.is_empty() {
        return None;
    }
    NATURAL_KEYS.into_iter().find(|key| {
        [a, b].iter().all(|items| {
            let mut seen = HashSet::with_capacity(items.len());
            items
                .iter()
                .all(|v| key_of(v, key).is_some_and(|k| seen.insert(k)))
        })
    })
}

/// An element's key, told apart by kind (`"1"` is not `1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key<'a> {
    Str(&'a str),
    Num(String),
}

fn key_of<'a>(value: &'a Value, key: &str) -> Option<Key<'a>> {
    match value.as_object()?.get(key)? {
        Value::String(s) => Some(Key::Str(s)),
        Value::Number(n) => Some(Key::Num(n.to_string())),
        _ => None,
    }
}

/// By key: removed elements go (from the end), then each position of `b` in turn is taken by
/// a move of its element (when it sits elsewhere) or an add, and kept elements are diffed.
///
/// O(n log n): the elements not placed yet keep their relative order from `a`, so the one
/// for position `i` sits at `i` plus the number of unplaced kept elements before it, which a
/// Fenwick tree over `a`'s kept elements counts.
fn diff_keyed(a: &[Value], b: &[Value], key: &str, at: &mut String, ops: &mut Vec<Op>) {
    let wanted: HashSet<Key<'_>> = b.iter().filter_map(|v| key_of(v, key)).collect();
    // The kept elements of `a`, in order, and where each key is among them.
    let mut kept: Vec<&Value> = Vec::new();
    let mut slot: HashMap<Key<'_>, usize> = HashMap::new();
    let mut removals = Vec::new();
    for (i, v) in a.iter().enumerate() {
        let k = key_of(v, key).expect("checked by natural_key");
        if wanted.contains(&k) {
            slot.insert(k, kept.len());
            kept.push(v);
        } else {
            removals.push(i);
        }
    }
    for i in removals.into_iter().rev() {
        ops.push(Op::Remove {
            path: child(at, &i.to_string()),
        });
    }
    let mut unplaced = Fenwick::full(kept.len());
    for (i, target) in b.iter().enumerate() {
        let k = key_of(target, key).expect("checked by natural_key");
        match slot.get(&k) {
            Some(&s) => {
                let j = i + unplaced.before(s);
                unplaced.remove(s);
                if j != i {
                    ops.push(Op::Move {
                        from: child(at, &j.to_string()),
                        path: child(at, &i.to_string()),
                    });
                }
                within(at, &i.to_string(), |at| diff_at(kept[s], target, at, ops));
            }
            None => ops.push(Op::Add {
                path: child(at, &i.to_string()),
                value: target.clone(),
            }),
        }
    }
}

/// Counts of 0/1 flags with O(log n) prefix sums and updates.
struct Fenwick(Vec<usize>);

impl Fenwick {
    /// `n` flags, all set.
    fn full(n: usize) -> Self {
        let mut tree = vec![0; n + 1];
        for i in 1..=n {
            tree[i] += 1;
            let parent = i + (i & i.wrapping_neg());
            if parent <= n {
                tree[parent] += tree[i];
            }
        }
        Self(tree)
    }

    /// Flags set before index `i`.
    fn before(&self, i: usize) -> usize {
        let (mut sum, mut at) = (0, i);
        while at > 0 {
            sum += self.0[at];
            at -= at & at.wrapping_neg();
        }
        sum
    }

    fn remove(&mut self, i: usize) {
        let mut at = i + 1;
        while at < self.0.len() {
            self.0[at] -= 1;
            at += at & at.wrapping_neg();
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

    /// The keyed diff, checked against the patch applied (json-patch's `patch`), on
    /// shuffles, insertions and removals; and a large reversal stays fast.
    #[test]
    fn keyed_diffs_apply_to_the_target_and_stay_fast_on_large_arrays() {
        let accounts = |ids: &[usize]| json!({"aws": ids.iter().map(|i| json!({"account_id": i.to_string(), "n": i % 7})).collect::<Vec<_>>()});
        let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![1, 2, 3, 4], vec![4, 3, 2, 1]),
            (vec![1, 2, 3, 4, 5], vec![5, 9, 1, 3]),
            (vec![], vec![1, 2]),
            (vec![1, 2], vec![]),
            (vec![3, 1, 2], vec![1, 2, 3, 4]),
        ];
        for (from, to) in cases {
            let (a, b) = (accounts(&from), accounts(&to));
            let mut doc = a.clone();
            apply(&mut doc, &diff(&a, &b));
            assert_eq!(doc, b, "{from:?} -> {to:?}");
        }
        let n = 30_000;
        let up: Vec<usize> = (0..n).collect();
        let down: Vec<usize> = (0..n).rev().collect();
        let (a, b) = (accounts(&up), accounts(&down));
        let started = std::time::Instant::now();
        let ops = diff(&a, &b);
        assert_eq!(ops.len(), n - 1, "one move per position but the last");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?} for 30,000 accounts reversed",
            started.elapsed()
        );
    }

    /// Applies a patch of this module's ops (add, remove, replace, move) to `doc`.
    fn apply(doc: &mut Value, ops: &[Op]) {
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::to_value(ops).unwrap()).unwrap();
        json_patch::patch(doc, &patch).unwrap();
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
