//! Each subscription's place on the proposals' records line: a second cursor table (`webhooks/proposal-cursors`, the format of `cursor.rs`), so that a subscription's steps and its commits of `main` move on apart, each durably and in order.
use super::cursor::{self, CursorPosition, DeliveryCursor};
use super::file::{dir, lock, not_found, read_all};
use crate::domain::{TenantId, WebhookId};
use crate::storage::placement::Access;
use crate::storage::{Storage, StorageError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The second table, beside the cursors of `main`.
const STEP_CURSORS: &str = "proposal-cursors";

pub(super) fn steps_table(repo: &Path) -> PathBuf {
    dir(repo).join(STEP_CURSORS)
}

impl Storage {
    /// Where on the records line a subscription starts: the records' head now.
    pub(super) fn steps_start(&self, tenant: &TenantId) -> Result<CursorPosition, StorageError> {
        Ok(CursorPosition::after_step(self.records_head(tenant)?))
    }

    /// The cursor of a subscription's proposal steps, held by this caller alone (as
    /// [`Storage::claim_webhook_cursor`]); `None` while another holder has it. A subscription
    /// made by an earlier version gets one at the records' head now.
    pub fn claim_steps_cursor(
        &self,
        tenant: &TenantId,
        id: &WebhookId,
    ) -> Result<Option<DeliveryCursor>, StorageError> {
        let path = self.locate(tenant, Access::Follow)?;
        let file = steps_table(&path);
        let err = |e| StorageError::io("claim a webhook's steps cursor", &file, e);
        match DeliveryCursor::claim(&file, id) {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            other => return other.map_err(err),
        }
        let _lock = lock(&path)?;
        let live: Vec<WebhookId> = read_all(tenant, &path)?.into_iter().map(|h| h.id).collect();
        if !live.contains(id) {
            return Err(not_found(tenant, id));
        }
        match DeliveryCursor::claim(&file, id) {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            other => return other.map_err(err),
        }
        cursor::insert(&file, id, self.steps_start(tenant)?, &live).map_err(err)?;
        DeliveryCursor::claim(&file, id).map_err(err)
    }
}
