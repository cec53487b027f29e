//! A push held to the rules of a write: only a fast-forward of `main`; every changed file of every pushed commit as an API write of it (the token's permission per file, the size, its kind's rules, the validators); then `main` moved in the tenant's writer queue, as API writes move it.
use super::rules::{self, Refusal};
use super::writer::{PushMove, WriteError, Writers};
use crate::domain::{CommitId, Identity, ObjectId, PlanFile, RequestId, TenantId};
use crate::storage::{FastForward, Storage, StorageError};
use crate::validation::SchemaSet;
use std::sync::Arc;
use std::time::SystemTime;

/// The only ref a push may move.
pub const MAIN: &str = "refs/heads/main";
/// Where a push proposes instead (Gerrit's convention): `git push origin HEAD:refs/for/main`.
pub const FOR_MAIN: &str = "refs/for/main";
/// Violations listed per refused file (the rest are counted).
const LISTED: usize = 5;
/// Why a push of a tenant that began to move is refused.
const MOVING: &str = "the tenant is moving to another shard: retry in a few seconds";

/// One ref update of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub old: ObjectId,
    pub new: ObjectId,
    pub name: String,
}

/// Who pushes, and what their token allows: the write permission of each file, the size an
/// API write takes, the token's last moment (checked again under the tenant's write lock).
#[derive(Debug, Clone)]
pub struct Pusher {
    /// The token's `sub`: a push that proposes needs one, as every proposal does.
    pub sub: Option<String>,
    pub granted: [bool; 2],
    pub file_limit: usize,
    pub not_after: SystemTime,
    pub who: Identity,
    pub request_id: RequestId,
}

/// What a push came to (all or nothing): `refused` with the reason, or accepted; and lines
/// for the pusher's terminal (each violation at its line, where `main` is now).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub refused: Option<String>,
    pub messages: Vec<String>,
}

impl Outcome {
    fn refused(reason: impl Into<String>) -> Self {
        Outcome {
            refused: Some(reason.into()),
            messages: Vec::new(),
        }
    }
}

/// The push of `commands` with `pack`: checked (on the blocking pool), then `main` moved in
/// the tenant's turn of the writer queue. Errors are faults (storage, the task); every rule
/// a push breaks is a refused [`Outcome`].
pub async fn push(
    storage: &Storage,
    writers: &Writers,
    tenant: &TenantId,
    commands: &[Command],
    pack: impl AsRef<[u8]> + Send + 'static,
    pusher: Pusher,
    schemas: Arc<SchemaSet>,
) -> Result<Outcome, WriteError> {
    if let [c] = commands {
        if c.name == FOR_MAIN {
            return propose(storage, writers, tenant, c, pack, pusher, schemas).await;
        }
    }
    if let Some(reason) = only_main(commands) {
        return Ok(Outcome::refused(reason));
    }
    let c = &commands[0];
    let (old, new) = (CommitId(c.old), CommitId(c.new));
    let (owned, storage2, rules) = (tenant.clone(), storage.clone(), pusher.clone());
    let staged = tokio::task::spawn_blocking(move || {
        let mut messages = Vec::new();
        let mut check = |commit: CommitId, file: PlanFile, bytes: &[u8]| {
            check(commit, file, bytes, &rules, &schemas, &mut messages)
        };
        let staged = storage2.stage_push(&owned, pack.as_ref(), old, new, &mut check, false);
        (staged, messages)
    })
    .await
    .map_err(|e| WriteError::Task {
        tenant: tenant.clone(),
        message: e.to_string(),
    })?;
    let staged = match staged {
        (Ok(Ok(staged)), _) => staged,
        (Ok(Err(reason)), messages) => {
            return Ok(Outcome {
                refused: Some(reason),
                messages,
            })
        }
        (Err(StorageError::TenantMoving { .. }), _) => return Ok(Outcome::refused(MOVING)),
        (Err(e), _) => return Err(e.into()),
    };
    if old == new {
        return Ok(Outcome::default());
    }
    let count = staged.commits;
    let moved = writers
        .push(
            tenant,
            PushMove {
                old,
                new,
                staged,
                pusher: pusher.who,
                request_id: pusher.request_id,
                not_after: pusher.not_after,
            },
        )
        .await;
    Ok(match moved {
        Ok(FastForward::Moved) => Outcome {
            refused: None,
            messages: vec![format!(
                "planfiles: main is at {new} ({count} commit{} checked)",
                if count == 1 { "" } else { "s" }
            )],
        },
        Ok(FastForward::Stale) => {
            Outcome::refused("fetch first: main moved while the push was checked")
        }
        Ok(FastForward::Locked) => Outcome::refused(
            "main or its notes (refs/notes/planfiles) are locked by another git command on the server: retry in a moment",
        ),
        Err(WriteError::Storage(StorageError::TenantMoving { .. })) => Outcome::refused(MOVING),
        Err(WriteError::Storage(StorageError::ApprovalRequired { .. })) => Outcome::refused(
            "approval required: this tenant's main moves only by applying an approved proposal; \
             propose instead: git push origin HEAD:refs/for/main (nothing was written)",
        ),
        Err(WriteError::Storage(StorageError::Expired { .. })) => Outcome::refused(
            "the token expired while the push waited its turn; nothing was written: put a fresh \
             token in the clone (git config http.extraHeader ...) and push again",
        ),
        Err(WriteError::QueueFull { waiting, .. }) => Outcome::refused(format!(
            "busy: {waiting} writes of this tenant are queued; nothing was written: push again in a moment"
        )),
        Err(WriteError::TimedOut { waited, .. }) => Outcome::refused(format!(
            "busy: the tenant's writes did not give the push a turn within {} s; nothing was written: push again in a moment",
            waited.as_secs()
        )),
        Err(e) => return Err(e),
    })
}

/// A push to `refs/for/main`: its commits on top of `main` under the push's checks (each
/// changed file as an API write of it), then a proposal of its head's files (updating the
/// one its `Proposal: <n>` trailer names), titled by its subject; nothing of the pack is
/// kept. git prints the proposal's number.
async fn propose(
    storage: &Storage,
    writers: &Writers,
    tenant: &TenantId,
    c: &Command,
    pack: impl AsRef<[u8]> + Send + 'static,
    pusher: Pusher,
    schemas: Arc<SchemaSet>,
) -> Result<Outcome, WriteError> {
    use crate::domain::proposal::Description;
    use crate::domain::trailers::{self, Reserved};
    let Some(author) = pusher.sub.as_deref().and_then(|sub| {
        crate::domain::Reviewer::new(Some(sub), pusher.who.name(), pusher.who.email())
    }) else {
        return Ok(Outcome::refused(
            "a proposal needs a token with a sub claim: approvals tell people apart by it",
        ));
    };
    let new = CommitId(c.new);
    let (owned, storage2, rules) = (tenant.clone(), storage.clone(), pusher.clone());
    let staged = tokio::task::spawn_blocking(move || {
        let main = storage2.read(&owned, PlanFile::Integration)?.commit;
        let mut messages = Vec::new();
        let mut check = |commit: CommitId, file: PlanFile, bytes: &[u8]| {
            check(commit, file, bytes, &rules, &schemas, &mut messages)
        };
        let staged = storage2.stage_push(&owned, pack.as_ref(), main, new, &mut check, true)?;
        Ok::<_, StorageError>((staged, messages))
    })
    .await
    .map_err(|e| WriteError::Task {
        tenant: tenant.clone(),
        message: e.to_string(),
    })?;
    let staged = match staged {
        Ok((Ok(staged), _)) => staged,
        Ok((Err(reason), messages)) => {
            return Ok(Outcome {
                refused: Some(reason),
                messages,
            })
        }
        Err(StorageError::TenantMoving { .. }) => return Ok(Outcome::refused(MOVING)),
        Err(e) => return Err(e.into()),
    };
    let Some(tip) = staged.tip() else {
        return Ok(Outcome::refused(
            "the push adds no commit to main: commit your change, then push it to refs/for/main",
        ));
    };
    let number = match trailers::value(&tip.message, Reserved::Proposal) {
        None => None,
        Some(n) => match crate::domain::ProposalNumber::parse(n) {
            Ok(n) => Some(n),
            Err(why) => {
                return Ok(Outcome::refused(format!(
                    "the trailer Proposal: {n}: {why}"
                )))
            }
        },
    };
    let message = trailers::without(&tip.message, Reserved::Proposal);
    let (subject, body) = message.split_once('\n').unwrap_or((&message, ""));
    let title: String = subject
        .chars()
        .take(crate::domain::commit_message::MAX_CHARS)
        .collect();
    let title = match crate::domain::CommitMessage::from_field(Some(&title.into()), "/title") {
        Ok(Some(title)) => title,
        _ => {
            return Ok(Outcome::refused(
                "the pushed commit needs a subject line: it becomes the proposal's title",
            ))
        }
    };
    let description = match Description::from_field(Some(&body.trim().into()), "/message") {
        Ok(d) => d,
        Err(e) => {
            return Ok(Outcome::refused(format!(
                "the commit message's body: {}",
                e.message
            )))
        }
    };
    let req = crate::storage::ProposalRequest {
        number,
        changes: tip
            .files
            .iter()
            .map(|(file, bytes)| crate::storage::Change {
                file: *file,
                bytes: bytes.clone(),
                content: None,
                preconditions: Default::default(),
            })
            .collect(),
        title,
        message: description,
        author,
        request_id: pusher.request_id.clone(),
        not_after: Some(pusher.not_after),
    };
    Ok(match super::proposals::propose(writers, tenant, req).await {
        Ok(p) => Outcome {
            refused: None,
            messages: vec![format!(
                "planfiles: proposal #{} {}: {} (GET /plans/proposals/{})",
                p.number,
                if number.is_some() { "updated" } else { "opened" },
                p.title,
                p.number
            )],
        },
        Err(WriteError::Storage(e @ (StorageError::ProposalNotFound { .. }
        | StorageError::ProposalRefused { .. }
        | StorageError::NothingProposed { .. }
        | StorageError::ProposalLimit { .. }))) => Outcome::refused(strip_tenant(&e.to_string())),
        Err(WriteError::Storage(StorageError::TenantMoving { .. })) => Outcome::refused(MOVING),
        Err(WriteError::QueueFull { waiting, .. }) => Outcome::refused(format!(
            "busy: {waiting} writes of this tenant are queued; nothing was written: push again in a moment"
        )),
        Err(e) => return Err(e),
    })
}

/// An error's text without its `tenant <id>: ` prefix (the pusher knows their tenant).
fn strip_tenant(text: &str) -> String {
    text.split_once(": ")
        .map_or(text, |(_, rest)| rest)
        .to_owned()
}

/// Why `commands` are not a fast-forward of `main` alone (any other command refuses the
/// whole push).
fn only_main(commands: &[Command]) -> Option<String> {
    commands.iter().find_map(|c| {
        if c.name != MAIN {
            Some(format!(
                "only {MAIN} can be pushed here (or {FOR_MAIN}, to propose), not {}",
                c.name
            ))
        } else if c.new.as_str().bytes().all(|b| b == b'0') {
            Some("main cannot be deleted".into())
        } else if commands.len() > 1 {
            Some("a push here updates main alone".into())
        } else {
            None
        }
    })
}

/// One changed file of a pushed commit as an API write of it: the permission, the size, the
/// file's rules ([`rules::text`]). The reason names the file and the commit; each violation
/// is also listed with its line in `messages`.
fn check(
    commit: CommitId,
    file: PlanFile,
    bytes: &[u8],
    pusher: &Pusher,
    schemas: &SchemaSet,
    messages: &mut Vec<String>,
) -> Result<(), String> {
    let short = &commit.to_string()[..10];
    let at = format!("{} at {short}", file.path());
    let i = usize::from(file == PlanFile::Configuration);
    if !pusher.granted[i] {
        return Err(format!("{at}: the token lacks {}", file.write_permission()));
    }
    if bytes.len() > pusher.file_limit {
        return Err(format!(
            "{at}: {} bytes, more than the {} an API write takes (server.body_limit)",
            bytes.len(),
            pusher.file_limit
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{at}: not UTF-8 text"))?;
    let found = match rules::text(file, text, schemas) {
        Ok(_) => return Ok(()),
        Err(Refusal::Unreadable(why)) => return Err(format!("{at}: {why}")),
        Err(Refusal::Breaks(found)) => found,
    };
    for v in found.list.iter().take(LISTED) {
        messages.push(format!(
            "planfiles: {at}:{}:{}: {}: {}",
            v.line.unwrap_or(1),
            v.column.unwrap_or(1),
            v.pointer,
            v.message
        ));
    }
    let first = &found.list[0];
    let total = found.list.len() + found.omitted;
    Err(format!(
        "{at}: {}: {}{}",
        first.pointer,
        first.message,
        if total > 1 {
            format!(" (and {} more)", total - 1)
        } else {
            String::new()
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(name: &str, new: &str) -> Command {
        Command {
            old: ObjectId::parse(&"1".repeat(40)).unwrap(),
            new: ObjectId::parse(new).unwrap(),
            name: name.into(),
        }
    }

    #[test]
    fn only_a_fast_forward_of_main_alone_is_taken() {
        let b = "2".repeat(40);
        let zero = "0".repeat(40);
        assert_eq!(only_main(&[command(MAIN, &b)]), None);
        for (commands, why) in [
            (vec![command("refs/tags/v1", &b)], "only refs/heads/main"),
            (vec![command(MAIN, &zero)], "cannot be deleted"),
            (
                vec![command(MAIN, &b), command(MAIN, &b)],
                "updates main alone",
            ),
        ] {
            let reason = only_main(&commands).expect("refused");
            assert!(reason.contains(why), "{reason}");
        }
    }
}
