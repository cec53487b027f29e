//! Format-preserving writes: the stored text edited into the text of new content, so that
//! unchanged nodes keep their bytes (comments, quoting, indentation, style, order), checked by
//! parsing the result back.
//!
//! Built on granit-parser's spans (the parser under serde-saphyr, so both read the text the
//! same way). A mapping or sequence is cut into chunks of whole lines, one per entry or item,
//! each with the own-line comments directly above it; the new text is the chunks in the new
//! order, with changed values edited inside their chunk and new ones emitted in the house
//! style at their siblings' column.
use super::{parse_mapping, strict_eq, strict_eq_map as maps_eq, Mapping};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;

mod render;
mod tree;
pub use render::options as emitter_options;
use tree::{line_aligned, line_end, line_start, with_comments_above, Kind, Node};

/// How the text of a write was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// The stored text, edited (or unchanged, when it already holds the content).
    Edited(String),
    /// The stored text is not a document that can be edited (broken, empty or a flow mapping
    /// at the top), or the new content is empty: the content is emitted whole.
    Fresh,
    /// The edit did not parse back to the content: the content is emitted whole.
    Fallback,
}

/// The node tree of a text with each node's byte range: what an edit of that text needs
/// besides its content. Kept beside the content of a text storage stored, so that the text's
/// next edit does not parse it again (about 4 MB for a 1 MiB file).
#[derive(Debug)]
pub struct Spans(Node);

/// Builds a text's [`Spans`] from the parser events of a parse made for another reason.
pub(crate) struct SpansBuilder<'t>(tree::Builder<'t>);

impl<'t> SpansBuilder<'t> {
    pub(crate) fn new(text: &'t str) -> Self {
        Self(tree::Builder::new(text))
    }

    pub(crate) fn event(&mut self, event: &granit_parser::Event<'_>, span: &granit_parser::Span) {
        self.0.event(event, span);
    }

    pub(crate) fn finish(self) -> Option<Spans> {
        self.0.finish().map(Spans)
    }
}

/// How the text of a write of JSON content was made (a closed set, for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    Edited,
    Emitted,
    Fallback,
}

impl Made {
    pub const ALL: [Made; 3] = [Made::Edited, Made::Emitted, Made::Fallback];

    pub fn label(self) -> &'static str {
        match self {
            Made::Edited => "edited",
            Made::Emitted => "emitted",
            Made::Fallback => "fallback",
        }
    }
}

impl Rewrite {
    pub fn made(&self) -> Made {
        match self {
            Rewrite::Edited(_) => Made::Edited,
            Rewrite::Fresh => Made::Emitted,
            Rewrite::Fallback => Made::Fallback,
        }
    }
}

/// The text of `new` made by editing `old`, checked: it parses (as client text, so with the
/// round-trip rule) to exactly `new`, key order included.
pub fn rewrite(old: &str, new: &Mapping) -> Rewrite {
    rewrite_known(old, None, new)
}

/// [`rewrite`] with what `old` parses to, when the caller knows it already (the content
/// of the write that stored it): `old` is then parsed only for its spans.
pub fn rewrite_known(old: &str, known: Option<&Mapping>, new: &Mapping) -> Rewrite {
    rewrite_spanned(old, known, None, new).0
}

/// [`rewrite_known`] with `old`'s spans too when known (from the check of the edit that made
/// `old`): then `old` is not parsed at all. An edited text comes with its own spans, for
/// the edit after it.
pub fn rewrite_spanned(
    old: &str,
    known: Option<&Mapping>,
    spans: Option<&Spans>,
    new: &Mapping,
) -> (Rewrite, Option<Spans>) {
    let parsed;
    let old_map = match known {
        Some(map) => map,
        None => match parse_mapping(old) {
            Ok(map) => {
                parsed = map;
                &parsed
            }
            Err(_) => return (Rewrite::Fresh, None),
        },
    };
    if maps_eq(old_map, new) {
        return (Rewrite::Edited(old.to_owned()), None);
    }
    if new.is_empty() {
        // Nothing is left to edit: the text is `{}`.
        return (Rewrite::Fresh, None);
    }
    let built;
    let root = match spans {
        Some(Spans(root)) => root,
        None => {
            built = tree::build(old);
            match &built {
                Some(root) => root,
                None => return (Rewrite::Fresh, None),
            }
        }
    };
    if !matches!(root.kind, Kind::Map { flow: false, .. }) {
        return (Rewrite::Fresh, None);
    }
    let splice = Splice { text: old };
    let Some((start, end)) = splice.region(root) else {
        return (Rewrite::Fallback, None);
    };
    let Some(body) = splice.block_map(root, old_map, new) else {
        return (Rewrite::Fallback, None);
    };
    let (Some(head), Some(tail)) = (old.get(..start), old.get(end..)) else {
        return (Rewrite::Fallback, None);
    };
    let text = [head, &body, tail].concat();
    match super::parse_client_text_spanned(&text) {
        Ok((back, spans)) if maps_eq(&back, new) => (Rewrite::Edited(text), spans),
        _ => (Rewrite::Fallback, None),
    }
}

struct Splice<'t> {
    text: &'t str,
}

/// A chunk of a block collection: its text range and whether it shares its first line with
/// what is before the collection (the first entry of `- key: value`).
struct Chunk {
    start: usize,
    end: usize,
}

impl<'t> Splice<'t> {
    /// The text range a node's new text replaces: for a block collection, its whole lines
    /// with the comments above its first entry (from the first entry itself when that shares
    /// a line with a `- `); for others, the content.
    fn region(&self, node: &Node) -> Option<(usize, usize)> {
        match &node.kind {
            Kind::Map {
                flow: false, bound, ..
            }
            | Kind::Seq {
                flow: false, bound, ..
            } => {
                let start = if line_aligned(self.text, node.start) {
                    with_comments_above(self.text, node.start, *bound)
                } else {
                    node.start
                };
                Some((start, line_end(self.text, node.end)))
            }
            _ => Some((node.start, node.end)),
        }
    }

    /// The new text of a changed node's region, or `None` when only a new entry or item
    /// around it can express the change.
    fn value(&self, node: &Node, old: &Value, new: &Value) -> Option<String> {
        if node.props {
            return None;
        }
        match (&node.kind, old, new) {
            (Kind::Alias, ..) => None,
            (Kind::Map { flow: true, .. } | Kind::Seq { flow: true, .. }, ..) => render::flow(new),
            (Kind::Scalar(style), _, _) if node.end > node.start => render::scalar(*style, new),
            (Kind::Map { .. }, Value::Object(o), Value::Object(n)) if !n.is_empty() => {
                self.block_map(node, o, n)
            }
            (Kind::Seq { .. }, Value::Array(o), Value::Array(n)) if !n.is_empty() => {
                self.block_seq(node, o, n)
            }
            _ => None,
        }
    }

    /// The chunks of a block collection's entries (`starts` are the entries' first bytes,
    /// `ends` their contents' ends), and its column; `None` when the entries are not each on
    /// their own lines at one column.
    fn chunks(&self, node: &Node, starts: &[usize], ends: &[usize]) -> Option<(Vec<Chunk>, usize)> {
        let text = self.text;
        let first = *starts.first()?;
        let col = first - line_start(text, first);
        if !line_aligned(text, first) {
            // Only `- ` may come before a compact first entry.
            let before = text.get(line_start(text, first)..first)?;
            if !before.bytes().all(|b| b == b' ' || b == b'-') {
                return None;
            }
        }
        let (region_start, region_end) = self.region(node)?;
        let mut chunks: Vec<Chunk> = Vec::with_capacity(starts.len());
        for (i, &s) in starts.iter().enumerate() {
            let start = if i == 0 {
                region_start
            } else {
                if !line_aligned(text, s) || s - line_start(text, s) != col {
                    return None;
                }
                with_comments_above(text, s, line_end(text, ends[i - 1]))
            };
            if let Some(prev) = chunks.last_mut() {
                prev.end = start;
            }
            chunks.push(Chunk {
                start,
                end: region_end,
            });
        }
        Some((chunks, col))
    }

    /// A block mapping's new region text.
    fn block_map(&self, node: &Node, old: &Mapping, new: &Mapping) -> Option<String> {
        let Kind::Map { entries, .. } = &node.kind else {
            return None;
        };
        if entries.len() != old.len() {
            return None;
        }
        let starts: Vec<usize> = entries.iter().map(|(k, _)| k.start).collect();
        let ends: Vec<usize> = entries.iter().map(|(_, v)| v.end).collect();
        let (chunks, col) = self.chunks(node, &starts, &ends)?;
        let compact = !line_aligned(self.text, starts[0]);
        let olds: Vec<(&String, &Value)> = old.iter().collect();
        let index: HashMap<&str, usize> = olds
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.as_str(), i))
            .collect();
        let mut pieces: Vec<(Cow<'_, str>, bool)> = Vec::with_capacity(new.len());
        for (key, value) in new {
            let piece = match index.get(key.as_str()) {
                Some(&i) => {
                    let (k, v) = &entries[i];
                    let body = self.edited(&chunks[i], v, olds[i].1, value, k.end, || {
                        let at = if i == 0 && compact {
                            k.start
                        } else {
                            line_start(self.text, k.start)
                        };
                        render::entry(key, value, col).map(|t| (at, t, i == 0 && compact))
                    })?;
                    (body, i == 0)
                }
                None => (Cow::Owned(render::entry(key, value, col)?), false),
            };
            pieces.push(piece);
        }
        self.assemble(pieces, compact, col)
    }

    /// A block sequence's new region text.
    fn block_seq(&self, node: &Node, old: &[Value], new: &[Value]) -> Option<String> {
        let Kind::Seq { items, .. } = &node.kind else {
            return None;
        };
        if items.len() != old.len() {
            return None;
        }
        // Each item's `-`: only spaces between it and the item's content.
        let text = self.text;
        let dashes = items
            .iter()
            .map(|item| {
                let before = text.get(..item.start)?.trim_end_matches(' ');
                before.ends_with('-').then(|| before.len() - 1)
            })
            .collect::<Option<Vec<usize>>>()?;
        let ends: Vec<usize> = items.iter().map(|n| n.end).collect();
        let (chunks, col) = self.chunks(node, &dashes, &ends)?;
        let compact = !line_aligned(text, dashes[0]);
        let mut pieces: Vec<(Cow<'_, str>, bool)> = Vec::with_capacity(new.len());
        for step in align(old, new) {
            let piece = match step {
                Step::Old(i, n) => {
                    let body = self.edited(
                        &chunks[i],
                        &items[i],
                        &old[i],
                        &new[n],
                        dashes[i] + 1,
                        || {
                            let at = if i == 0 && compact {
                                dashes[i]
                            } else {
                                line_start(text, dashes[i])
                            };
                            render::item(&new[n], col).map(|t| (at, t, i == 0 && compact))
                        },
                    )?;
                    (body, i == 0)
                }
                Step::New(n) => (Cow::Owned(render::item(&new[n], col)?), false),
            };
            pieces.push(piece);
        }
        self.assemble(pieces, compact, col)
    }

    /// The text of an old entry's chunk for its new value: as it is when the value is
    /// unchanged, the value edited in place when it can be, else the entry emitted anew
    /// (`fresh`: where its lines start, its text, and whether that start is mid-line), with
    /// the comments above, the one at the end of its first line and the lines after it kept.
    /// `head_end` is where the entry's key or `-` ends.
    fn edited(
        &self,
        chunk: &Chunk,
        node: &Node,
        old: &Value,
        new: &Value,
        head_end: usize,
        fresh: impl FnOnce() -> Option<(usize, String, bool)>,
    ) -> Option<Cow<'t, str>> {
        let text = self.text;
        if strict_eq(old, new) {
            return text.get(chunk.start..chunk.end).map(Cow::Borrowed);
        }
        if let Some(t) = self.value(node, old, new) {
            let (rs, re) = self.region(node)?;
            return Some(Cow::Owned(
                [text.get(chunk.start..rs)?, &t, text.get(re..chunk.end)?].concat(),
            ));
        }
        let (at, lines, mid_line) = fresh()?;
        let mut lines = if mid_line {
            lines.trim_start_matches(' ').to_owned()
        } else {
            lines
        };
        // A comment at the end of the entry's first line stays at the end of its new first
        // line.
        if let (Some(comment), Some(nl)) = (self.line_comment(at, head_end, node), lines.find('\n'))
        {
            lines.insert_str(nl, &format!("  {comment}"));
        }
        let after = line_end(text, node.end).min(chunk.end);
        Some(Cow::Owned(
            [
                text.get(chunk.start..at)?,
                &lines,
                text.get(after..chunk.end)?,
            ]
            .concat(),
        ))
    }

    /// The comment that ends the line at `at`, after the entry's key or `-` (ending at
    /// `head_end`) and its value when that is on the line too.
    fn line_comment(&self, at: usize, head_end: usize, node: &Node) -> Option<&'t str> {
        let first_line_end = line_end(self.text, at);
        let from = if node.start < first_line_end {
            if node.end > first_line_end {
                return None;
            }
            node.end
        } else {
            head_end
        };
        let rest = self.text.get(from..first_line_end)?.trim_end();
        let rest = rest.strip_prefix(':').unwrap_or(rest).trim_start();
        rest.starts_with('#').then_some(rest)
    }

    /// Joins chunk texts in their new order. In a compact collection (the first entry on the
    /// line of a `- `), the first chunk starts mid-line and the others at a line start.
    fn assemble(
        &self,
        pieces: Vec<(Cow<'_, str>, bool)>,
        compact: bool,
        col: usize,
    ) -> Option<String> {
        let mut out = String::new();
        let last = pieces.len().saturating_sub(1);
        let pad = " ".repeat(col);
        for (pos, (piece, was_first)) in pieces.into_iter().enumerate() {
            if compact && pos == 0 && !was_first {
                // The entry moves to the line of the `- `. Its own-line comments above come
                // with it: the first goes on the `- ` line (`- # note`), the entry under it.
                let rest = piece.strip_prefix(pad.as_str())?;
                if rest.starts_with([' ', '\n']) {
                    return None;
                }
                out.push_str(rest);
            } else {
                if compact && pos > 0 && was_first {
                    out.push_str(&pad);
                }
                out.push_str(&piece);
            }
            if pos < last && !out.ends_with('\n') {
                out.push('\n');
            }
        }
        Some(out)
    }
}

/// One step of a sequence's new items: an old item (kept or edited) or a new one.
enum Step {
    Old(usize, usize),
    New(usize),
}

/// Pairs old and new items: equal items at both ends, then the longest common run of equal
/// items in the middle (when small enough to look for), and what is left between them by
/// position (edits), the rest added or removed.
fn align(old: &[Value], new: &[Value]) -> Vec<Step> {
    let head = old
        .iter()
        .zip(new)
        .take_while(|(a, b)| strict_eq(a, b))
        .count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| strict_eq(a, b))
        .count();
    let (o, n) = (&old[head..old.len() - tail], &new[head..new.len() - tail]);
    let mut steps: Vec<Step> = (0..head).map(|i| Step::Old(i, i)).collect();
    let mut anchors = common(o, n);
    anchors.push((o.len(), n.len()));
    let (mut oi, mut ni) = (0, 0);
    for (oa, na) in anchors {
        // The gap before the anchor: pair by position, then add the new rest.
        let paired = (oa - oi).min(na - ni);
        for k in 0..paired {
            steps.push(Step::Old(head + oi + k, head + ni + k));
        }
        for k in ni + paired..na {
            steps.push(Step::New(head + k));
        }
        if oa < o.len() {
            steps.push(Step::Old(head + oa, head + na));
        }
        (oi, ni) = (oa + 1, na + 1);
    }
    let (ot, nt) = (old.len() - tail, new.len() - tail);
    steps.extend((0..tail).map(|k| Step::Old(ot + k, nt + k)));
    steps
}

/// Index pairs of a longest common subsequence of equal items (none when the table would be
/// large: then everything pairs by position).
fn common(o: &[Value], n: &[Value]) -> Vec<(usize, usize)> {
    const CELLS: usize = 1 << 16;
    if o.is_empty() || n.is_empty() || (o.len() + 1) * (n.len() + 1) > CELLS {
        return Vec::new();
    }
    let w = n.len() + 1;
    let mut table = vec![0u32; (o.len() + 1) * w];
    for i in (0..o.len()).rev() {
        for j in (0..n.len()).rev() {
            table[i * w + j] = if strict_eq(&o[i], &n[j]) {
                table[(i + 1) * w + j + 1] + 1
            } else {
                table[(i + 1) * w + j].max(table[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < o.len() && j < n.len() {
        if strict_eq(&o[i], &n[j]) {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if table[(i + 1) * w + j + 1] == table[i * w + j] {
            // As long a run either way: keep the two at the same place (an edit).
            i += 1;
            j += 1;
        } else if table[(i + 1) * w + j] >= table[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;
