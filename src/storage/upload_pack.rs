//! Read-only git access for clone and fetch: `git upload-pack --stateless-rpc` over a tenant's
//! repository, the same program `git http-backend` runs.
use super::StorageError;
use crate::domain::TenantId;
use futures_util::Stream;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One upload-pack exchange with a tenant's repository.
#[derive(Debug)]
pub struct UploadPack {
    tenant: TenantId,
    repo: PathBuf,
    /// The client's `Git-Protocol` header (e.g. `version=2`), when it is well-formed.
    protocol: Option<String>,
    /// Turns to run `git upload-pack`, shared by the whole storage.
    turns: Arc<Semaphore>,
}

/// At most this many `git upload-pack` processes run at once per process; more clients wait.
pub(super) const MAX_UPLOAD_PACKS: usize = 8;

impl UploadPack {
    pub(super) fn new(
        tenant: TenantId,
        repo: PathBuf,
        protocol: Option<&str>,
        turns: Arc<Semaphore>,
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
            .env_remove("GIT_DIR")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &self.protocol {
            Some(p) => cmd.env("GIT_PROTOCOL", p),
            None => cmd.env_remove("GIT_PROTOCOL"),
        };
        cmd
    }

    fn spawn_error(&self, e: io::Error) -> StorageError {
        StorageError::io("start git upload-pack", &self.repo, e)
    }

    /// The ref advertisement (`info/refs?service=git-upload-pack`), without the service line.
    pub async fn advertise(&self) -> Result<Vec<u8>, StorageError> {
        let _turn = self.turn().await;
        let mut child = self
            .command(true)
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        drop(child.stdin.take());
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| self.spawn_error(e))?;
        if !out.status.success() {
            return Err(self.failed(out.status, &out.stderr));
        }
        Ok(out.stdout)
    }

    /// Answers one `git-upload-pack` request: feeds it to git and streams the pack back.
    pub async fn respond(
        self,
        request: Vec<u8>,
    ) -> Result<impl Stream<Item = io::Result<Vec<u8>>>, StorageError> {
        // Held until the whole pack is sent.
        let turn = self.turn().await;
        let mut child = self
            .command(false)
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let tenant = self.tenant.clone();
        // Feed the request while the answer is read, so that neither pipe fills up.
        tokio::spawn(async move {
            let _ = stdin.write_all(&request).await;
            drop(stdin);
            let mut text = Vec::new();
            let _ = stderr.read_to_end(&mut text).await;
            if !text.is_empty() {
                tracing::warn!(tenant = %tenant, stderr = %String::from_utf8_lossy(&text), "git upload-pack said");
            }
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        Ok(futures_util::stream::unfold(
            Some((child, stdout, turn)),
            |state| async move {
                let (mut child, mut stdout, turn) = state?;
                let mut buf = vec![0u8; 64 * 1024];
                match stdout.read(&mut buf).await {
                    Ok(0) => {
                        let _ = wait(&mut child).await;
                        None
                    }
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(buf), Some((child, stdout, turn))))
                    }
                    Err(e) => Some((Err(e), None)),
                }
            },
        ))
    }

    async fn turn(&self) -> OwnedSemaphorePermit {
        self.turns
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    fn failed(&self, status: std::process::ExitStatus, stderr: &[u8]) -> StorageError {
        StorageError::UploadPack {
            tenant: self.tenant.clone(),
            message: format!("{status}: {}", String::from_utf8_lossy(stderr).trim()),
        }
    }
}

async fn wait(child: &mut Child) -> io::Result<()> {
    child.wait().await.map(drop)
}
