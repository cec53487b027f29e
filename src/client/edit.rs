//! `planfiles edit FILE`, as `kubectl edit` does it and without losing a word: the stored text in `$VISUAL`/`$EDITOR`; a 422 reopens the same text with each violation as a comment on top; a conflict merges your text with theirs from your base (`git merge-file`), conflicting hunks marked; the buffer stays on disk, its path printed, until a write lands.
use super::commands::{put, Guard, Output, WriteOptions};
use super::local::{merge, Buffer};
use super::{short, Client, ClientError};
use crate::domain::PlanFile;

/// Lines the client puts above the text; removed before the text is sent.
const NOTE: &str = "# planfiles: ";

/// Edits `file` with `editor` (run by `sh -c`, so it may carry arguments, as git runs it).
pub fn edit(
    c: &Client,
    file: PlanFile,
    editor: &str,
    options: &WriteOptions,
    out: Output,
) -> Result<(), ClientError> {
    let read = c.text(file, None)?;
    let buffer = Buffer::new(file.part_name())?;
    // The version the write is guarded by, and the text the user's edit started from.
    let (mut against, mut base) = (read.clone(), read.text.clone());
    let mut text = read.text;
    let mut notes: Vec<String> = Vec::new();
    loop {
        buffer.write(&with_notes(&notes, &text))?;
        let edited = match run(editor, &buffer) {
            Ok(()) => without_notes(&buffer.read()?),
            Err(e) => return Err(kept(&buffer, e)),
        };
        if edited.trim().is_empty() {
            super::note(&format!(
                "the buffer is empty: edit cancelled, nothing was sent; your last text is in {}",
                buffer.path().display()
            ));
            buffer.write(&text)?;
            return Ok(());
        }
        if edited == against.text {
            super::note("no change: nothing was sent");
            buffer.remove();
            return Ok(());
        }
        if edited
            .lines()
            .any(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> "))
        {
            notes = vec!["the text still has conflict markers: keep the lines you want, remove the markers, and save".into()];
            text = edited;
            continue;
        }
        match put(
            c,
            file,
            &edited,
            &Guard::IfMatch(against.blob.clone()),
            options,
            out,
        ) {
            Ok(_) => {
                buffer.remove();
                return Ok(());
            }
            Err(ClientError::Refused {
                status: 422,
                detail,
                errors,
            }) => {
                notes = violations(&detail, &errors);
                text = edited;
            }
            Err(ClientError::Refused {
                status: 409 | 412, ..
            }) => {
                let theirs = match c.text(file, None) {
                    Ok(theirs) => theirs,
                    Err(e) => {
                        buffer.write(&edited)?;
                        return Err(kept(&buffer, e));
                    }
                };
                let (merged, conflicts) = merge(&edited, &base, &theirs.text)?;
                notes = vec![match conflicts {
                    0 => format!("{} changed since you read it: your edit is merged into the new version ({}); review it and save to send", file.path(), short(&theirs.blob)),
                    n => format!("{} changed since you read it: {n} of your changes overlap theirs, marked <<<<<<< yours ... >>>>>>> theirs; resolve them and save", file.path()),
                }];
                base = theirs.text.clone();
                against = theirs;
                text = merged;
            }
            Err(e) => {
                buffer.write(&edited)?;
                return Err(kept(&buffer, e));
            }
        }
    }
}

/// Runs the editor on the buffer; a failure (or a non-zero exit) ends the edit.
fn run(editor: &str, buffer: &Buffer) -> Result<(), ClientError> {
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("{editor} \"$1\""), "planfiles-editor"])
        .arg(buffer.path())
        .status()
        .map_err(|e| ClientError::Usage(format!("run the editor {editor:?}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(ClientError::Usage(format!(
            "the editor {editor:?} exited with {status}: edit cancelled, nothing was sent"
        )))
    }
}

/// `e`, saying where the user's text is kept.
fn kept(buffer: &Buffer, e: ClientError) -> ClientError {
    let keep = format!("; your text is kept in {}", buffer.path().display());
    match e {
        ClientError::Refused {
            status,
            detail,
            errors,
        } => ClientError::Refused {
            status,
            detail: detail + &keep,
            errors,
        },
        ClientError::Usage(m) => ClientError::Usage(m + &keep),
        ClientError::Denied(m) => ClientError::Denied(m + &keep),
        ClientError::NotFound(m) => ClientError::NotFound(m + &keep),
        ClientError::Unreachable(m) => ClientError::Unreachable(m + &keep),
    }
}

/// The notes of a 422: the detail, then each violation at its line in the text below the
/// notes (the line numbers count the buffer's lines as the editor shows them).
fn violations(detail: &str, errors: &[serde_json::Value]) -> Vec<String> {
    let mut notes = vec![format!("refused: {detail}")];
    let below = errors.len() + 2;
    for v in errors {
        let pointer = v["pointer"].as_str().unwrap_or("");
        let pointer = pointer
            .strip_prefix("/content")
            .or_else(|| pointer.strip_prefix("/payload"))
            .unwrap_or(pointer);
        let at = match (v["line"].as_u64(), v["column"].as_u64()) {
            (Some(l), Some(c)) => format!("line {}, column {c}: ", l as usize + below),
            _ => String::new(),
        };
        notes.push(format!(
            "{at}{}: {}",
            if pointer.is_empty() { "/" } else { pointer },
            v["message"].as_str().unwrap_or("")
        ));
    }
    notes.push("fix the text below and save; these lines are removed before it is sent".into());
    notes
}

fn with_notes(notes: &[String], text: &str) -> String {
    let mut out = String::new();
    for n in notes {
        out.push_str(NOTE);
        out.push_str(n);
        out.push('\n');
    }
    out.push_str(text);
    out
}

fn without_notes(buffer: &str) -> String {
    let mut rest = buffer;
    while rest.starts_with(NOTE) {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
    }
    rest.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_go_on_top_and_come_off_whole() {
        let text = "aws: []\n# a comment of the user's\n";
        let notes = vec!["one".to_owned(), "two".to_owned()];
        let buffer = with_notes(&notes, text);
        assert_eq!(buffer.lines().count(), 4);
        assert_eq!(without_notes(&buffer), text);
        assert_eq!(without_notes(text), text);
    }

    #[test]
    fn a_violations_line_counts_the_notes_above_it() {
        let errors = vec![
            serde_json::json!({"pointer": "/content/aws/0/account_id", "message": "bad", "line": 2, "column": 17}),
        ];
        let notes = violations("breaks a schema", &errors);
        assert_eq!(notes.len(), 3);
        // Two notes before the violation's own and one after: line 2 of the text is line 5.
        assert_eq!(notes[1], "line 5, column 17: /aws/0/account_id: bad");
        assert_eq!(with_notes(&notes, "a\nb\n").lines().nth(4), Some("b"));
    }
}
