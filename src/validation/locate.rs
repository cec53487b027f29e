//! Where a JSON pointer's value starts in YAML text (line and column, 1-based), found on the parser's spanned events, for violations of a document sent or stored as YAML.
use granit_parser::{Event, Parser};

enum Frame {
    /// A mapping: the key read whose value comes next, if any.
    Map(Option<String>),
    /// A sequence: the index of the next item.
    Seq(usize),
}

/// The token of a key that is not text (an alias, a collection): it matches no pointer.
const NO_NAME: &str = "\u{0}";

/// For each of `pointers`, where its value starts in `text`, if the text holds it as a node
/// of its own (a value reached through an alias has no place).
pub fn positions(text: &str, pointers: &[&str]) -> Vec<Option<(usize, usize)>> {
    let mut found = vec![None; pointers.len()];
    if pointers.is_empty() {
        return found;
    }
    let mut stack: Vec<Frame> = Vec::new();
    // The reference tokens of the node being read, escaped as in a pointer.
    let mut path: Vec<String> = Vec::new();
    let mut left = pointers.len();
    // Inside a key that is a collection (`? [a, b]`): how deep, until it ends.
    let mut complex_key = 0usize;
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { break };
        if complex_key > 0 {
            match event {
                Event::MappingStart(..) | Event::SequenceStart(..) => complex_key += 1,
                Event::MappingEnd | Event::SequenceEnd => complex_key -= 1,
                _ => {}
            }
            if complex_key == 0 {
                if let Some(Frame::Map(pending)) = stack.last_mut() {
                    *pending = Some(NO_NAME.to_owned());
                }
            }
            continue;
        }
        // An alias or a collection where a mapping waits for a key is that key: one no
        // pointer can name (JSON's keys are text).
        if let Some(Frame::Map(pending @ None)) = stack.last_mut() {
            match event {
                Event::Alias(_) => {
                    *pending = Some(NO_NAME.to_owned());
                    continue;
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    complex_key = 1;
                    continue;
                }
                _ => {}
            }
        }
        let starts_node = matches!(
            event,
            Event::Scalar(..)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Alias(_)
        );
        // A scalar where a mapping waits for a key is that key, not a node of the document.
        if let (Event::Scalar(key, ..), Some(Frame::Map(pending @ None))) =
            (&event, stack.last_mut())
        {
            *pending = Some(key.to_string());
            continue;
        }
        if starts_node {
            // The node's own token, pushed while it is looked up.
            let token = match stack.last_mut() {
                Some(Frame::Map(key)) => key.take().map(|k| super::escape(&k)),
                Some(Frame::Seq(i)) => {
                    *i += 1;
                    Some((*i - 1).to_string())
                }
                None => None,
            };
            let pushed = token.is_some();
            if let Some(t) = token {
                path.push(t);
            }
            let pointer: String = path.iter().map(|t| format!("/{t}")).collect();
            for (i, p) in pointers.iter().enumerate() {
                if found[i].is_none() && *p == pointer {
                    found[i] = Some((span.start.line(), span.start.col() + 1));
                    left -= 1;
                }
            }
            if left == 0 {
                break;
            }
            match event {
                Event::MappingStart(..) => stack.push(Frame::Map(None)),
                Event::SequenceStart(..) => stack.push(Frame::Seq(0)),
                // A scalar or alias ends here: its token is done.
                _ => {
                    if pushed {
                        path.pop();
                    }
                }
            }
            // A collection keeps its token on `path` until its end event; mark whether it has
            // one by the depth of `path` against the stack.
            continue;
        }
        if matches!(event, Event::MappingEnd | Event::SequenceEnd) {
            stack.pop();
            // The collection that ended had a token unless it was the root.
            if !stack.is_empty() {
                path.pop();
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::positions;

    #[test]
    fn finds_values_in_block_and_flow_style() {
        let text = "# accounts\naws:\n  - account_id: \"12\"\n    regions: [us-east-1, mars-1]\ndrata:\n  workspace: w\n\"a/b\": {x: 1}\n";
        let got = positions(
            text,
            &[
                "/aws/0/account_id",
                "/aws/0/regions/1",
                "/drata",
                "/a~1b/x",
                "",
                "/nope",
                "/aws",
            ],
        );
        assert_eq!(
            got,
            vec![
                Some((3, 17)),
                Some((4, 26)),
                Some((6, 3)),
                Some((7, 12)),
                Some((2, 1)),
                None,
                Some((3, 3)),
            ]
        );
    }

    #[test]
    fn keys_that_are_aliases_or_collections_keep_the_rest_in_place() {
        let text = "base: &k account_id\naws:\n  - *k : \"12\"\n    regions: [mars-1]\n? [a, b]\n: x\nnext: [1]\n";
        let got = positions(text, &["/aws/0/regions/0", "/next/0", "/base"]);
        assert_eq!(got, vec![Some((4, 15)), Some((7, 8)), Some((1, 10))]);
    }

    #[test]
    fn sequences_of_mappings_count_items() {
        let text = "folders:\n  - path: a\n  - path: b\n    exclude:\n      - x\n      - \"\"\n";
        let got = positions(
            text,
            &["/folders/1/exclude/1", "/folders/1/path", "/folders/0"],
        );
        assert_eq!(got, vec![Some((6, 9)), Some((3, 11)), Some((2, 5))]);
    }
}
