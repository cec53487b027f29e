//! One subscription's task: from its cursor to `main`'s head, each event in order, one attempt in flight; a 2xx moves the cursor (synced) before the next event; a failure waits its turn in the retry schedule, and after the last the subscription is `failing` until resumed.
use super::{Core, Message, TenantTurns, TICK};
use crate::domain::{CommitId, EventType, PlanFile, TenantId};
use crate::storage::{
    Attempt, CursorPosition, DeliveryCursor, DeliveryPlan, FileChange, Replay, StorageError,
    Webhook, WebhookState,
};
use rand::Rng as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Commits read from the history at a time.
const BATCH: usize = 64;
/// How long to wait when another process holds the cursor, or storage failed.
const BUSY: Duration = Duration::from_secs(2);
/// How long delivered attempts wait for the log, and how many at most (see [`Unlogged`]).
const LOG_EVERY: Duration = Duration::from_secs(1);
const LOG_LINES: usize = 64;

/// What a round of deliveries ended with.
enum Step {
    /// Every event up to the head is delivered.
    CaughtUp,
    /// Try again then (a retry, another holder, an error).
    Wait(Instant),
    /// The last retry failed.
    Failing,
}

/// The event being retried, how many attempts of it failed, since when, and when to try
/// again.
#[derive(Default)]
struct Retry {
    event: Option<String>,
    failures: u32,
    began: Option<SystemTime>,
    at: Option<Instant>,
}

/// Attempts not yet in the deliveries log. Delivered ones join the log with a cursor's move
/// once the oldest waited [`LOG_EVERY`] (or [`LOG_LINES`] wait), and at the end of each step
/// (at most 64 commits) while its cursor is still held; a failure at once. A subscription that
/// keeps up logs each event as it goes; a hundred catching up append once a step each instead
/// of dirtying a page of the volume per event, which the writes' `syncfs` rounds would flush.
#[derive(Default)]
struct Unlogged {
    attempts: Vec<Attempt>,
    since: Option<Instant>,
}

impl Unlogged {
    fn push(&mut self, attempt: Attempt) {
        self.since.get_or_insert_with(Instant::now);
        self.attempts.push(attempt);
    }

    /// What is due with a cursor's move (possibly nothing).
    fn due(&mut self) -> Vec<Attempt> {
        let due = self.attempts.len() >= LOG_LINES
            || self.since.is_some_and(|at| at.elapsed() >= LOG_EVERY);
        if due {
            self.take()
        } else {
            Vec::new()
        }
    }

    fn take(&mut self) -> Vec<Attempt> {
        self.since = None;
        std::mem::take(&mut self.attempts)
    }

    /// Appends everything held, in a trip to the blocking pool.
    async fn flush(&mut self, core: &Core, tenant: &TenantId, def: &Webhook) {
        if self.attempts.is_empty() {
            return;
        }
        let (t, id, attempts) = (tenant.clone(), def.id.clone(), self.take());
        core.blocking(move |s| s.log_webhook_attempts(&t, &id, &attempts))
            .await;
    }
}

pub(super) async fn follow_subscription(
    core: Arc<Core>,
    tenant: TenantId,
    per_tenant: Arc<TenantTurns>,
    mut def_rx: watch::Receiver<Webhook>,
    mut head_rx: watch::Receiver<Option<CommitId>>,
    mut records_rx: watch::Receiver<Option<CommitId>>,
) {
    let mut retry = Retry::default();
    let mut unlogged = Unlogged::default();
    // The head every event up to which is delivered: nothing to do until `main` moves.
    let mut reached = None;
    // The same for the proposals' steps: `main`'s head and the records' (an apply whose move
    // of `main` may still come is delivered once `main` moves).
    let mut steps_reached = None;
    loop {
        let def = def_rx.borrow_and_update().clone();
        let head = *head_rx.borrow_and_update();
        let records = *records_rx.borrow_and_update();
        if def.state == WebhookState::Failing {
            retry = Retry::default();
        }
        let due = retry.at.is_none_or(|at| Instant::now() >= at);
        let behind = head.filter(|h| reached != Some(*h));
        if let (WebhookState::Active, true, Some(head)) = (def.state, due, behind) {
            retry.at = None;
            let step = deliver(
                &core,
                &tenant,
                &def,
                head,
                (&per_tenant, &mut retry, &mut unlogged),
                &head_rx,
            )
            .await;
            unlogged.flush(&core, &tenant, &def).await;
            match step.unwrap_or_else(|s| s) {
                Step::CaughtUp => reached = Some(head),
                Step::Wait(at) => retry.at = Some(at),
                Step::Failing => failing(&core, &tenant, &def, &mut retry).await,
            }
            continue;
        }
        // `main`'s events delivered: the proposals' steps, in their order.
        let steps_behind = head
            .map(|h| (h, records))
            .filter(|at| EventType::any_proposal(&def.events) && steps_reached != Some(*at));
        if let (WebhookState::Active, true, Some(at)) = (def.state, due, steps_behind) {
            retry.at = None;
            let turn = (&*per_tenant, &mut retry, &mut unlogged);
            let step = deliver_steps(&core, &tenant, &def, records, turn, &head_rx).await;
            unlogged.flush(&core, &tenant, &def).await;
            match step.unwrap_or_else(|s| s) {
                Step::CaughtUp => steps_reached = Some(at),
                Step::Wait(at) => retry.at = Some(at),
                Step::Failing => failing(&core, &tenant, &def, &mut retry).await,
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
            changed = records_rx.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(sleep) => {}
        }
    }
}

/// The last retry failed: the subscription is marked `failing` (it waits for a resume).
async fn failing(core: &Core, tenant: &TenantId, def: &Webhook, retry: &mut Retry) {
    let (t, id) = (tenant.clone(), def.id.clone());
    let began = retry.began.unwrap_or_else(SystemTime::now);
    // A resume that comes before the new state is read starts a new streak.
    *retry = Retry::default();
    let set = core
        .blocking(move |s| s.mark_webhook_failing(&t, &id, began))
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

/// Delivers the proposals' steps from the subscription's steps cursor to `target` (the
/// records' head), those it asked for: one step of at most [`BATCH`] commits of the records
/// per claim of the cursor, each event's 2xx moving the cursor before the next.
async fn deliver_steps(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    target: Option<CommitId>,
    (per_tenant, retry, unlogged): Turn<'_>,
    head_rx: &watch::Receiver<Option<CommitId>>,
) -> Result<Step, Step> {
    let busy = || Step::Wait(Instant::now() + BUSY);
    loop {
        let (Ok(_tenant_claim), Ok(_claim)) = (
            per_tenant.claims.acquire().await,
            core.claims.acquire().await,
        ) else {
            return Err(busy());
        };
        let (t, id) = (tenant.clone(), def.id.clone());
        let mut cursor = claimed(
            tenant,
            def,
            core.blocking(move |s| s.claim_steps_cursor(&t, &id)).await,
        )?;
        let at = cursor.position().step();
        if at == target {
            return Ok(Step::CaughtUp);
        }
        let t = tenant.clone();
        let read = history(core, tenant, def, move |s| {
            s.proposal_changes(&t, at, BATCH)
        })
        .await?;
        for step in &read.steps {
            if !def.events.contains(&EventType::Proposal(step.kind)) {
                continue;
            }
            let message = Message::proposal_step(tenant, step);
            let after = CursorPosition::after_step(Some(step.id));
            let turn = (per_tenant, &mut *retry, &mut *unlogged);
            cursor = deliver_one(core, tenant, def, turn, head_rx, &message, cursor, after).await?;
        }
        let reached = CursorPosition::after_step(read.through);
        if cursor.position() != reached {
            advance(core, tenant, cursor, reached, unlogged.take()).await?;
        } else {
            unlogged.flush(core, tenant, def).await;
            drop(cursor);
        }
        if !read.more {
            return Ok(Step::CaughtUp);
        }
    }
}

/// A claim of a cursor as the delivery goes on with it: held by another process, a tenant
/// moving or a failure wait.
fn claimed(
    tenant: &TenantId,
    def: &Webhook,
    claim: Option<Result<Option<DeliveryCursor>, StorageError>>,
) -> Result<DeliveryCursor, Step> {
    let busy = || Step::Wait(Instant::now() + BUSY);
    match claim {
        Some(Ok(Some(cursor))) => Ok(cursor),
        // Another process delivers it now.
        Some(Ok(None)) => Err(busy()),
        Some(Err(StorageError::TenantMoving { .. } | StorageError::TenantMoved { .. })) => {
            Err(Step::Wait(Instant::now() + TICK))
        }
        Some(Err(e)) => {
            tracing::warn!(%tenant, webhook = %def.id, error = %e, "could not claim a webhook's cursor");
            Err(busy())
        }
        None => Err(busy()),
    }
}

/// Delivers from the cursor to `head` (or to where it must wait): one step of the plan (at
/// most [`BATCH`] commits) per claim of the cursor, so that claims (open files) take turns.
async fn deliver(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    head: CommitId,
    (per_tenant, retry, unlogged): Turn<'_>,
    head_rx: &watch::Receiver<Option<CommitId>>,
) -> Result<Step, Step> {
    let busy = || Step::Wait(Instant::now() + BUSY);
    // The plan's stops and the index of the next step's start.
    let mut plan: Option<(Vec<CommitId>, usize)> = None;
    loop {
        // The tenant's claims first: a tenant of slow receivers holds its share, not all.
        let (Ok(_tenant_claim), Ok(_claim)) = (
            per_tenant.claims.acquire().await,
            core.claims.acquire().await,
        ) else {
            return Err(busy());
        };
        let (t, id) = (tenant.clone(), def.id.clone());
        let mut cursor = claimed(
            tenant,
            def,
            core.blocking(move |s| s.claim_webhook_cursor(&t, &id))
                .await,
        )?;
        let at = cursor.position();
        if at == CursorPosition::at(head) {
            return Ok(Step::CaughtUp);
        }
        let planned = plan
            .as_ref()
            .filter(|(stops, i)| stops.get(*i) == Some(&at.through) && i + 1 < stops.len())
            .map(|(stops, i)| (stops[*i], stops[i + 1]));
        // A fresh plan comes with its first step's changes (one opening of the repository).
        let mut first = None;
        let (from, to) = match planned {
            Some(step) => step,
            None => {
                let t = tenant.clone();
                let (fresh, changes) = history(core, tenant, def, move |s| {
                    s.delivery_plan_and_first_step(&t, at.through, head, BATCH)
                })
                .await?;
                first = changes;
                match fresh {
                    DeliveryPlan::Steps(stops) if stops.len() > 1 => {
                        let step = (stops[0], stops[1]);
                        plan = Some((stops, 0));
                        step
                    }
                    DeliveryPlan::Steps(_) | DeliveryPlan::Behind => return Ok(Step::CaughtUp),
                    DeliveryPlan::Fork(meet) => {
                        let turn = (per_tenant, &mut *retry, &mut *unlogged);
                        reset(core, tenant, def, turn, cursor, at, meet, true).await?;
                        plan = None;
                        continue;
                    }
                    DeliveryPlan::Reset(now) => {
                        let turn = (per_tenant, &mut *retry, &mut *unlogged);
                        reset(core, tenant, def, turn, cursor, at, now, false).await?;
                        plan = None;
                        continue;
                    }
                }
            }
        };
        let t = tenant.clone();
        let replay = match first {
            Some(replay) => replay,
            None => history(core, tenant, def, move |s| s.replay(&t, from, to, BATCH)).await?,
        };
        let changes = match replay {
            Replay::Changes { changes, .. } => changes,
            // `main` moved meanwhile: plan again.
            Replay::Reset(_) => {
                plan = None;
                continue;
            }
        };
        // Only the events (their messages cut at 16 KiB) stay: a pushed commit's message can
        // be megabytes, and a step holds up to 64 commits.
        let partial_in_step = at
            .partial
            .is_some_and(|p| changes.iter().any(|c| c.entry.commit == p));
        let events = events_of(tenant, def, at, &changes);
        drop(changes);
        for (message, after) in events {
            let turn = (per_tenant, &mut *retry, &mut *unlogged);
            cursor = deliver_one(core, tenant, def, turn, head_rx, &message, cursor, after).await?;
        }
        // The step's end; a commit after it whose integration event went out stays marked.
        let reached = CursorPosition {
            through: to,
            partial: at.partial.filter(|_| !partial_in_step),
        };
        // The step's attempts reach the log while its cursor is held: a move's export, or
        // another process taking the subscription over, sees them.
        if cursor.position() != reached {
            advance(core, tenant, cursor, reached, unlogged.take()).await?;
        } else {
            unlogged.flush(core, tenant, def).await;
            drop(cursor);
        }
        // At the head it was asked for: caught up, without claiming the cursor again to see it.
        if reached == CursorPosition::at(head) {
            return Ok(Step::CaughtUp);
        }
        if let Some((_, i)) = plan.as_mut() {
            *i += 1;
        }
    }
}

/// One event of a claimed cursor: its turn of the CPU budget, then (unless the tenant began
/// to move: the shard it moves to goes on from the cursor) its attempt, and on a 2xx the
/// cursor moved to `after`.
#[allow(clippy::too_many_arguments)]
async fn deliver_one(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    (per_tenant, retry, unlogged): Turn<'_>,
    head_rx: &watch::Receiver<Option<CommitId>>,
    message: &Message,
    cursor: DeliveryCursor,
    after: CursorPosition,
) -> Result<DeliveryCursor, Step> {
    paced(core).await;
    if head_rx.borrow().is_none() {
        unlogged.flush(core, tenant, def).await;
        return Err(Step::Wait(Instant::now() + TICK));
    }
    attempt(
        core,
        tenant,
        def,
        (per_tenant, &mut *retry, &mut *unlogged),
        message,
    )
    .await?;
    advance(core, tenant, cursor, after, unlogged.due()).await
}

/// A read of the history on the blocking pool; a failure is logged and waits [`BUSY`].
async fn history<T: Send + 'static>(
    core: &Core,
    tenant: &TenantId,
    def: &Webhook,
    work: impl FnOnce(&crate::storage::Storage) -> Result<T, StorageError> + Send + 'static,
) -> Result<T, Step> {
    match core.blocking(work).await {
        Some(Ok(found)) => Ok(found),
        Some(Err(e)) => {
            tracing::warn!(%tenant, webhook = %def.id, error = %e, "could not read the history to deliver");
            Err(Step::Wait(Instant::now() + BUSY))
        }
        None => Err(Step::Wait(Instant::now() + BUSY)),
    }
}

/// `main` left the cursor's line: `main.reset` (when subscribed) names where deliveries go
/// on (`meet`: where the lines meet, or the head when they do not), and the cursor moves
/// there.
#[allow(clippy::too_many_arguments)]
async fn reset(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    (per_tenant, retry, unlogged): Turn<'_>,
    cursor: DeliveryCursor,
    at: CursorPosition,
    meet: crate::storage::HeadState,
    lines_meet: bool,
) -> Result<(), Step> {
    if !lines_meet {
        tracing::warn!(%tenant, webhook = %def.id, from = %at.through, to = %meet.commit, "main does not meet the webhook's cursor: deliveries go on from the head, the commits between are not delivered");
    }
    if def.events.contains(&EventType::MainReset) {
        paced(core).await;
        let message = Message::reset(tenant, &at.through, &meet);
        attempt(
            core,
            tenant,
            def,
            (per_tenant, retry, &mut *unlogged),
            &message,
        )
        .await?;
    }
    let to = CursorPosition::at(meet.commit);
    advance(core, tenant, cursor, to, unlogged.due()).await?;
    Ok(())
}

/// The subscription's events among `changes` (a step after `at`, oldest first), each with
/// where the cursor stands once it is delivered.
fn events_of(
    tenant: &TenantId,
    def: &Webhook,
    at: CursorPosition,
    changes: &[FileChange],
) -> Vec<(Message, CursorPosition)> {
    let mut events = Vec::new();
    let mut done = at.through;
    for (i, change) in changes.iter().enumerate() {
        let commit = change.entry.commit;
        let delivered_before = at.partial == Some(commit) && change.file == PlanFile::Integration;
        let last_of_commit = changes.get(i + 1).is_none_or(|n| n.entry.commit != commit);
        let after = if last_of_commit {
            CursorPosition::at(commit)
        } else {
            CursorPosition {
                through: done,
                partial: Some(commit),
            }
        };
        if !delivered_before && def.events.contains(&EventType::updated(change.file)) {
            events.push((Message::file_change(tenant, change), after));
        }
        if last_of_commit {
            done = commit;
        }
    }
    events
}

/// Waits for the dispatcher's CPU budget (in turn, then a second at most) before an attempt;
/// the caller looks at where the tenant is afterwards.
async fn paced(core: &Core) {
    let waited = core.budget.turn().await;
    if !waited.is_zero() {
        core.metrics
            .webhook_budget_wait
            .inc_by(waited.as_secs_f64());
    }
}

/// What an attempt works with: its tenant's turns, the event's retries, the log to come.
type Turn<'a> = (&'a TenantTurns, &'a mut Retry, &'a mut Unlogged);

/// One attempt of `message`, held for the log: `Ok` on a 2xx; else (logged at once) when to
/// try again, or `Failing`.
async fn attempt(
    core: &Arc<Core>,
    tenant: &TenantId,
    def: &Webhook,
    (per_tenant, retry, unlogged): Turn<'_>,
    message: &Message,
) -> Result<(), Step> {
    if retry.event.as_deref() != Some(message.id.as_str()) {
        *retry = Retry {
            event: Some(message.id.clone()),
            ..Retry::default()
        };
    }
    // The attempt's turns, in its tenant and in the process: held for this attempt only.
    let (Ok(_tenant_turn), Ok(_turn)) = (
        per_tenant.attempts.acquire().await,
        core.in_flight.acquire().await,
    ) else {
        return Err(Step::Wait(Instant::now() + BUSY));
    };
    let send = core.sender.send(&def.url, &def.secret, message);
    let outcome = super::lookup::within_share(per_tenant.lookups.clone(), send).await;
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
        at: crate::domain::timestamp::rfc3339(SystemTime::now()),
        detail: outcome.detail.clone(),
    };
    if outcome.delivered {
        if let Ok(lag) = SystemTime::now().duration_since(message.at) {
            core.metrics.webhook_lag.observe(lag.as_secs_f64());
        }
        *retry = Retry::default();
        // Logged with a cursor's move, in one trip to the blocking pool.
        unlogged.push(record);
        return Ok(());
    }
    let busy = outcome.is_busy();
    unlogged.push(record);
    unlogged.flush(core, tenant, def).await;
    if busy {
        // The process's name lookups were held by others: not the receiver's failure.
        return Err(Step::Wait(Instant::now() + BUSY));
    }
    retry.failures += 1;
    retry.began.get_or_insert_with(SystemTime::now);
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

/// Logs delivered attempts (when given) and moves the cursor durably, in one trip to the
/// blocking pool.
async fn advance(
    core: &Core,
    tenant: &TenantId,
    mut cursor: DeliveryCursor,
    to: CursorPosition,
    delivered: Vec<Attempt>,
) -> Result<DeliveryCursor, Step> {
    let (storage, t) = (core.storage.clone(), tenant.clone());
    let moved = tokio::task::spawn_blocking(move || {
        let result = storage.advance_webhook_cursor(&t, &mut cursor, to, &delivered);
        (cursor, result)
    })
    .await;
    match moved {
        Ok((cursor, Ok(()))) => Ok(cursor),
        // The cursor moved; the tenant began to move: the next shard goes on from it.
        Ok((_, Err(StorageError::TenantMoving { .. } | StorageError::TenantMoved { .. }))) => {
            Err(Step::Wait(Instant::now() + TICK))
        }
        // Removed meanwhile: its tenant's task stops this one.
        Ok((_, Err(StorageError::WebhookNotFound { .. }))) => {
            Err(Step::Wait(Instant::now() + TICK))
        }
        Ok((_, Err(e))) => {
            tracing::error!(%tenant, error = %e, "could not move a webhook's cursor: its event will be delivered again");
            Err(Step::Wait(Instant::now() + BUSY))
        }
        Err(_) => Err(Step::Wait(Instant::now() + BUSY)),
    }
}
