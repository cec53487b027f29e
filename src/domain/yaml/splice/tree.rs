//! The node tree of a stored document with each node's byte range, built from granit-parser's
//! spanned events, and the line arithmetic the splice cuts text with.
use granit_parser::{Event, Parser, ScalarStyle, Span, StructureStyle};

/// A node of the document and where its content is in the text.
#[derive(Debug)]
pub struct Node {
    /// First byte of the content: the scalar, the bracket, the first key or the first `-`.
    pub start: usize,
    /// One past the last byte of the content (trailing white space left out).
    pub end: usize,
    /// An anchor or a tag is written before the content.
    pub props: bool,
    pub kind: Kind,
}

#[derive(Debug)]
pub enum Kind {
    Scalar(ScalarStyle),
    Alias,
    Map {
        flow: bool,
        /// Keys and values, in document order.
        entries: Vec<(Node, Node)>,
        /// The line start after the token before the mapping: an own-line comment above the
        /// first key belongs to it from there on.
        bound: usize,
    },
    Seq {
        flow: bool,
        items: Vec<Node>,
        bound: usize,
    },
}

/// A collection being built.
struct Open {
    node: Node,
    /// A key read whose value has not come yet.
    key: Option<Node>,
}

/// The root node of `text` (a single document), or `None` when the parser refuses it.
pub fn build(text: &str) -> Option<Node> {
    let mut builder = Builder::new(text);
    for event in Parser::new_from_str(text) {
        let (event, span) = event.ok()?;
        builder.event(&event, &span);
    }
    builder.finish()
}

/// The tree of a text, built from its parser events as they come: from [`build`]'s own
/// parse, or from the parse that checks an edited text (so that the next edit of that text
/// needs none).
pub struct Builder<'t> {
    text: &'t str,
    stack: Vec<Open>,
    /// The end of the last token, and where an own-line comment above a collection's first
    /// entry may start (the document's start, for the top).
    last_end: usize,
    bound_at_start: Option<usize>,
    root: Option<Node>,
    refused: bool,
}

impl<'t> Builder<'t> {
    pub fn new(text: &'t str) -> Self {
        Self {
            text,
            stack: Vec::new(),
            last_end: 0,
            bound_at_start: Some(0),
            root: None,
            refused: false,
        }
    }

    /// Takes the next event of the text's parse.
    pub fn event(&mut self, event: &Event<'_>, span: &Span) {
        if !self.refused && self.step(event, span).is_none() {
            self.refused = true;
        }
    }

    /// The root, once every event was taken and none was refused.
    pub fn finish(self) -> Option<Node> {
        if self.refused || !self.stack.is_empty() {
            return None;
        }
        self.root
    }

    fn step(&mut self, event: &Event<'_>, span: &Span) -> Option<()> {
        let text = self.text;
        let (s, e) = (span.start.byte_offset()?, span.end.byte_offset()?);
        let done = match event {
            Event::DocumentStart(explicit, _) => {
                if *explicit {
                    self.last_end = e;
                    self.bound_at_start = None;
                }
                None
            }
            Event::Scalar(_, style, anchor, tag) => {
                let end = s + text.get(s..e.max(s))?.trim_end().len();
                Some(Node {
                    start: s,
                    end,
                    props: *anchor != 0 || tag.is_some(),
                    kind: Kind::Scalar(*style),
                })
            }
            Event::Alias(_) => Some(Node {
                start: s,
                end: e,
                props: false,
                kind: Kind::Alias,
            }),
            Event::MappingStart(style, anchor, tag) | Event::SequenceStart(style, anchor, tag) => {
                let flow = *style == StructureStyle::Flow;
                let bound = self
                    .bound_at_start
                    .take()
                    .unwrap_or_else(|| line_end(text, self.last_end));
                let kind = if matches!(event, Event::MappingStart(..)) {
                    Kind::Map {
                        flow,
                        entries: Vec::new(),
                        bound,
                    }
                } else {
                    Kind::Seq {
                        flow,
                        items: Vec::new(),
                        bound,
                    }
                };
                self.stack.push(Open {
                    node: Node {
                        start: s,
                        end: e,
                        props: *anchor != 0 || tag.is_some(),
                        kind,
                    },
                    key: None,
                });
                None
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let Open { mut node, .. } = self.stack.pop()?;
                let flow = matches!(
                    node.kind,
                    Kind::Map { flow: true, .. } | Kind::Seq { flow: true, .. }
                );
                node.end = if flow {
                    e
                } else {
                    self.last_end.max(node.start)
                };
                // A block sequence's event may start at its first item's content (a sequence
                // at its key's column): it starts at that item's `-`.
                if let Kind::Seq {
                    flow: false, items, ..
                } = &node.kind
                {
                    let first = items.first().map_or(node.start, |n| n.start);
                    let before = text.get(..first)?.trim_end_matches(' ');
                    if before.ends_with('-') {
                        node.start = node.start.min(before.len() - 1);
                    }
                }
                Some(node)
            }
            _ => None,
        };
        let Some(node) = done else { return Some(()) };
        self.last_end = node.end;
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(open) => match &mut open.node.kind {
                Kind::Map { entries, .. } => match open.key.take() {
                    None => open.key = Some(node),
                    Some(key) => entries.push((key, node)),
                },
                Kind::Seq { items, .. } => items.push(node),
                _ => return None,
            },
        }
        Some(())
    }
}

/// The start of the line that holds `p`.
pub fn line_start(text: &str, p: usize) -> usize {
    text[..p].rfind('\n').map_or(0, |i| i + 1)
}

/// The start of the line after the one that holds `p` (or the end of the text).
pub fn line_end(text: &str, p: usize) -> usize {
    text[p..].find('\n').map_or(text.len(), |i| p + i + 1)
}

/// Whether only spaces come before `p` on its line.
pub fn line_aligned(text: &str, p: usize) -> bool {
    text[line_start(text, p)..p].bytes().all(|b| b == b' ')
}

/// Where the lines of the node starting at `p` start: its line, or the own-line comments
/// directly above it (no blank line between), never before `bound`.
pub fn with_comments_above(text: &str, p: usize, bound: usize) -> usize {
    let mut at = line_start(text, p);
    while at > bound {
        let above = line_start(text, at - 1);
        if above < bound || !text[above..at].trim_start().starts_with('#') {
            break;
        }
        at = above;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_keys_values_and_collections() {
        let text = "# head\naws:\n  - id: \"1\"  # c\n    r: [a, b]\n  - x\nd: |\n  lit\n";
        let root = build(text).unwrap();
        let Kind::Map { entries, .. } = &root.kind else {
            panic!("{root:?}")
        };
        let part = |n: &Node| &text[n.start..n.end];
        assert_eq!(part(&entries[0].0), "aws");
        let Kind::Seq { items, .. } = &entries[0].1.kind else {
            panic!()
        };
        assert_eq!(
            part(&entries[0].1),
            "- id: \"1\"  # c\n    r: [a, b]\n  - x"
        );
        assert_eq!(part(&items[0]), "id: \"1\"  # c\n    r: [a, b]");
        assert_eq!(part(&items[1]), "x");
        assert_eq!(part(&entries[1].1), "lit");
        assert_eq!(with_comments_above(text, entries[0].0.start, 0), 0);
    }
}
