//! Read-only git access for clone and fetch: `git upload-pack --stateless-rpc` over a tenant's
//! repository, the same program `git http-backend` runs, in a bounded turn and environment.
mod turns;
mod wants;

pub use turns::CloneTurns;
pub use wants::Malformed;

use crate::domain::{ObjectId, TenantId};
use crate::storage::StorageError;
use futures_util::Stream;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// At most this many `git upload-pack` processes run at once per process; more clients wait.
pub const CLONE_TURNS: usize = 8;
/// Bytes read from git at once, and chunks queued for the client: what a stalled client holds.
const CHUNK: usize = 64 * 1024;
const QUEUED_CHUNKS: usize = 2;
/// The most of git's stderr that is kept for the log.
const STDERR_LIMIT: usize = 4096;

/// Why an upload-pack exchange did not start.
#[derive(Debug, thiserror::Error)]
pub enum UploadPackError {
    #[error("tenant {tenant}: no clone turn within {}s", waited.as_secs())]
    Busy { tenant: TenantId, waited: Duration },
    /// A `want` that is neither a ref tip nor reachable from one; git's own words for it
    /// are `upload-pack: not our ref <id>`.
    #[error("tenant {tenant}: want {oid} is not a ref tip nor reachable from one")]
    NotOurRef { tenant: TenantId, oid: ObjectId },
    #[error("tenant {tenant}: {source}")]
    Malformed {
        tenant: TenantId,
        #[source]
        source: Malformed,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// One upload-pack exchange with a tenant's repository.
#[derive(Debug)]
pub struct UploadPack {
    tenant: TenantId,
    repo: PathBuf,
    /// The client's `Git-Protocol` header (e.g. `version=2`), when it is well-formed.
    protocol: Option<String>,
    /// Turns to run `git upload-pack`, shared by the whole storage.
    turns: Arc<CloneTurns>,
}

impl UploadPack {
    pub(in crate::storage) fn new(
        tenant: TenantId,
        repo: PathBuf,
        protocol: Option<&str>,
        turns: Arc<CloneTurns>,
    ) -> Self {
        let protocol = protocol
            .filter(|p| {
                !p.is_empty()
                    && p.len() <= 256
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b":=._-".contains(&b))
            })
            .map(str::to_owned);
        Self {
            tenant,
            repo,
            protocol,
            turns,
        }
    }

    /// True when the client asked for protocol version 2.
    pub fn is_v2(&self) -> bool {
        self.protocol
            .as_deref()
            .is_some_and(|p| p.split(':').any(|kv| kv == "version=2"))
    }

    /// `git upload-pack` with nothing of the service's environment, and no configuration but
    /// the repository's own: no secret, no `GIT_*` variable, no `~/.gitconfig`.
    fn command(&self, advertise: bool) -> Command {
        let mut cmd = Command::new("git");
        // The repository is the service's own; trust it whoever owns the data dir.
        cmd.arg("-c")
            .arg(format!("safe.directory={}", self.repo.display()))
            .arg("upload-pack")
            .arg("--stateless-rpc")
            .arg("--strict")
            .arg("--timeout=60");
        if advertise {
            cmd.arg("--advertise-refs");
        }
        cmd.arg(&self.repo)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .env("HOME", "/nonexistent")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(p) = &self.protocol {
            cmd.env("GIT_PROTOCOL", p);
        }
        cmd
    }

    fn spawn_error(&self, e: io::Error) -> StorageError {
        StorageError::io("start git upload-pack", &self.repo, e)
    }

    /// The ref advertisement (`info/refs?service=git-upload-pack`), without the service line.
    /// Takes a turn like a clone, and git gets the stall time to answer.
    pub async fn advertise(&self) -> Result<Vec<u8>, UploadPackError> {
        let _turn = self.turn().await?;
        let mut child = self
            .command(true)
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        drop(child.stdin.take());
        let out = tokio::time::timeout(self.turns.stall, child.wait_with_output())
            .await
            .map_err(|_| StorageError::UploadPack {
                tenant: self.tenant.clone(),
                message: format!(
                    "no ref advertisement within {}s",
                    self.turns.stall.as_secs()
                ),
            })?
            .map_err(|e| self.spawn_error(e))?;
        if !out.status.success() {
            return Err(self.failed(out.status, &out.stderr).into());
        }
        Ok(out.stdout)
    }

    /// Answers one `git-upload-pack` request: checks its wants, feeds it to git and streams
    /// the pack back. A task owns the turn and the process; it ends both when the client has
    /// accepted no bytes for the stall time, and the stream then ends in an error.
    pub async fn respond(
        self,
        request: Vec<u8>,
    ) -> Result<impl Stream<Item = io::Result<Vec<u8>>>, UploadPackError> {
        let turn = self.turn().await?;
        self.check_wants(&request).await?;
        let mut child = self
            .command(false)
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        // Request in, stderr out and the pack out all at once, so that no pipe fills up.
        tokio::spawn(async move {
            let _ = stdin.write_all(&request).await;
        });
        let stderr = tokio::spawn(read_capped(stderr));
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        let stalled = Arc::new(AtomicBool::new(false));
        let pump = Pump {
            tenant: self.tenant.clone(),
            stall: self.turns.stall,
            stalled: stalled.clone(),
        };
        tokio::spawn(async move {
            pump.run(child, stdout, stderr, tx).await;
            drop(turn);
        });
        Ok(receive(rx, stalled))
    }

    async fn turn(&self) -> Result<turns::Turn, UploadPackError> {
        self.turns
            .acquire(&self.tenant)
            .await
            .map_err(|no| UploadPackError::Busy {
                tenant: self.tenant.clone(),
                waited: no.waited,
            })
    }

    /// Every `want` must be a ref tip or reachable from one; looked up on the blocking pool.
    async fn check_wants(&self, request: &[u8]) -> Result<(), UploadPackError> {
        let wants = wants::parse(request).map_err(|source| UploadPackError::Malformed {
            tenant: self.tenant.clone(),
            source,
        })?;
        if wants.is_empty() {
            return Ok(());
        }
        let repo = self.repo.clone();
        let found = tokio::task::spawn_blocking(move || wants::first_unreachable(&repo, &wants))
            .await
            .map_err(|e| self.git_error(e.to_string()))?
            .map_err(|e| self.git_error(e.message().to_owned()))?;
        match found {
            None => Ok(()),
            Some(oid) => Err(UploadPackError::NotOurRef {
                tenant: self.tenant.clone(),
                oid,
            }),
        }
    }

    fn git_error(&self, message: String) -> StorageError {
        StorageError::Git {
            tenant: self.tenant.clone(),
            op: "check the wants of an upload-pack request",
            message,
            code: 0,
            class: 0,
        }
    }

    fn failed(&self, status: std::process::ExitStatus, stderr: &[u8]) -> StorageError {
        StorageError::UploadPack {
            tenant: self.tenant.clone(),
            message: format!("{status}: {}", escape(stderr)),
        }
    }
}

/// Moves the pack from git to the response, and gives up on a client that stops reading.
struct Pump {
    tenant: TenantId,
    stall: Duration,
    stalled: Arc<AtomicBool>,
}

impl Pump {
    async fn run(
        self,
        mut child: Child,
        mut stdout: impl AsyncRead + Unpin,
        stderr: tokio::task::JoinHandle<Vec<u8>>,
        tx: mpsc::Sender<io::Result<Vec<u8>>>,
    ) {
        loop {
            let mut buf = vec![0u8; CHUNK];
            let chunk = match stdout.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(buf)
                }
                Err(e) => Err(e),
            };
            let failed = chunk.is_err();
            match tokio::time::timeout(self.stall, tx.send(chunk)).await {
                Ok(Ok(())) if !failed => {}
                Ok(Ok(())) => break,
                // The client went away.
                Ok(Err(_)) => break,
                Err(_) => {
                    self.stalled.store(true, Ordering::SeqCst);
                    tracing::warn!(tenant = %self.tenant, stall_secs = self.stall.as_secs_f64(),
                        "clone stalled: the client accepted no bytes; git upload-pack stopped");
                    break;
                }
            }
        }
        // Ends git at once when it is not done (a client gone or stalled); reaps it otherwise.
        let status = match child.try_wait() {
            Ok(Some(status)) => Some(status),
            _ if self.stalled.load(Ordering::SeqCst) || tx.is_closed() => {
                let _ = child.kill().await;
                None
            }
            _ => child.wait().await.ok(),
        };
        let text = stderr.await.unwrap_or_default();
        match status {
            Some(s) if !s.success() => {
                tracing::warn!(tenant = %self.tenant, status = %s, stderr = %escape(&text), "git upload-pack failed")
            }
            _ if !text.is_empty() => {
                tracing::info!(tenant = %self.tenant, stderr = %escape(&text), "git upload-pack said")
            }
            _ => {}
        }
    }
}

/// The response body: the chunks as they come, then an error if the pump gave up on the client.
fn receive(
    rx: mpsc::Receiver<io::Result<Vec<u8>>>,
    stalled: Arc<AtomicBool>,
) -> impl Stream<Item = io::Result<Vec<u8>>> {
    futures_util::stream::unfold(Some(rx), move |rx| {
        let stalled = stalled.clone();
        async move {
            let mut rx = rx?;
            match rx.recv().await {
                Some(chunk) => Some((chunk, Some(rx))),
                None if stalled.load(Ordering::SeqCst) => Some((
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client accepted no bytes for the stall time",
                    )),
                    None,
                )),
                None => None,
            }
        }
    })
}

/// Reads all of a pipe, keeping its first [`STDERR_LIMIT`] bytes.
async fn read_capped(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = STDERR_LIMIT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    kept
}

/// git's words, on one line that cannot pass for another log record: line breaks, other
/// control characters and quotes escaped, and at most [`STDERR_LIMIT`] bytes of them.
fn escape(text: &[u8]) -> String {
    let text = &text[..text.len().min(STDERR_LIMIT)];
    String::from_utf8_lossy(text)
        .trim()
        .escape_debug()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn git_stderr_is_one_escaped_line_of_bounded_length() {
        let forged = b"fatal: x\n2026-01-01T00:00:00Z INFO planfiles: forged\r\x1b[2Jnext";
        let line = escape(forged);
        assert!(!line.chars().any(|c| c.is_control()), "{line}");
        assert!(
            line.contains("\\n2026-01-01") && line.contains("\\u{1b}"),
            "{line}"
        );
        assert!(escape(&vec![b'a'; 100_000]).len() <= super::STDERR_LIMIT);
    }
}
