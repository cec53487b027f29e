//! `git push` over smart HTTP: the receive-pack advertisement, the request's commands and pack, every pushed commit held to the rules of an API write (two regular files, each valid for its kind and the validators, the token's write permission per changed file), `main` moved by storage's compare-and-swap, and `report-status` (side-band messages name each reason).
use super::{git_answer, open_tenant, pkt_line, refuse};
use crate::auth::Principal;
use crate::domain::{
    CommitId, ConfigurationDoc, IntegrationDoc, ObjectId, PlanFile, RequestId, TenantId,
};
use crate::http::body::read_limited;
use crate::http::common::{blocking, Reply};
use crate::http::problem::{ApiError, Problem};
use crate::http::schema::{CommonProblems, GitBytes};
use crate::http::AppState;
use crate::storage::{FastForward, Storage, StorageError};
use crate::validation::SchemaSet;
use actix_web::http::header;
use actix_web::{web, HttpMessage, HttpRequest};
use std::sync::Arc;

const ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";
const REQUEST: &str = "application/x-git-receive-pack-request";
const RESULT: &str = "application/x-git-receive-pack-result";
const MAIN: &str = "refs/heads/main";
const CAPABILITIES: &str = "report-status side-band-64k quiet atomic delete-refs ofs-delta object-format=sha1 agent=planfiles";
/// Violations listed per refused file (the rest are counted).
const LISTED: usize = 5;

/// What a pushed file must keep besides its kind's rules: the token's write permission of
/// each file, and the size an API write takes.
#[derive(Debug, Clone, Copy)]
struct Rules {
    granted: [bool; 2],
    file_limit: usize,
    /// The token's last moment: checked again under the tenant's write lock, as for an API
    /// write, so that a push that waited past it moves nothing.
    not_after: std::time::SystemTime,
}

/// One ref update of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Command {
    old: ObjectId,
    new: ObjectId,
    name: String,
}

/// A push request: its commands, the capabilities the client asked for, and its pack.
#[derive(Debug)]
struct PushRequest {
    commands: Vec<Command>,
    side_band: bool,
    report_status: bool,
    /// Where the pack starts in the body.
    pack_at: usize,
}

/// The answer: `ok` or `ng <reason>` per ref, and lines for the pusher's terminal.
#[derive(Debug, Default)]
struct Report {
    refs: Vec<(String, Option<String>)>,
    messages: Vec<String>,
}

impl Report {
    /// Every command refused, for `reason` (a push is all or nothing).
    fn refused(commands: &[Command], reason: &str) -> Self {
        Report {
            refs: commands
                .iter()
                .map(|c| (c.name.clone(), Some(reason.to_owned())))
                .collect(),
            messages: vec![format!("planfiles: push refused: {reason}")],
        }
    }
}

/// `GET info/refs?service=git-receive-pack`: `main` and the capabilities, for a token that
/// may write at least one file.
pub(super) async fn advertise(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Reply {
    let tenant = match authorize(state, who, req, repo).await {
        Ok((_, tenant)) => tenant,
        Err(e) => return refuse(req, e),
    };
    let storage = state.storage.clone();
    let head = blocking(move || storage.head_state(&tenant), PlanFile::Integration).await;
    let head = match head {
        Ok(head) => head,
        Err(e) => return refuse(req, e),
    };
    let mut body = pkt_line("# service=git-receive-pack\n");
    body.extend_from_slice(b"0000");
    body.extend_from_slice(&pkt_line(
        format!("{} {MAIN}\0{CAPABILITIES}\n", head.commit).as_bytes(),
    ));
    body.extend_from_slice(b"0000");
    Ok(git_answer(ADVERTISEMENT).body(body))
}

/// `POST git-receive-pack`: the push, all or nothing.
#[utoipa::path(
    post,
    path = "/git/{repo}/git-receive-pack",
    tag = "git",
    description = "git push: a fast-forward of refs/heads/main, every pushed commit checked as an API write of the files it changes (two regular files, each valid for its kind and the validators, the token's write permission per file), main moved as API writes move it. Refusals are git's report-status `ng` with the reason (the file, the commit, a JSON pointer), which git push prints.",
    params(("repo" = String, Path, description = "<tenant_id>.git: the token's own tenant")),
    request_body(content = GitBytes, content_type = "application/x-git-receive-pack-request"),
    responses(
        (status = 200, description = "report-status (in side-band 1 when asked): `ok refs/heads/main`, or `ng <ref> <reason>` for a refused push, which changed nothing", body = GitBytes, content_type = "application/x-git-receive-pack-result"),
        (status = 400, description = "invalid_body: not a sequence of pkt-lines and a pack", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope (a write permission of either file) or wrong_tenant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not <tenant_id>.git; tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: over git.push_max_bytes", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type: not application/x-git-receive-pack-request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy (another push of the tenant, 1 per tenant and 4 in all) or tenant_moving; see Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub(in crate::http) async fn receive_pack(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    repo: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let (who, tenant) = match authorize(&state, who, &req, &repo).await {
        Ok(found) => found,
        Err(e) => return refuse(&req, e),
    };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some(REQUEST) {
        return Err(ApiError::UnsupportedMediaType);
    }
    // One push of a tenant at a time (4 in all), waited for at most queue_timeout.
    let Some(turn) = state.pushes.take(&tenant).await else {
        return refuse(
            &req,
            ApiError::busy(
                "another push of this tenant is running",
                state.pushes.wait().as_secs(),
            ),
        );
    };
    let limit = state.push_max_bytes;
    let admitted = match state.admit(&req, &tenant, limit).await {
        Ok(admitted) => admitted,
        Err(e) => return refuse(&req, e),
    };
    let body = match read_limited(&req, payload, limit, state.body_pace).await {
        Ok(body) => body,
        Err(e) => return refuse(&req, e),
    };
    // The body is read: what the push holds from here on is bounded by the push turns (4),
    // not the body budget, which API writes share.
    drop(admitted);
    let gzipped = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() == b"gzip");
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .cloned()
        .unwrap_or_else(RequestId::generate);
    let schemas = state.validators.current();
    let storage = state.storage.clone();
    let granted = PlanFile::ALL.map(|f| who.can_write(f));
    let pusher = who.author();
    let not_after = who.valid_until();
    let file_limit = state.body_limit;
    // git probes a large push with a request of one flush-pkt first (to learn whether it
    // may send it): answered with nothing, as git's own server does.
    if body.as_ref() == b"0000" {
        return Ok(git_answer(RESULT).finish());
    }
    let worked = web::block(move || {
        let _turn = turn;
        let body = if gzipped {
            std::borrow::Cow::Owned(super::gunzip(&body, limit)?)
        } else {
            std::borrow::Cow::Borrowed(body.as_ref())
        };
        let request = parse(&body).map_err(ApiError::InvalidBody)?;
        let report = push(
            &storage,
            &tenant,
            &request,
            &body[request.pack_at..],
            Rules {
                granted,
                file_limit,
                not_after,
            },
            &schemas,
            &pusher,
            &request_id,
        )
        .map_err(|e| ApiError::from_storage(e, PlanFile::Integration))?;
        Ok::<_, ApiError>((request.side_band, request.report_status, report))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the push task failed: {e}")))?;
    let (side_band, report_status, report) = match worked {
        Ok(done) => done,
        Err(e) => return refuse(&req, e),
    };
    for (name, reason) in &report.refs {
        match reason {
            None => tracing::info!(tenant = %who.tenant(), reference = %name, "push accepted"),
            Some(why) => {
                tracing::info!(tenant = %who.tenant(), reference = %name, reason = %why, "push refused")
            }
        }
    }
    Ok(git_answer(RESULT).body(answer(&report, side_band, report_status)))
}

/// The route, the token, its tenant and the tenant's repository (as for a clone), then a
/// write permission of either file.
async fn authorize(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Result<(Principal, TenantId), ApiError> {
    let who = open_tenant(state, who, req, repo).await?;
    if !PlanFile::ALL.iter().any(|f| who.can_write(*f)) {
        return Err(ApiError::Forbidden(
            PlanFile::Integration.write_permission(),
        ));
    }
    let tenant = who.tenant().clone();
    Ok((who, tenant))
}

/// The commands (pkt-lines up to a flush) and the pack after them.
fn parse(body: &[u8]) -> Result<PushRequest, String> {
    let mut at = 0;
    let mut commands = Vec::new();
    let mut caps = String::new();
    loop {
        let len = body
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or("a push request starts with pkt-lines of commands")?;
        if len == 0 {
            at += 4;
            break;
        }
        if len < 4 || at + len > body.len() {
            return Err("a pkt-line of the push is cut short".into());
        }
        let line = &body[at + 4..at + len];
        at += len;
        let (text, capabilities) = match line.iter().position(|b| *b == 0) {
            Some(nul) => (&line[..nul], Some(&line[nul + 1..])),
            None => (line, None),
        };
        if let Some(c) = capabilities {
            caps = String::from_utf8_lossy(c).into_owned();
        }
        let text = std::str::from_utf8(text).map_err(|_| "a command of the push is not text")?;
        let text = text.trim_end_matches('\n');
        if text.starts_with("shallow ") || text.starts_with("push-cert") {
            return Err("shallow pushes and signed pushes are not taken".into());
        }
        let mut parts = text.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("not a push command: {text:?}"));
        };
        let id = |s: &str| ObjectId::parse(s).map_err(|_| format!("not an object id: {s:?}"));
        commands.push(Command {
            old: id(old)?,
            new: id(new)?,
            name: name.to_owned(),
        });
    }
    if commands.is_empty() {
        return Err("the push names no ref".into());
    }
    let has = |cap: &str| caps.split(' ').any(|c| c == cap);
    Ok(PushRequest {
        commands,
        side_band: has("side-band-64k"),
        report_status: has("report-status"),
        pack_at: at,
    })
}

/// The push checked and, when every rule holds, `main` moved.
#[allow(clippy::too_many_arguments)]
fn push(
    storage: &Storage,
    tenant: &TenantId,
    request: &PushRequest,
    pack: &[u8],
    rules: Rules,
    schemas: &Arc<SchemaSet>,
    pusher: &crate::domain::Identity,
    request_id: &RequestId,
) -> Result<Report, StorageError> {
    let commands = &request.commands;
    // Only a fast-forward of main: any other command refuses the whole push.
    for c in commands {
        let reason = if c.name != MAIN {
            Some(format!("only {MAIN} can be pushed here, not {}", c.name))
        } else if c.new.as_str().bytes().all(|b| b == b'0') {
            Some("main cannot be deleted".into())
        } else if commands.len() > 1 {
            Some("a push here updates main alone".into())
        } else {
            None
        };
        if let Some(reason) = reason {
            return Ok(Report::refused(commands, &reason));
        }
    }
    let c = &commands[0];
    let (old, new) = (CommitId(c.old), CommitId(c.new));
    let mut messages = Vec::new();
    let mut check = |commit: CommitId, file: PlanFile, bytes: &[u8]| {
        check(commit, file, bytes, rules, schemas, &mut messages)
    };
    let staged = match storage.stage_push(tenant, pack, old, new, &mut check) {
        Ok(Ok(staged)) => staged,
        Ok(Err(reason)) => {
            let mut report = Report::refused(commands, &reason);
            report.messages.splice(0..0, messages);
            return Ok(report);
        }
        Err(StorageError::TenantMoving { .. }) => return Ok(Report::refused(commands, MOVING)),
        Err(e) => return Err(e),
    };
    if old == new {
        return Ok(Report {
            refs: vec![(c.name.clone(), None)],
            messages,
        });
    }
    let count = staged.commits;
    let not_after = rules.not_after;
    match storage.fast_forward(tenant, old, new, staged, pusher, request_id, not_after) {
        Ok(FastForward::Moved) => Ok(Report {
            refs: vec![(c.name.clone(), None)],
            messages: vec![format!(
                "planfiles: main is at {new} ({count} commit{} checked)",
                if count == 1 { "" } else { "s" }
            )],
        }),
        Ok(FastForward::Stale) => Ok(Report::refused(
            commands,
            "fetch first: main moved while the push was checked",
        )),
        Ok(FastForward::Locked) => Ok(Report::refused(
            commands,
            "main or its notes (refs/notes/planfiles) are locked by another git command on the server: retry in a moment",
        )),
        Err(StorageError::TenantMoving { .. }) => Ok(Report::refused(commands, MOVING)),
        Err(StorageError::Expired { .. }) => Ok(Report::refused(
            commands,
            "the token expired while the push waited its turn; nothing was written: put a fresh \
             token in the clone (git config http.extraHeader ...) and push again",
        )),
        Err(e) => Err(e),
    }
}

/// Why a push of a tenant that began to move is refused.
const MOVING: &str = "the tenant is moving to another shard: retry in a few seconds";

/// One changed file of a pushed commit as an API write of it: the permission, the size, the
/// YAML rules of the file's kind, the validators. The reason names the file and the commit;
/// each violation is also listed with its line in `messages`.
fn check(
    commit: CommitId,
    file: PlanFile,
    bytes: &[u8],
    rules: Rules,
    schemas: &SchemaSet,
    messages: &mut Vec<String>,
) -> Result<(), String> {
    let short = &commit.to_string()[..10];
    let at = format!("{} at {short}", file.path());
    let i = usize::from(file == PlanFile::Configuration);
    if !rules.granted[i] {
        return Err(format!("{at}: the token lacks {}", file.write_permission()));
    }
    if bytes.len() > rules.file_limit {
        return Err(format!(
            "{at}: {} bytes, more than the {} an API write takes (server.body_limit)",
            bytes.len(),
            rules.file_limit
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{at}: not UTF-8 text"))?;
    let value = serde_json::Value::String(text.to_owned());
    let parsed = match file {
        PlanFile::Integration => {
            IntegrationDoc::from_request(value).map(|d| schemas.check_integration(d.content()))
        }
        PlanFile::Configuration => {
            ConfigurationDoc::from_request(value).map(|d| schemas.check_configuration(d.content()))
        }
    };
    let found = parsed.map_err(|e| {
        let pointer = e
            .pointer
            .strip_prefix("/content")
            .or(e.pointer.strip_prefix("/payload"));
        format!(
            "{at}: {}: {}",
            pointer.filter(|p| !p.is_empty()).unwrap_or("/"),
            e.message
        )
    })?;
    if found.is_empty() {
        return Ok(());
    }
    let found = found.located_in(text);
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

/// `report-status` (inside side-band 1 when asked), side-band 2 messages first.
fn answer(report: &Report, side_band: bool, report_status: bool) -> Vec<u8> {
    let mut status = Vec::new();
    if report_status {
        status.extend(pkt_line("unpack ok\n"));
        for (name, reason) in &report.refs {
            let line = match reason {
                None => format!("ok {name}\n"),
                // One line: git shows it as "[remote rejected] (reason)".
                Some(why) => format!("ng {name} {}\n", why.replace('\n', " ")),
            };
            status.extend(pkt_line(line.as_bytes()));
        }
        status.extend_from_slice(b"0000");
    }
    if !side_band {
        return status;
    }
    let mut out = Vec::new();
    for m in &report.messages {
        let mut band = vec![2u8];
        band.extend_from_slice(m.as_bytes());
        band.push(b'\n');
        out.extend(pkt_line(&band));
    }
    for chunk in status.chunks(65_000) {
        let mut band = vec![1u8];
        band.extend_from_slice(chunk);
        out.extend(pkt_line(&band));
    }
    out.extend_from_slice(b"0000");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    #[test]
    fn commands_capabilities_and_the_pack_are_read() {
        let mut body = pkt_line(
            format!("{A} {B} refs/heads/main\0report-status side-band-64k agent=git/2\n")
                .as_bytes(),
        );
        body.extend(pkt_line(format!("{A} {B} refs/tags/v1\n").as_bytes()));
        body.extend_from_slice(b"0000PACKxyz");
        let r = parse(&body).unwrap();
        assert_eq!(r.commands.len(), 2);
        assert_eq!(r.commands[1].name, "refs/tags/v1");
        assert!(r.side_band && r.report_status);
        assert_eq!(&body[r.pack_at..], b"PACKxyz");
        for bad in [&b""[..], b"zzzz", b"0000", b"0010short"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_report_goes_in_band_one_and_messages_in_band_two() {
        let report = Report {
            refs: vec![("refs/heads/main".into(), Some("no".into()))],
            messages: vec!["planfiles: why".into()],
        };
        let plain = answer(&report, false, true);
        assert_eq!(plain, b"000eunpack ok\n001ang refs/heads/main no\n0000");
        let banded = answer(&report, true, true);
        assert!(banded.starts_with(b"0014\x02planfiles: why\n"));
        assert!(banded.ends_with(b"0000"));
    }
}
