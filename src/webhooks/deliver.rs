//! One delivery attempt as the Standard Webhooks specification says: the message (`type`, `timestamp`, `data`), its `webhook-id`/`webhook-timestamp`/`webhook-signature` headers (HMAC-SHA256 of `id.timestamp.body`), and the POST (no redirect, no proxy, bounded time and reply).
use super::destination::{Destinations, Refused};
use crate::domain::{EventType, TenantId, WebhookSecret, WebhookUrl};
use crate::events::FileEvent;
use crate::storage::{AttemptStatus, FileChange, HeadState};
use base64::Engine as _;
use futures_util::StreamExt as _;
use hmac::{Hmac, Mac};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The most of a receiver's answer read (the rest is dropped with the connection).
const MAX_REPLY: usize = 64 * 1024;
/// The most of a commit message an event carries.
const MAX_MESSAGE: usize = 16 * 1024;
/// The most of it kept in the deliveries log.
const DETAIL_CHARS: usize = 200;

/// One event, ready to send to any subscription (the same bytes for each, each signed with
/// its own secret).
#[derive(Debug, Clone)]
pub struct Message {
    /// `webhook-id`: the same for every attempt of this event (`msg_<tenant>_<commit>_<file>`).
    pub id: String,
    pub kind: EventType,
    pub commit: String,
    /// The commit's time (its author date), for the lag.
    pub at: SystemTime,
    pub body: Arc<Vec<u8>>,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: TenantData<'a, T>,
}

#[derive(Serialize)]
struct TenantData<'a, T: Serialize> {
    tenant: &'a str,
    #[serde(flatten)]
    event: T,
}

/// `main.reset`'s data.
#[derive(Serialize)]
struct ResetData {
    /// `main`'s head now, from which deliveries go on.
    commit_sha: String,
    integration_file_sha: String,
    configuration_file_sha: String,
    /// Where the subscription stood: no longer on `main`'s first-parent line.
    previous_commit_sha: String,
}

impl Message {
    /// The event of one file changed by one commit.
    pub fn file_change(tenant: &TenantId, change: &FileChange) -> Self {
        let kind = EventType::updated(change.file);
        let commit = change.entry.commit.to_string();
        let mut event = FileEvent::from_change(change);
        // A pushed commit's message can be megabytes: its start is enough for a receiver
        // (it has the commit id), and keeps a subscription's batch small.
        if event.message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !event.message.is_char_boundary(cut) {
                cut -= 1;
            }
            event.message.truncate(cut);
            event.message.push_str("\n[truncated]");
        }
        Self {
            id: format!("msg_{tenant}_{commit}_{}", event.file),
            kind,
            at: change.entry.time,
            body: Arc::new(envelope(tenant, kind, change.entry.time, event)),
            commit,
        }
    }

    /// A step of a proposal (`proposal.opened` and the others).
    pub fn proposal_step(tenant: &TenantId, step: &crate::storage::ProposalChange) -> Self {
        let kind = EventType::Proposal(step.kind);
        let commit = step.id.to_string();
        let event = crate::events::ProposalEvent::from_change(step);
        Self {
            id: format!("msg_{tenant}_{commit}_{}", kind.as_str()),
            kind,
            at: step.time,
            body: Arc::new(envelope(tenant, kind, step.time, event)),
            commit,
        }
    }

    /// `main` moved off the line the subscription stood on (plain git reset or forced it).
    pub fn reset(tenant: &TenantId, previous: &crate::domain::CommitId, head: &HeadState) -> Self {
        let commit = head.commit.to_string();
        let now = SystemTime::now();
        let data = ResetData {
            commit_sha: commit.clone(),
            integration_file_sha: head.integration.to_string(),
            configuration_file_sha: head.configuration.to_string(),
            previous_commit_sha: previous.to_string(),
        };
        Self {
            id: format!("msg_{tenant}_{commit}_reset_{previous}"),
            kind: EventType::MainReset,
            at: now,
            body: Arc::new(envelope(tenant, EventType::MainReset, now, data)),
            commit,
        }
    }
}

fn envelope(tenant: &TenantId, kind: EventType, at: SystemTime, event: impl Serialize) -> Vec<u8> {
    serde_json::to_vec(&Envelope {
        kind: kind.as_str(),
        timestamp: crate::domain::timestamp::rfc3339(at),
        data: TenantData {
            tenant: tenant.as_str(),
            event,
        },
    })
    .expect("plain data")
}

/// `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
pub fn signature(secret: &WebhookSecret, id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&secret.key()).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub delivered: bool,
    pub status: AttemptStatus,
    pub detail: Option<String>,
    pub took: Duration,
}

impl Outcome {
    /// No name lookup turn was had: the process's, not the receiver's, doing.
    pub fn is_busy(&self) -> bool {
        self.label() == "busy"
    }

    /// The `outcome` label of `planfiles_webhook_attempts_total`.
    pub fn label(&self) -> &'static str {
        match &self.status {
            AttemptStatus::Http(_) if self.delivered => "delivered",
            AttemptStatus::Http(_) => "http_error",
            AttemptStatus::Failed(word) if word == "timeout" => "timeout",
            AttemptStatus::Failed(word) if word == "refused" => "refused",
            AttemptStatus::Failed(word) if word == "busy" => "busy",
            AttemptStatus::Failed(_) => "error",
        }
    }
}

/// The process's one client (one connection pool) and the rules it holds to.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    rules: Arc<Destinations>,
}

impl Sender {
    pub fn new(
        rules: Destinations,
        connect_timeout: Duration,
        attempt_timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let rules = Arc::new(rules);
        let client = reqwest::Client::builder()
            .user_agent(concat!(
                "planfiles/",
                env!("CARGO_PKG_VERSION"),
                " (webhooks)"
            ))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(connect_timeout)
            .timeout(attempt_timeout)
            .pool_max_idle_per_host(32)
            .pool_idle_timeout(Duration::from_secs(30))
            .dns_resolver(rules.resolver())
            .build()?;
        Ok(Self { client, rules })
    }

    pub fn rules(&self) -> &Destinations {
        &self.rules
    }

    /// One attempt: refused before any byte is sent when the URL breaks a rule (or its name
    /// resolves only to refused addresses, which the resolver says).
    pub async fn send(
        &self,
        url: &WebhookUrl,
        secret: &WebhookSecret,
        message: &Message,
    ) -> Outcome {
        let started = Instant::now();
        if let Err(Refused(why)) = self.rules.check_url(url) {
            return failed("refused", Some(why), started);
        }
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let request = self
            .client
            .post(url.url().clone())
            .header("content-type", "application/json")
            .header("webhook-id", &message.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                signature(secret, &message.id, timestamp, &message.body),
            )
            .body(message.body.as_ref().clone());
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return from_error(&e, started),
        };
        let status = response.status();
        let delivered = status.is_success();
        let reply = match read_reply(response).await {
            Ok(reply) => reply,
            // A 2xx is the receiver's word that it has the event, whatever its body does.
            Err(_) if delivered => Vec::new(),
            Err(e) => return from_error(&e, started),
        };
        Outcome {
            delivered,
            status: AttemptStatus::Http(status.as_u16()),
            detail: (!delivered).then(|| detail(&String::from_utf8_lossy(&reply))),
            took: started.elapsed(),
        }
    }
}

/// At most [`MAX_REPLY`] bytes of the answer.
async fn read_reply(response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let room = MAX_REPLY - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_REPLY {
            break;
        }
    }
    Ok(body)
}

fn from_error(e: &reqwest::Error, started: Instant) -> Outcome {
    // The resolver's refusal is somewhere in the error's chain.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(Refused(why)) = s.downcast_ref::<Refused>() {
            return failed("refused", Some(why.clone()), started);
        }
        if let Some(busy @ super::lookup::LookupError::Busy) = s.downcast_ref() {
            return failed("busy", Some(busy.to_string()), started);
        }
        source = s.source();
    }
    let word = if e.is_timeout() { "timeout" } else { "error" };
    failed(word, Some(cause(e)), started)
}

/// Why an attempt got no answer, in one sentence for the deliveries log: what failed
/// (connecting, the time, the answer) and the root cause the system or TLS gave, without
/// the HTTP client's chain of wrappers or the URL (it may carry the receiver's token).
fn cause(e: &reqwest::Error) -> String {
    let mut root: Option<&(dyn std::error::Error + 'static)> = None;
    let mut next = std::error::Error::source(e);
    while let Some(s) = next {
        root = Some(s);
        next = s.source();
    }
    let what = if e.is_timeout() {
        "no answer within the attempt's time"
    } else if e.is_connect() {
        "could not connect to the receiver"
    } else if e.is_body() || e.is_decode() {
        "the receiver's answer broke off"
    } else {
        "the request failed"
    };
    match (root, e.url()) {
        (None, _) => what.to_owned(),
        (Some(root), Some(url)) => format!(
            "{what}: {}",
            root.to_string().replace(url.as_str(), "<url>")
        ),
        (Some(root), None) => format!("{what}: {root}"),
    }
}

fn failed(word: &str, detail_text: Option<String>, started: Instant) -> Outcome {
    Outcome {
        delivered: false,
        status: AttemptStatus::Failed(word.to_owned()),
        detail: detail_text.map(|d| detail(&d)),
        took: started.elapsed(),
    }
}

/// The start of a text, on one line, without control characters.
fn detail(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(DETAIL_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver that refuses the connection is said in one plain sentence: what failed and
    /// the system's reason, not the HTTP client's chain of wrappers, and not the URL.
    #[tokio::test]
    async fn a_failed_attempt_says_why_in_one_sentence() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let e = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/hook?token=abc"))
            .send()
            .await
            .unwrap_err();
        let said = cause(&e);
        assert!(
            said.starts_with("could not connect to the receiver: ")
                && said.to_lowercase().contains("connection refused"),
            "{said}"
        );
        for noise in [
            "error sending request",
            "client error",
            "token=abc",
            "127.0.0.1",
        ] {
            assert!(!said.contains(noise), "{said}");
        }
    }

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The specification's example (standard-webhooks, libraries' shared test vector).
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
