//! A tenant's webhook subscriptions, kept in its repository folder beside git's files (`webhooks/`: never in an object or a ref, so no clone carries a secret) and moved with it: the subscriptions file, their delivery cursors (a table of `main`'s, one of the proposals' steps) and each one's deliveries log.
mod bundle;
mod cursor;
mod file;
mod log;
mod steps;

use super::disk;
use super::placement::{self, Access};
use super::{Storage, StorageError};
use crate::domain::{EventType, TenantId, WebhookId, WebhookSecret, WebhookUrl};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(in crate::storage) use bundle::install;
pub use bundle::{BundledCursor, WebhookBundle, MOVED_ATTEMPTS};
pub use cursor::{CursorPosition, DeliveryCursor};
use file::{
    adopt_legacy_cursors, dir, lock, not_found, read_all, served_here, table, unix_ms, write_all,
};
pub use log::{Attempt, AttemptStatus};

/// The folder in a repository.
const DIR: &str = "webhooks";
/// The subscriptions, one JSON document (mode 0600).
const FILE: &str = "subscriptions.json";
/// Taken (`flock`) around every change of the subscriptions and by a move's export.
const LOCK: &str = "lock";
/// The delivery cursors, one record per subscription (`cursor.rs`).
const CURSORS: &str = "cursors";

/// A subscription as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub id: WebhookId,
    pub url: WebhookUrl,
    /// Sorted, without repeats, never empty.
    pub events: Vec<EventType>,
    pub description: Option<String>,
    pub secret: WebhookSecret,
    pub state: WebhookState,
    pub created: SystemTime,
    /// When it was last resumed (Unix milliseconds; 0: never): a failure streak that began
    /// before it does not make it `failing`.
    pub resumed_ms: u64,
    /// The `Idempotency-Key` it was made with, if any.
    pub key: Option<WebhookKey>,
}

/// `active`, or `failing` after the last retry (it waits for a resume).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookState {
    Active,
    Failing,
}

impl WebhookState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Failing => "failing",
        }
    }
}

/// What a new subscription asks for.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub url: WebhookUrl,
    pub events: Vec<EventType>,
    pub description: Option<String>,
    /// The request's `Idempotency-Key` and its fingerprint: a retry within a day answers
    /// the subscription it made.
    pub key: Option<WebhookKey>,
}

/// An `Idempotency-Key` of a subscription's creation and the fingerprint of its request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookKey {
    pub key: String,
    pub fingerprint: String,
}

/// How long a creation's `Idempotency-Key` is remembered.
const KEY_KEPT: Duration = Duration::from_secs(86_400);

/// When the subscriptions file last changed (a reader reloads it when this differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhooksStamp {
    modified: SystemTime,
    len: u64,
    inode: u64,
}

impl Storage {
    /// The tenant's subscriptions (wherever it is read: while it moves too).
    pub fn webhooks(&self, tenant: &TenantId) -> Result<Vec<Webhook>, StorageError> {
        let path = self.locate(tenant, Access::Read)?;
        read_all(tenant, &path)
    }

    /// Adds a subscription whose cursor starts at `main`'s head now (it is told of what
    /// comes after); with a key that made one within a day, that one (true: a replay). At
    /// most `limit` per tenant. Refused while the tenant moves: the
    /// placement is read again under the subscriptions' lock, which a move's export takes.
    pub fn add_webhook(
        &self,
        tenant: &TenantId,
        new: NewWebhook,
        limit: usize,
    ) -> Result<(Webhook, bool), StorageError> {
        let path = self.locate(tenant, Access::Follow)?;
        let _lock = lock(&path)?;
        served_here(tenant, &path)?;
        let mut all = read_all(tenant, &path)?;
        if let Some(asked) = &new.key {
            let recent = |h: &&Webhook| {
                SystemTime::now()
                    .duration_since(h.created)
                    .is_ok_and(|age| age < KEY_KEPT)
            };
            let earlier = all
                .iter()
                .filter(recent)
                .find(|h| h.key.as_ref().is_some_and(|k| k.key == asked.key));
            if let Some(earlier) = earlier {
                return match earlier.key.as_ref() {
                    Some(k) if k.fingerprint == asked.fingerprint => Ok((earlier.clone(), true)),
                    _ => Err(StorageError::WebhookKeyReused {
                        tenant: tenant.clone(),
                        id: earlier.id.clone(),
                    }),
                };
            }
        }
        if all.len() >= limit {
            return Err(StorageError::WebhookLimit {
                tenant: tenant.clone(),
                limit,
            });
        }
        let head = self.head_state(tenant)?.commit;
        let hook = Webhook {
            id: WebhookId::generate(),
            url: new.url,
            events: new.events,
            description: new.description,
            secret: WebhookSecret::generate(),
            state: WebhookState::Active,
            resumed_ms: 0,
            key: new.key,
            // Whole seconds: as it is stored and shown.
            created: UNIX_EPOCH
                + Duration::from_secs(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_secs(),
                ),
        };
        let live: Vec<WebhookId> = all.iter().map(|h| h.id.clone()).collect();
        adopt_legacy_cursors(tenant, &path)?;
        cursor::insert(&table(&path), &hook.id, CursorPosition::at(head), &live)
            .map_err(|e| StorageError::io("create a webhook's cursor", &path, e))?;
        cursor::insert(
            &steps::steps_table(&path),
            &hook.id,
            self.steps_start(tenant)?,
            &live,
        )
        .map_err(|e| StorageError::io("create a webhook's steps cursor", &path, e))?;
        all.push(hook.clone());
        write_all(&path, &all)?;
        Ok((hook, false))
    }

    /// Removes a subscription, its cursor and its log.
    pub fn remove_webhook(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), StorageError> {
        let path = self.locate(tenant, Access::Follow)?;
        let _lock = lock(&path)?;
        served_here(tenant, &path)?;
        let mut all = read_all(tenant, &path)?;
        let before = all.len();
        all.retain(|h| &h.id != id);
        if all.len() == before {
            return Err(not_found(tenant, id));
        }
        adopt_legacy_cursors(tenant, &path)?;
        write_all(&path, &all)?;
        cursor::remove(&table(&path), id)
            .map_err(|e| StorageError::io("remove a webhook's cursor", &path, e))?;
        cursor::remove(&steps::steps_table(&path), id)
            .map_err(|e| StorageError::io("remove a webhook's steps cursor", &path, e))?;
        log::remove(&dir(&path), id);
        Ok(())
    }

    /// Resumes a subscription: `active`, and a failure streak under way starts over.
    pub fn resume_webhook(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Webhook, StorageError> {
        self.change_webhook(tenant, id, |hook| {
            hook.state = WebhookState::Active;
            hook.resumed_ms = unix_ms(SystemTime::now());
        })
    }

    /// Marks a subscription `failing` after the last retry of a streak of failures that
    /// began at `streak_began`, unless it was resumed since (a resume wins the race).
    pub fn mark_webhook_failing(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        streak_began: SystemTime,
    ) -> Result<Webhook, StorageError> {
        self.change_webhook(tenant, id, |hook| {
            if hook.resumed_ms < unix_ms(streak_began) {
                hook.state = WebhookState::Failing;
            }
        })
    }

    /// One subscription changed under the lock, where the tenant takes writes.
    fn change_webhook(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        change: impl FnOnce(&mut Webhook),
    ) -> Result<Webhook, StorageError> {
        let path = self.locate(tenant, Access::Follow)?;
        let _lock = lock(&path)?;
        served_here(tenant, &path)?;
        let mut all = read_all(tenant, &path)?;
        let hook = all
            .iter_mut()
            .find(|h| &h.id == id)
            .ok_or_else(|| not_found(tenant, id))?;
        change(hook);
        let hook = hook.clone();
        write_all(&path, &all)?;
        Ok(hook)
    }

    /// Makes `main` up to `to` durable (see `TenantRepo::settle`) before its commits are
    /// announced: `from` is the head settled before, whose line need not be synced again.
    pub fn settle(
        &self,
        tenant: &TenantId,
        from: Option<crate::domain::CommitId>,
        to: crate::domain::CommitId,
    ) -> Result<(), StorageError> {
        if let Some(group) = self.sync.as_deref() {
            // Group commit: one shared `syncfs`, no repository to open (once per new head).
            let path = self.locate(tenant, Access::Read)?;
            return group
                .sync_patiently(super::disk::durable::PATIENCE)
                .map_err(|e| StorageError::io("sync the data volume", &path, e));
        }
        self.read_repo(tenant, Access::Read)?.settle(from, to)
    }

    /// When the tenant's subscriptions file last changed; `None` without one.
    pub fn webhooks_stamp(&self, tenant: &TenantId) -> Option<WebhooksStamp> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(dir(&self.repo_path(tenant)).join(FILE)).ok()?;
        Some(WebhooksStamp {
            modified: meta.modified().ok()?,
            len: meta.len(),
            inode: meta.ino(),
        })
    }

    /// The tenants of this data dir with a subscriptions file.
    pub fn tenants_with_webhooks(&self) -> Vec<TenantId> {
        let Ok(entries) = std::fs::read_dir(&self.tenants_dir) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name();
                let tenant = TenantId::parse(name.to_str()?.strip_suffix(".git")?).ok()?;
                e.path().join(DIR).join(FILE).is_file().then_some(tenant)
            })
            .collect()
    }

    /// The cursor of a subscription, held by this caller alone (an OS lock on its file, in any
    /// process); `None` while another holder has it. Only while the tenant takes writes here.
    pub fn claim_webhook_cursor(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Option<DeliveryCursor>, StorageError> {
        let path = self.locate(tenant, Access::Follow)?;
        let file = table(&path);
        if !file.exists() {
            // Made by an earlier version: its cursor files become the table.
            let _lock = lock(&path)?;
            adopt_legacy_cursors(tenant, &path)?;
        }
        match DeliveryCursor::claim(&file, id) {
            Ok(c) => Ok(c),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_found(tenant, id)),
            Err(e) => Err(StorageError::io("claim a webhook's cursor", &file, e)),
        }
    }

    /// Moves a claimed cursor durably: its slot written, then a shared `syncfs` in group
    /// commit (subscriptions moving at once, and the writes, share the rounds) or its own
    /// `fdatasync`. `delivered` goes to the subscription's log once the move is written (the
    /// move's own look at its record stands for the log's check that it was not removed).
    pub fn advance_webhook_cursor(
        &self,
        tenant: &TenantId,
        cursor: &mut DeliveryCursor,
        to: CursorPosition,
        delivered: &[Attempt],
    ) -> Result<(), StorageError> {
        let err = |e| StorageError::io("move a webhook's cursor", &self.repo_path(tenant), e);
        cursor
            .advance(to, self.sync.is_none())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => not_found(tenant, cursor.id()),
                _ => err(e),
            })?;
        self.append_log(tenant, cursor.id(), delivered);
        if let Some(group) = &self.sync {
            group
                .sync_patiently(super::disk::durable::PATIENCE)
                .map_err(err)?;
        }
        // The tenant began to move: no more deliveries here (the move reads this cursor).
        served_here(tenant, &self.repo_path(tenant))
    }

    /// Records delivery attempts in the subscription's log, in one write (not synced: a
    /// log, not a promise; the cursor is the promise).
    pub fn log_webhook_attempts(&self, tenant: &TenantId, id: &WebhookId, attempts: &[Attempt]) {
        let repo = self.repo_path(tenant);
        if attempts.is_empty() {
            return;
        }
        // An attempt that raced the subscription's removal leaves no log behind it.
        if cursor::holds(&table(&repo), id) {
            self.append_log(tenant, id, attempts);
        }
    }

    fn append_log(&self, tenant: &TenantId, id: &WebhookId, attempts: &[Attempt]) {
        let dir = dir(&self.repo_path(tenant));
        if let Err(e) = log::append(&dir, id, attempts) {
            tracing::warn!(%tenant, webhook = %id, error = %e, "could not log a webhook delivery");
        }
    }

    /// The subscription's latest attempts, newest first, at most `limit`.
    pub fn webhook_attempts(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
        limit: usize,
    ) -> Result<Vec<Attempt>, StorageError> {
        let path = self.locate(tenant, Access::Read)?;
        if !read_all(tenant, &path)?.iter().any(|h| &h.id == id) {
            return Err(not_found(tenant, id));
        }
        log::recent(&dir(&path), id, limit)
            .map_err(|e| StorageError::io("read a webhook's deliveries", &path, e))
    }
}

#[cfg(test)]
mod tests;
