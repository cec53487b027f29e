//! The documents tell the truth about the code: ARCHITECTURE.md's code map names every file under `src/` and only files and functions that exist, and every Markdown file of the repository parses as written (a CommonMark parser finds every heading the text has, and every code fence is closed), and every relative link reaches its file and heading.
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, relative to the repository's root.
fn rust_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root()).unwrap();
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    out
}

/// The backticked spans of `text`, in order.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The files the code map's rows name: in each row's first cell, a path (`src/a/b.rs`) or a
/// folder (`src/a/`) sets where the bare names after it (`c.rs`) are.
fn mapped_files(doc: &str) -> BTreeSet<String> {
    let map = doc
        .split("## Code map")
        .nth(1)
        .expect("a Code map section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut files = BTreeSet::new();
    for row in map.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split(" | ").next().unwrap();
        let mut base = String::new();
        for span in code_spans(cell) {
            if span.starts_with("src/") && span.ends_with('/') {
                base = span.to_owned();
                files.insert(span.to_owned());
            } else if span.starts_with("src/") {
                base = span.rsplit_once('/').unwrap().0.to_owned() + "/";
                files.insert(span.to_owned());
            } else if span.ends_with(".rs")
                && !base.is_empty()
                && (!root().join(span).exists() || root().join(&base).join(span).exists())
            {
                // A bare name is in the folder named before it (`build.rs` is the root's).
                files.insert(format!("{base}{span}"));
            } else {
                files.insert(span.to_owned());
            }
        }
    }
    files
}

/// Every Rust source file of `src/`, as one text.
fn all_source() -> String {
    rust_files(&root().join("src"))
        .iter()
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap())
        .collect()
}

#[test]
fn the_code_map_names_every_source_file_and_nothing_that_does_not_exist() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mapped = mapped_files(&doc);
    let missing: Vec<String> = rust_files(&root().join("src"))
        .into_iter()
        .filter(|f| !mapped.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "files under src/ that docs/ARCHITECTURE.md's code map does not name: {missing:?}"
    );
    let gone: Vec<&String> = mapped.iter().filter(|f| !root().join(f).exists()).collect();
    assert!(
        gone.is_empty(),
        "the code map names what does not exist: {gone:?}"
    );
}

/// Every module of the API's test binary (`tests/api/main.rs`) is in ARCHITECTURE.md's test
/// table, so that a behaviour's proof can be found from the map.
#[test]
fn every_api_test_module_is_in_the_test_table() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let table = &doc[doc.find("\n## Tests").unwrap()..doc.find("\n### Fuzzing").unwrap()];
    let named: BTreeSet<&str> = code_spans(table).into_iter().collect();
    let main = std::fs::read_to_string(root().join("tests/api/main.rs")).unwrap();
    let missing: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .filter(|m| *m != "common")
        .filter(|m| {
            !named.contains(format!("tests/api/{m}.rs").as_str())
                && !named.contains(format!("{m}.rs").as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "tests/api modules that docs/ARCHITECTURE.md's test table does not name: {missing:?}"
    );
}

/// `Type::function` and `module::function` names in ARCHITECTURE.md exist in `src/`.
#[test]
fn the_functions_the_architecture_names_exist() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let source = all_source();
    let mut unknown = Vec::new();
    for span in code_spans(&doc) {
        let Some((owner, name)) = span.rsplit_once("::") else {
            continue;
        };
        let is_ident =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let owner = owner.rsplit("::").next().unwrap();
        if !is_ident(owner) || !is_ident(name) {
            continue;
        }
        let item_found = if name.chars().next().unwrap().is_ascii_uppercase() {
            // A type, a constant or a variant.
            [
                format!("struct {name}"),
                format!("enum {name}"),
                format!("const {name}"),
                format!("trait {name}"),
                format!("    {name} {{"),
                format!("    {name},"),
                format!("    {name}("),
            ]
            .iter()
            .any(|p| source.contains(p.as_str()))
        } else {
            source.contains(&format!("fn {name}(")) || source.contains(&format!("fn {name}<"))
        };
        let owner_found = if owner.chars().next().unwrap().is_ascii_uppercase() {
            ["struct", "enum", "trait", "type"]
                .iter()
                .any(|k| source.contains(&format!("{k} {owner}")))
        } else {
            source.contains(&format!("mod {owner}"))
                || root().join(format!("src/{owner}.rs")).exists()
                || rust_files(&root().join("src"))
                    .iter()
                    .any(|f| f.ends_with(&format!("/{owner}.rs")))
        };
        if !(item_found && owner_found) {
            unknown.push(span);
        }
    }
    assert!(
        unknown.is_empty(),
        "docs/ARCHITECTURE.md names what src/ does not have: {unknown:?}"
    );
}

/// The Markdown files of the repository (its own, not the dependencies').
fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    for dir in ["docs", "deploy", "fuzz", "scripts"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out
}

/// The headings of `text` as a reader of its lines sees them (`#` at the start of a line
/// outside code fences), and whether every fence it opens it closes. A fence that opens
/// (with a language) inside an open block is the sign of a block whose closing fence was
/// forgotten: what follows, headings included, is code to a Markdown reader.
fn headings_by_lines(text: &str) -> (Vec<String>, bool) {
    let mut headings = Vec::new();
    let mut fence: Option<&str> = None;
    let mut balanced = true;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if m == open && trimmed.trim_end() == m => fence = None,
            (Some(open), Some(m)) if m == open => balanced = false,
            (None, None) if line.starts_with('#') => {
                let title = line.trim_start_matches('#').trim();
                if line
                    .chars()
                    .nth(line.len() - line.trim_start_matches('#').len())
                    == Some(' ')
                {
                    headings.push(title.to_owned());
                }
            }
            _ => {}
        }
    }
    (headings, balanced && fence.is_none())
}

/// The headings a CommonMark parser finds, and whether a fenced block runs to the end of the
/// text without its closing fence.
fn headings_parsed(text: &str) -> (Vec<String>, bool) {
    let mut headings = Vec::new();
    let mut current: Option<String> = None;
    let mut unclosed = false;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading {
                level:
                    HeadingLevel::H1
                    | HeadingLevel::H2
                    | HeadingLevel::H3
                    | HeadingLevel::H4
                    | HeadingLevel::H5
                    | HeadingLevel::H6,
                ..
            }) => current = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => headings.extend(current.take()),
            Event::Text(t) => {
                if let Some(h) = current.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Code(t) => {
                if let Some(h) = current.as_mut() {
                    h.push('`');
                    h.push_str(&t);
                    h.push('`');
                }
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => {
                let block = text[range].trim_end();
                let closes = block.ends_with("```") || block.ends_with("~~~");
                if !closes || block.lines().count() < 2 {
                    unclosed = true;
                }
            }
            _ => {}
        }
    }
    (headings, unclosed)
}

#[test]
fn every_markdown_file_parses_as_written() {
    let mut problems = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let (written, balanced) = headings_by_lines(&text);
        let (parsed, unclosed) = headings_parsed(&text);
        if !balanced || unclosed {
            problems.push(format!("{name}: a code fence is never closed"));
        }
        for heading in &written {
            if !parsed.contains(heading) {
                problems.push(format!(
                    "{name}: the heading {heading:?} is not a heading to a Markdown reader"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, and only letters, digits,
/// `-` and `_` kept (the heading's code spans count by their text).
fn anchor_of(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The relative links and images of `text`: (destination, line number).
fn relative_links(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (event, range) in Parser::new(text).into_offset_iter() {
        let dest = match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
            _ => continue,
        };
        if dest.contains("://") || dest.starts_with("mailto:") {
            continue;
        }
        let line = text[..range.start].lines().count().max(1);
        out.push((dest.to_string(), line));
    }
    out
}

/// Every relative link of every Markdown file reaches a file that exists, and a `#anchor`
/// reaches a heading of that file: moving a section cannot leave a link behind.
#[test]
fn every_relative_link_reaches_a_file_and_heading() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for (dest, line) in relative_links(&text) {
            checked += 1;
            let (path, anchor) = dest.split_once('#').unwrap_or((&dest, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !target.exists() {
                problems.push(format!("{name}:{line}: {dest}: no such file"));
                continue;
            }
            if anchor.is_empty() || target.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let headings = headings_parsed(&std::fs::read_to_string(&target).unwrap()).0;
            let anchors: Vec<String> = headings.iter().map(|h| anchor_of(h)).collect();
            if !anchors.iter().any(|a| a == anchor) {
                problems.push(format!("{name}:{line}: {dest}: no heading has that anchor"));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser reading links?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_heading_anchor_is_the_one_github_makes() {
    for (heading, anchor) in [
        ("Change events", "change-events"),
        ("Clone over HTTP (backups)", "clone-over-http-backups"),
        (
            "Versions: several files, restore, diff, dry run, safe retries",
            "versions-several-files-restore-diff-dry-run-safe-retries",
        ),
        ("`planfiles tenant move`", "planfiles-tenant-move"),
        (
            "Health, OpenAPI, metrics and logs",
            "health-openapi-metrics-and-logs",
        ),
    ] {
        assert_eq!(anchor_of(heading), anchor, "{heading}");
    }
}
