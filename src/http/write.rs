//! The write pipeline every write goes through (both PUTs, `POST /plans/commits`, the restores): one intake in the contract's order, a plan parsed from the body, one run in the tenant's turn, one answer.
mod answer;
mod options;

pub(super) use answer::Shape;

use super::budget::BodyTurn;
use super::common::{blocking, cpu, require, Reply};
use super::problem::ApiError;
use super::AppState;
use crate::auth::Principal;
use crate::domain::PlanFile;
use crate::plans::writer::Committed;
use crate::plans::{Part, Planned};
use crate::storage::{CommitRequest, IdempotencyRecord, StorageError, TenantInfo};
use actix_web::{web, HttpRequest};
use options::WriteOptions;

/// A write's request, read but not parsed yet: its tenant, body and options. Holds the body's
/// share of the budget until [`Intake::parse`].
pub(super) struct Intake {
    pub tenant: TenantInfo,
    bytes: web::BytesMut,
    options: WriteOptions,
    record: Option<IdempotencyRecord>,
    turn: BodyTurn,
}

/// What a write asks for besides its files: a dry run, and the idempotency record.
pub(super) struct Meta {
    pub dry_run: bool,
    pub record: Option<IdempotencyRecord>,
}

impl Intake {
    /// Parses the body with `parse` (on the blocking pool when it is large), then gives the
    /// body's share of the budget back, before the write waits for its turn.
    pub async fn parse<T: Send + 'static, E: Into<ApiError>>(
        self,
        parse: impl FnOnce(&[u8]) -> Result<T, E> + Send + 'static,
    ) -> Result<(T, Meta), ApiError> {
        let Intake {
            bytes,
            options,
            record,
            turn,
            ..
        } = self;
        let parsed = cpu(bytes.len(), move || parse(&bytes).map_err(Into::into)).await?;
        drop(turn);
        Ok((
            parsed,
            Meta {
                dry_run: options.dry_run,
                record,
            },
        ))
    }
}

impl AppState {
    /// `e`, counted in `schema_refusals_total` when a validator refused the write.
    pub(super) fn counted(&self, e: ApiError) -> ApiError {
        for file in e.schema_refusal() {
            self.metrics
                .schema_refusals
                .with_label_values(&[file.label()])
                .inc();
        }
        e
    }

    /// What every write does before its body is parsed, in the contract's order: load
    /// shedding when the tenant's queue is full (503, before the body is read), the tenant
    /// (404), the write permission of `file` (403), a turn of the body budget, the body (415,
    /// 413, 408), then the query and headers (400 `invalid_query`,
    /// `invalid_idempotency_key`).
    pub(super) async fn intake(
        &self,
        who: &Principal,
        req: &HttpRequest,
        payload: web::Payload,
        file: PlanFile,
    ) -> Result<Intake, ApiError> {
        // Load shedding first: a tenant with queued writes exists, so refusing here keeps the
        // order of checks for everyone else, and a flood of writes costs no disk read each.
        if let Err(e) = self.shed_write(who, file).await {
            return Err(self.unread(payload, e).await);
        }
        let tenant = self.tenant(who, file).await?;
        require(who.can_write(file), file.write_permission())?;
        let turn = match self.admit(req, who.tenant(), self.body_limit).await {
            Ok(turn) => turn,
            Err(e) => return Err(self.unread(payload, e).await),
        };
        let bytes = self.read_body(req, payload).await?;
        let options = WriteOptions::from_request(req)?;
        let record = options.record(&self.storage, req, &bytes);
        Ok(Intake {
            tenant,
            bytes,
            options,
            record,
            turn,
        })
    }

    /// Runs a planned write in the tenant's turn and answers it.
    pub(super) async fn run_write(
        &self,
        who: &Principal,
        req: &HttpRequest,
        planned: Planned,
        meta: Meta,
        shape: Shape,
    ) -> Reply {
        let request_id = super::common::request_id(req);
        let files: Vec<PlanFile> = planned.parts.iter().map(|p| p.doc.file()).collect();
        let first = files[0];
        let commit = CommitRequest {
            changes: planned.parts.iter().map(Part::change).collect(),
            subject: planned.subject,
            restored_from: planned.restored_from,
            idempotency: meta.record,
            dry_run: meta.dry_run,
            author: who.author(),
            request_id,
            not_after: Some(who.valid_until()),
        };
        let committed = self
            .writers
            .commit(who.tenant(), commit)
            .await
            .map_err(|e| answer::write_error(e, shape, first))?;
        match committed {
            Committed::Replayed(hit) => {
                let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
                let at = hit.commit;
                let read = blocking(
                    move || {
                        files
                            .into_iter()
                            .map(|file| {
                                let snap = storage.read_at(&tenant, file, at)?;
                                Ok((file, snap.bytes, snap.blob))
                            })
                            .collect::<Result<Vec<_>, StorageError>>()
                    },
                    first,
                )
                .await?;
                Ok(answer::replay(at, read, shape))
            }
            Committed::Written(outcome) => {
                let docs = planned.parts.into_iter().map(|p| p.doc).collect();
                let answer = if meta.dry_run {
                    // The patch parses the stored file and diffs both: CPU work, off the
                    // worker, under one of the tenant's render turns.
                    let turn = self.render_turn(who.tenant()).await?;
                    web::block(move || {
                        let _turn = turn;
                        answer::render(docs, outcome, shape)
                    })
                    .await
                    .map_err(|e| ApiError::Internal(format!("the render task failed: {e}")))?
                } else {
                    answer::render(docs, outcome, shape)
                };
                Ok(answer.respond())
            }
        }
    }
}
