//! One subscription's task: from its cursor to `main`'s head, each event in order, one attempt in flight; a 2xx moves the cursor (synced) before the next event; a failure waits its turn in the retry schedule, and after the last the subscription is `failing` until resumed.
use super::{Core, Message, TICK};
use crate::domain::{CommitId, EventType, PlanFile, TenantId};
use crate::storage::{
    Attempt, CursorPosition, DeliveryCursor, Replay, StorageError, Webhook, WebhookState,
};
use rand::Rng as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{watch, Semaphore};

/// Commits read from the history at a time.
const BATCH: usize = 64;
/// How long to wait when another process holds the cursor, or storage failed.
const BUSY: Duration = Duration::from_secs(2);

/// What a round of deliveries ended with.
enum Step {
    /// Every event up to the head is delivered.
    CaughtUp,
    /// Try again then (a retry, another holder, an error).
    Wait(Instant),
    /// The last retry failed.
    Failing,
}

/// The event being retried, and how many attempts of it failed.
#[derive(Default)]
struct Retry {
    event: Option<String>,
    failures: u32,
    at: Option<Instant>,
}

pub(super) async fn follow_subscription(
    core: Arc<Core>,
    tenant: TenantId,
    per_tenant: Arc<Semaphore>,
    mut def_rx: watch::Receiver<Webhook>,
    mut head_rx: watch::Receiver<Option<CommitId>>,
) {
    let mut retry = Retry::default();
    // The head every event up to which is delivered: nothing to do until `main` moves.
    let mut reached = None;
    loop {
        let def = def_rx.borrow_and_update().clone();
        let head = *head_rx.borrow_and_update();
        if def.state == WebhookState::Failing {
            retry = Retry::default();
        }
        let due = retry.at.is_none_or(|at| Instant::now() >= at);
        let behind = head.filter(|h| reached != Some(*h));
        if let (WebhookState::Active, true, Some(head)) = (def.state, due, behind) {
            retry.at = None;
            match deliver(
                &core,
                &tenant,
                &def,
                head,
                &per_tenant,
                &head_rx,
                &mut retry,
            )
            .await
            {
                Step::CaughtUp => reached = Some(head),
                Step::Wait(at) => retry.at = Some(at),
                Step::Failing => {
                    let (t, id) = (tenant.clone(), def.id.clone());
                    let set = core
                        .blocking(move |s| s.set_webhook_state(&t, &id, WebhookState::Failing))
                        .await;
                    match set {
                        Some(Ok(_)) => {
                            tracing::warn!(%tenant, webhook = %def.id, "webhook failing after its last retry: it waits for a resume");
                            // Its tenant's task reads the new state and sends it here.
                            retry.at = Some(Instant::now() + TICK);
                        }
                        other => {
                            tracing::warn!(%tenant, webhook = %def.id, error = ?other.map(|r| r.err()), "could not mark a webhook failing");
                            retry.at = Some(Instant::now() + BUSY);
                        }
                    }
                }
            }
            continue;
        }
        let sleep = retry
            .at
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
        tokio::select! {
            changed = def_rx.changed() => if changed.is_err() { return },
            changed = head_rx.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(sleep) => {}
        }
    }
}

/// Delivers from the cursor to `head` (or to where it must wait).
async fn deliver(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    head: CommitId,
    per_tenant: &Semaphore,
    head_rx: &watch::Receiver<Option<CommitId>>,
    retry: &mut Retry,
) -> Step {
    let busy = || Step::Wait(Instant::now() + BUSY);
    let Ok(_tenant_turn) = per_tenant.acquire().await else {
        return busy();
    };
    let Ok(_turn) = core.in_flight.acquire().await else {
        return busy();
    };
    let (t, id) = (tenant.clone(), def.id.clone());
    let mut cursor = match core
        .blocking(move |s| s.claim_webhook_cursor(&t, &id))
        .await
    {
        Some(Ok(Some(cursor))) => cursor,
        // Another process delivers it now.
        Some(Ok(None)) => return busy(),
        Some(Err(StorageError::TenantMoving { .. } | StorageError::TenantMoved { .. })) => {
            return Step::Wait(Instant::now() + TICK)
        }
        Some(Err(e)) => {
            tracing::warn!(%tenant, webhook = %def.id, error = %e, "could not claim a webhook's cursor");
            return busy();
        }
        None => return busy(),
    };
    loop {
        let at = cursor.position();
        if at == CursorPosition::at(head) {
            return Step::CaughtUp;
        }
        let t = tenant.clone();
        let replay = match core
            .blocking(move |s| s.replay(&t, at.through, head, BATCH))
            .await
        {
            Some(Ok(replay)) => replay,
            Some(Err(e)) => {
                tracing::warn!(%tenant, webhook = %def.id, error = %e, "could not read the history to deliver");
                return busy();
            }
            None => return busy(),
        };
        // `main` left the cursor's line: go on from where the lines meet (nothing of the new
        // line skipped), or from the head when they do not.
        let replay = match replay {
            Replay::Reset(head) => {
                let t = tenant.clone();
                match core
                    .blocking(move |s| s.fork_point(&t, at.through, head.commit))
                    .await
                {
                    Some(Ok(Some(fork))) => Replay::Reset(fork),
                    Some(Ok(None)) => Replay::Reset(head),
                    Some(Err(e)) => {
                        tracing::warn!(%tenant, webhook = %def.id, error = %e, "could not read the history to deliver");
                        return busy();
                    }
                    None => return busy(),
                }
            }
            changes => changes,
        };
        let (events, through) = events_of(tenant, def, at, &replay);
        for (message, after) in events {
            // The tenant began to move: the shard it moves to goes on from the cursor.
            if head_rx.borrow().is_none() {
                return Step::Wait(Instant::now() + TICK);
            }
            if let Err(step) = attempt(core, tenant, def, &message, retry).await {
                return step;
            }
            cursor = match advance(core, tenant, cursor, after).await {
                Ok(c) => c,
                Err(step) => return step,
            };
        }
        if cursor.position() != CursorPosition::at(through) {
            cursor = match advance(core, tenant, cursor, CursorPosition::at(through)).await {
                Ok(c) => c,
                Err(step) => return step,
            };
        }
    }
}

/// The subscription's events in a replay from `at`, each with where the cursor stands once
/// it is delivered; and the commit the replay reached.
fn events_of(
    tenant: &TenantId,
    def: &Webhook,
    at: CursorPosition,
    replay: &Replay,
) -> (Vec<(Message, CursorPosition)>, CommitId) {
    let wants = |kind: EventType| def.events.contains(&kind);
    match replay {
        Replay::Reset(head) => {
            let after = CursorPosition::at(head.commit);
            let events = wants(EventType::MainReset)
                .then(|| (Message::reset(tenant, &at.through, head), after))
                .into_iter()
                .collect();
            (events, head.commit)
        }
        Replay::Changes { changes, through } => {
            let mut events = Vec::new();
            let mut done = at.through;
            for (i, change) in changes.iter().enumerate() {
                let commit = change.entry.commit;
                let delivered_before =
                    at.partial == Some(commit) && change.file == PlanFile::Integration;
                let last_of_commit = changes.get(i + 1).is_none_or(|n| n.entry.commit != commit);
                let after = if last_of_commit {
                    CursorPosition::at(commit)
                } else {
                    CursorPosition {
                        through: done,
                        partial: Some(commit),
                    }
                };
                if !delivered_before && wants(EventType::updated(change.file)) {
                    events.push((Message::file_change(tenant, change), after));
                }
                if last_of_commit {
                    done = commit;
                }
            }
            (events, *through)
        }
    }
}

/// One attempt of `message`: `Ok` on a 2xx; else when to try again, or `Failing`.
async fn attempt(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    message: &Message,
    retry: &mut Retry,
) -> Result<(), Step> {
    if retry.event.as_deref() != Some(message.id.as_str()) {
        *retry = Retry {
            event: Some(message.id.clone()),
            ..Retry::default()
        };
    }
    let outcome = core.sender.send(&def.url, &def.secret, message).await;
    core.metrics
        .webhook_attempts
        .with_label_values(&[outcome.label()])
        .inc();
    let record = Attempt {
        webhook_id: message.id.clone(),
        kind: message.kind.as_str().to_owned(),
        commit_sha: message.commit.clone(),
        attempt: retry.failures + 1,
        status: outcome.status.clone(),
        duration_ms: outcome.took.as_millis() as u64,
        at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        detail: outcome.detail.clone(),
    };
    let (t, id) = (tenant.clone(), def.id.clone());
    core.blocking(move |s| s.log_webhook_attempt(&t, &id, &record))
        .await;
    if outcome.delivered {
        if let Ok(lag) = SystemTime::now().duration_since(message.at) {
            core.metrics.webhook_lag.observe(lag.as_secs_f64());
        }
        *retry = Retry::default();
        return Ok(());
    }
    retry.failures += 1;
    match core
        .config
        .retry_schedule_secs
        .get(retry.failures as usize - 1)
    {
        Some(&secs) => {
            let jitter = rand::rng().random_range(0.9..=1.1);
            Err(Step::Wait(
                Instant::now() + Duration::from_secs_f64(secs as f64 * jitter),
            ))
        }
        None => Err(Step::Failing),
    }
}

/// Moves the cursor durably, on the blocking pool.
async fn advance(
    core: &Core,
    tenant: &TenantId,
    mut cursor: DeliveryCursor,
    to: CursorPosition,
) -> Result<DeliveryCursor, Step> {
    let (storage, t) = (core.storage.clone(), tenant.clone());
    let moved = tokio::task::spawn_blocking(move || {
        let result = storage.advance_webhook_cursor(&t, &mut cursor, to);
        (cursor, result)
    })
    .await;
    match moved {
        Ok((cursor, Ok(()))) => Ok(cursor),
        Ok((_, Err(e))) => {
            tracing::error!(%tenant, error = %e, "could not move a webhook's cursor: its event will be delivered again");
            Err(Step::Wait(Instant::now() + BUSY))
        }
        Err(_) => Err(Step::Wait(Instant::now() + BUSY)),
    }
}
