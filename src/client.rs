//! The client in the same binary (`planfiles get|put|edit|commit|log|diff|restore|watch|mirror`): one connection to a running service (`--addr`, a token from `--token-file` or `PLANFILES_TOKEN`), its answers mapped to the documented exit codes.
mod commands;
mod edit;
mod local;
mod mirror;
mod watch;

pub use commands::{commit, diff, get, log, put, restore, Guard, Output, Parts, WriteOptions};
pub use edit::edit;
pub use local::{read_input, read_token};
pub use mirror::mirror;
pub use watch::watch;

use crate::domain::PlanFile;
use reqwest::blocking::{RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

/// A line for the user on stderr. A closed stderr does not end a long-running command
/// (`watch`, `mirror`), as `eprintln!` would.
fn note(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "planfiles: {text}");
}

/// A commit or blob id as people read it: its first 10 digits.
fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}

/// Who made a version and what it says, as `log` and `watch` print it (a history entry and a
/// file event carry the same fields): `NAME <EMAIL> (pushed by P): SUBJECT [invalid]`.
fn described(e: &Value) -> String {
    let subject = e["message"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    let pushed = match e["pushed_by"]["name"].as_str() {
        Some(name) => format!(" (pushed by {name})"),
        None => String::new(),
    };
    let invalid = if e["status"] == "invalid" {
        " [invalid]"
    } else {
        ""
    };
    format!(
        "{} <{}>{pushed}: {subject}{invalid}",
        e["author"]["name"].as_str().unwrap_or(""),
        e["author"]["email"].as_str().unwrap_or("")
    )
}

/// Where the service is when `--addr` and `PLANFILES_ADDR` are not given.
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:8080";

/// Why a client command failed, and its exit code: 1 refused by the service for a reason the
/// user can act on (a conflict, a rule), 2 usage, 3 authentication or permission, 4 not
/// found, 5 the service unreachable or failing. The text is the service's `detail`.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service refused: its status, `detail` and, for a 422, each violation (one line
    /// each after the detail).
    #[error("{detail}{}", violation_lines(errors))]
    Refused {
        status: u16,
        detail: String,
        errors: Vec<Value>,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unreachable(String),
}

/// A 422's violations, one line each: the pointer in the file, the message, the line.
fn violation_lines(errors: &[Value]) -> String {
    errors
        .iter()
        .map(|v| {
            let pointer = v["pointer"].as_str().unwrap_or("");
            let at = match (v["line"].as_u64(), v["column"].as_u64()) {
                (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
                _ => String::new(),
            };
            format!("\n  {pointer}: {}{at}", v["message"].as_str().unwrap_or(""))
        })
        .collect()
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Refused { .. } => 1,
            ClientError::Usage(_) => 2,
            ClientError::Denied(_) => 3,
            ClientError::NotFound(_) => 4,
            ClientError::Unreachable(_) => 5,
        }
    }

    /// The error of an answer that is not a success: its problem's `detail`, by its status.
    fn from_answer(status: StatusCode, body: &str) -> Self {
        let problem: Option<Value> = serde_json::from_str(body).ok();
        let detail = problem
            .as_ref()
            .and_then(|p| p["detail"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("the service answered {status}"));
        match status.as_u16() {
            401 | 403 => ClientError::Denied(detail),
            404 => ClientError::NotFound(detail),
            s if s >= 500 => ClientError::Unreachable(detail),
            s => ClientError::Refused {
                status: s,
                detail,
                errors: problem
                    .as_ref()
                    .and_then(|p| p["errors"].as_array().cloned())
                    .unwrap_or_default(),
            },
        }
    }
}

/// A connection to the service: its address and the bearer token.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::blocking::Client,
    addr: String,
    token: String,
}

/// A file as stored: its text and blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub text: String,
    pub blob: String,
}

impl Client {
    /// A client of the service at `addr` with `token`. Reads wait at most `read_timeout` for
    /// the next bytes (a change stream's heartbeat comes every 15 s).
    pub fn new(addr: &str, token: &str, read_timeout: Duration) -> Result<Self, ClientError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(ClientError::Usage(
                "no token: give --token-file FILE or set PLANFILES_TOKEN (planfiles token mints one)"
                    .into(),
            ));
        }
        let http = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(read_timeout)
            .build()
            .map_err(|e| ClientError::Usage(format!("the HTTP client: {e}")))?;
        Ok(Self {
            http,
            addr: addr.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.addr))
            .bearer_auth(&self.token)
    }

    /// Sends `req`: the answer when it is a success, else its error.
    fn send(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        let res = req.send().map_err(|e| self.unreachable(&e))?;
        if res.status().is_success() {
            return Ok(res);
        }
        let status = res.status();
        let body = res.text().unwrap_or_default();
        Err(ClientError::from_answer(status, &body))
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let mut root: &dyn std::error::Error = e;
        while let Some(s) = root.source() {
            root = s;
        }
        ClientError::Unreachable(format!("cannot reach the service at {}: {root}", self.addr))
    }

    fn json(&self, req: RequestBuilder) -> Result<Value, ClientError> {
        self.send(req.header("accept", "application/json"))?
            .json()
            .map_err(|e| ClientError::Unreachable(format!("the service's answer: {e}")))
    }

    /// The file's stored text and blob id, at `main` or at `at` (a commit or a prefix).
    pub fn text(&self, file: PlanFile, at: Option<&str>) -> Result<Stored, ClientError> {
        let path = match at {
            Some(at) => format!("/plans/{}?ref={at}", file.part_name()),
            None => format!("/plans/{}", file.part_name()),
        };
        let res = self.send(
            self.request(reqwest::Method::GET, &path)
                .header("accept", "application/yaml"),
        )?;
        let blob = res
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_default();
        let text = res
            .text()
            .map_err(|e| ClientError::Unreachable(format!("the service's answer: {e}")))?;
        Ok(Stored { text, blob })
    }

    /// The API's JSON for a GET of `path`.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.json(self.request(reqwest::Method::GET, path))
    }

    /// A write: `body` sent to `path` with `method`, `If-Match` when given.
    pub fn write(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
        if_match: Option<&str>,
    ) -> Result<Value, ClientError> {
        let mut req = self.request(method, path).json(body);
        if let Some(blob) = if_match {
            req = req.header("if-match", format!("\"{blob}\""));
        }
        self.json(req)
    }

    /// The change stream from after `since` (or from `main` now).
    pub fn events(&self, since: Option<&str>) -> Result<Response, ClientError> {
        let mut req = self
            .request(reqwest::Method::GET, "/plans/events")
            .header("accept", "text/event-stream");
        if let Some(since) = since {
            req = req.header("last-event-id", since);
        }
        self.send(req)
    }

    /// The whole id of the commit `name` (a prefix of 7 or more digits, or a whole id) names.
    pub fn commit_id(&self, name: &str) -> Result<String, ClientError> {
        let body = self.get(&format!("/plans/integration-file?ref={name}"))?;
        body["commit_sha"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ClientError::Unreachable("the answer names no commit".into()))
    }
}
