//! One event stream: a task that turns a tenant's updates into Server-Sent Events, behind a bounded buffer.
//!
//! The task waits on the tenant's channel, the shutdown signal and the client's going away
//! (heartbeats come from the body itself); it costs no thread and no CPU while nothing
//! happens. Its events go through a channel of [`BUFFER`] chunks to the response body: a
//! client that accepts nothing for [`STALL`] while that buffer is full is dropped (its
//! connection is closed with an error when next written), and resumes with `Last-Event-ID`.
use super::problem::ApiError;
use super::schema::{FileEvent, HeadEvent, ProposalEvent};
use crate::domain::{CommitId, ObjectId};
use crate::events::{Events, Grant, Slot};
use crate::storage::{
    FileChange, HeadState, ProposalChange, ProposalChanges, Replay, ReplayPlan, Subscription,
    Update,
};
use actix_web::web::Bytes;
use actix_web::HttpRequest;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Chunks (one event each) buffered for a client before its stream waits.
const BUFFER: usize = 64;
/// How long a stream waits for a client that accepts nothing while its buffer is full.
const STALL: Duration = Duration::from_secs(5);
/// Commits of a replay read at once (one blocking task, under one replay turn).
pub const REPLAY_STEP: usize = 256;
/// `retry:` sent first: how long `EventSource` waits before it reconnects.
const RETRY_MS: u64 = 2_000;

/// The query of `GET /plans/events`.
#[derive(Debug, Default)]
pub struct EventsQuery {
    pub since: Option<String>,
    pub ticket: Option<String>,
}

impl EventsQuery {
    /// Other parameters are ignored; a token is never read from the query.
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        if query.is_empty() {
            return Ok(Self::default());
        }
        let pairs = super::query::pairs(query)?;
        Ok(Self {
            since: super::query::single(&pairs, "since")?.map(str::to_owned),
            ticket: super::query::single(&pairs, "ticket")?.map(str::to_owned),
        })
    }
}

/// Where a stream starts: at the head now, or after a commit the client has seen.
#[derive(Debug, Clone, Copy)]
pub enum Resume {
    Head,
    After(CommitId),
}

impl Resume {
    /// `Last-Event-ID` (what `EventSource` sends on reconnect) wins over `?since=`.
    pub fn from_request(req: &HttpRequest, query: EventsQuery) -> Result<Self, ApiError> {
        let header = req.headers().get("last-event-id");
        let (name, raw) = match (header, query.since) {
            (Some(h), _) => (
                "Last-Event-ID",
                h.to_str()
                    .map_err(|_| ApiError::InvalidQuery("Last-Event-ID is not text".into()))?
                    .to_owned(),
            ),
            (None, Some(s)) => ("since", s),
            (None, None) => return Ok(Resume::Head),
        };
        let id = ObjectId::parse(raw.trim())
            .map_err(|e| ApiError::InvalidQuery(format!("{name} {e}")))?;
        Ok(Resume::After(CommitId(id)))
    }
}

/// Where the stream's task starts: at the head of the subscription, or with a replay planned
/// (under a turn, before the response) from a resume point to `head`, and the last step of
/// the proposals sent before it (`records`, `None`: before the first).
pub enum Start {
    Head,
    After {
        head: Box<HeadState>,
        plan: ReplayPlan,
        records: Option<CommitId>,
    },
}

/// Starts the stream's task; returns the response body.
pub fn start(
    events: Events,
    grant: Grant,
    start: Start,
    subscription: Subscription,
    slot: Slot,
) -> Body {
    let (tx, rx) = mpsc::channel(BUFFER);
    let dropped = Arc::new(AtomicBool::new(false));
    let task = Task {
        events,
        grant,
        subscription,
        out: tx,
        dropped: dropped.clone(),
        _slot: slot,
    };
    let every = Duration::from_secs(task.events.config().heartbeat_secs);
    actix_web::rt::spawn(task.run(start));
    Body {
        rx,
        dropped,
        beat: Box::pin(tokio::time::sleep(every)),
        every,
    }
}

/// The response body: the task's chunks, and a `: keep-alive` comment after each
/// `heartbeat_secs` without one (made here, so that a heartbeat wakes only the connection,
/// not the stream's task); an error (the connection is closed) once the client was dropped
/// for not reading. A heartbeat written to a closed connection ends the response, which
/// ends the task and frees its slot.
pub struct Body {
    rx: mpsc::Receiver<Bytes>,
    dropped: Arc<AtomicBool>,
    beat: Pin<Box<tokio::time::Sleep>>,
    every: Duration,
}

impl futures_util::Stream for Body {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = match self.rx.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => Ok(chunk),
            Poll::Ready(None) if self.dropped.swap(false, Ordering::Relaxed) => {
                Err(std::io::Error::other("the client did not read its stream"))
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => match self.beat.as_mut().poll(cx) {
                Poll::Ready(()) => Ok(Bytes::from_static(b": keep-alive\n\n")),
                Poll::Pending => return Poll::Pending,
            },
        };
        let at = tokio::time::Instant::now() + self.every;
        self.beat.as_mut().reset(at);
        Poll::Ready(Some(next))
    }
}

/// Why a stream ends.
enum End {
    /// The client went away or was dropped, or the server is shutting down.
    Closed,
    Failed(String),
}

struct Task {
    events: Events,
    grant: Grant,
    subscription: Subscription,
    out: mpsc::Sender<Bytes>,
    dropped: Arc<AtomicBool>,
    _slot: Slot,
}

impl Task {
    async fn run(mut self, start: Start) {
        let tenant = self.grant.tenant.clone();
        match self.follow(start).await {
            End::Closed => {}
            End::Failed(e) => tracing::warn!(%tenant, error = %e, "an event stream ended"),
        }
    }

    async fn follow(&mut self, start: Start) -> End {
        let shutdown = self.events.shutting_down();
        tokio::pin!(shutdown);
        // The token's end (plus leeway): the stream ends with it; the client comes back with
        // a new token (or ticket) and its last event id.
        let left = self
            .grant
            .valid_until
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        let expired = tokio::time::sleep(left);
        tokio::pin!(expired);
        if let Err(end) = self.send(format!("retry: {RETRY_MS}\n\n")).await {
            return end;
        }
        let first = self.subscription.current();
        // The move began between the subscription and now: it was marked seen, so end here.
        if first.moving {
            let mut at = first.head.commit;
            return self.end_for_move(&mut at, &first).await;
        }
        let (mut at, mut records, head) = match start {
            Start::Head => (first.head.commit, first.records, first.head.clone()),
            Start::After {
                head,
                plan,
                records,
            } => {
                let head = *head;
                match self.resume(plan, records, head.commit).await {
                    Ok((at, records)) => (at, records, head),
                    Err(end) => return end,
                }
            }
        };
        if let Err(end) = self.send(self.head("head", &head)).await {
            return end;
        }
        loop {
            let update = tokio::select! {
                update = self.subscription.changed() => match update {
                    Some(update) => update,
                    None => return End::Failed("the change feed stopped".into()),
                },
                () = self.out.closed() => return End::Closed,
                () = &mut shutdown => return End::Closed,
                () = &mut expired => return End::Closed,
            };
            if update.moving {
                return self.end_for_move(&mut at, &update).await;
            }
            if let Err(end) = self.catch_up(&mut at, &mut records, &update).await {
                return end;
            }
        }
    }

    /// The tenant began to move to another shard: what the feed read before the move is
    /// sent, then `event: moving` (no id, so `Last-Event-ID` stays the last commit sent), and
    /// the stream ends. The client reconnects (through the router, after `retry`) and resumes
    /// where the tenant is served next, where commit ids are the same.
    async fn end_for_move(&mut self, at: &mut CommitId, update: &Update) -> End {
        if update.since == Some(*at) {
            if let Some(replay) = &update.replay {
                if let Err(end) = self.send_replay(at, replay).await {
                    return end;
                }
            }
        }
        match self
            .send(format!(
                "event: moving\ndata: {{\"retry_after\":{}}}\n\n",
                RETRY_MS / 1000
            ))
            .await
        {
            Ok(()) => End::Closed,
            Err(end) => end,
        }
    }

    /// The replay of a resume: the proposals' steps after `records` (each after the commits
    /// of `main` before it), then `main` up to `head`; where the stream then stands.
    async fn resume(
        &mut self,
        plan: ReplayPlan,
        mut records: Option<CommitId>,
        head: CommitId,
    ) -> Result<(CommitId, Option<CommitId>), End> {
        let mut at = match &plan {
            ReplayPlan::Steps(stops) => stops[0],
            ReplayPlan::Reset(reset) => reset.commit,
        };
        let start = at;
        if matches!(plan, ReplayPlan::Steps(_)) {
            self.send_steps(&mut at, &mut records).await?;
        }
        if at == start {
            self.run_plan(&mut at, plan).await?;
        } else {
            self.main_forward(&mut at, head).await?;
        }
        Ok((at, records))
    }

    /// Sends the proposals' steps after `records` up to the records' head, each after the
    /// commits of `main` that came before it (from `at` to the commit it names), and moves
    /// both along.
    async fn send_steps(
        &mut self,
        at: &mut CommitId,
        records: &mut Option<CommitId>,
    ) -> Result<(), End> {
        loop {
            let read = self.read_steps(*records).await?;
            for step in &read.steps {
                if let Some(main) = step.main {
                    self.main_forward(at, main).await?;
                }
                if self.grant.sees(&step.proposal) {
                    self.send(step_event(step)).await?;
                    self.events
                        .metrics()
                        .events_sent
                        .with_label_values(&["proposal"])
                        .inc();
                }
                *records = Some(step.id);
            }
            *records = read.through;
            if !read.more {
                return Ok(());
            }
        }
    }

    /// Sends `main`'s commits after `at` up to `to` when `to` is ahead of `at` on its line
    /// (else nothing: a step that names a commit the stream passed, or one off the line).
    async fn main_forward(&mut self, at: &mut CommitId, to: CommitId) -> Result<(), End> {
        if *at == to {
            return Ok(());
        }
        match self.plan(*at, to).await? {
            ReplayPlan::Steps(stops) => self.run_plan(at, ReplayPlan::Steps(stops)).await,
            ReplayPlan::Reset(_) => Ok(()),
        }
    }

    /// Sends what happened after `at` up to `update`'s head, and moves `at` there: the
    /// proposals' steps first when the records moved (each placed among `main`'s commits),
    /// then `main`: the update's own replay when it starts at `at` (read once for every
    /// stream), else a plan of this stream's own, read in steps under replay turns.
    async fn catch_up(
        &mut self,
        at: &mut CommitId,
        records: &mut Option<CommitId>,
        update: &Update,
    ) -> Result<(), End> {
        if update.records != *records {
            self.send_steps(at, records).await?;
        }
        let target = update.head.commit;
        if update.since == Some(*at) {
            if let Some(replay) = &update.replay {
                self.send_replay(at, replay).await?;
            }
        }
        if *at == target {
            return Ok(());
        }
        match self.plan(*at, target).await? {
            ReplayPlan::Steps(stops) => self.run_plan(at, ReplayPlan::Steps(stops)).await,
            ReplayPlan::Reset(head) => {
                // An update older than where the stream is (the feed lags a commit the
                // stream already sent): nothing to send, and no reset.
                if matches!(self.plan(target, *at).await?, ReplayPlan::Steps(_)) {
                    return Ok(());
                }
                self.run_plan(at, ReplayPlan::Reset(head)).await
            }
        }
    }

    /// Sends a planned replay, one step at a time, and moves `at` along.
    async fn run_plan(&mut self, at: &mut CommitId, plan: ReplayPlan) -> Result<(), End> {
        match plan {
            ReplayPlan::Reset(head) => {
                self.send(self.head("reset", &head)).await?;
                *at = head.commit;
            }
            ReplayPlan::Steps(stops) => {
                for pair in stops.windows(2) {
                    let replay = self.read_replay(pair[0], pair[1]).await?;
                    self.send_replay(at, &replay).await?;
                    if matches!(*replay, Replay::Reset(_)) {
                        // The history changed under the plan (plain git): from the reset on.
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends the changes of a replay the token may read (or its reset), and moves `at`.
    async fn send_replay(&mut self, at: &mut CommitId, replay: &Replay) -> Result<(), End> {
        match replay {
            Replay::Changes { changes, through } => {
                for change in changes {
                    if self.grant.can_read(change.file) {
                        self.send(file_event(change)).await?;
                        self.events
                            .metrics()
                            .events_sent
                            .with_label_values(&[change.file.label()])
                            .inc();
                    }
                }
                *at = *through;
            }
            Replay::Reset(head) => {
                self.send(self.head("reset", head)).await?;
                *at = head.commit;
            }
        }
        Ok(())
    }

    /// A replay turn of the tenant's, or the stream ends (its client resumes later).
    async fn turn(&self) -> Result<crate::gates::Turn, End> {
        self.events
            .replay_turn(&self.grant.tenant)
            .await
            .ok_or_else(|| End::Failed("no replay turn came in time; the client resumes".into()))
    }

    async fn plan(&self, from: CommitId, to: CommitId) -> Result<ReplayPlan, End> {
        let turn = self.turn().await?;
        let (storage, tenant) = (self.events.storage().clone(), self.grant.tenant.clone());
        self.blocking(move || {
            let _turn = turn;
            storage.replay_plan(&tenant, from, to, REPLAY_STEP)
        })
        .await
    }

    async fn read_replay(&self, from: CommitId, to: CommitId) -> Result<Arc<Replay>, End> {
        let turn = self.turn().await?;
        let (storage, tenant) = (self.events.storage().clone(), self.grant.tenant.clone());
        self.blocking(move || {
            let _turn = turn;
            storage.replay(&tenant, from, to, REPLAY_STEP).map(Arc::new)
        })
        .await
    }

    async fn read_steps(&self, after: Option<CommitId>) -> Result<ProposalChanges, End> {
        let turn = self.turn().await?;
        let (storage, tenant) = (self.events.storage().clone(), self.grant.tenant.clone());
        self.blocking(move || {
            let _turn = turn;
            storage.proposal_changes(&tenant, after, REPLAY_STEP)
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, crate::storage::StorageError> + Send + 'static,
    ) -> Result<T, End> {
        match actix_web::web::block(work).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(End::Failed(e.to_string())),
            Err(e) => Err(End::Failed(format!("a blocking task failed: {e}"))),
        }
    }

    fn head(&self, kind: &str, head: &HeadState) -> String {
        let data = HeadEvent {
            commit_sha: head.commit.to_string(),
            integration_file_sha: self.grant.integration.then(|| head.integration.to_string()),
            configuration_file_sha: self
                .grant
                .configuration
                .then(|| head.configuration.to_string()),
        };
        frame(kind, &head.commit, &data)
    }

    /// Queues a chunk; waits at most [`STALL`] for room.
    async fn send(&self, chunk: String) -> Result<(), End> {
        match self.out.send_timeout(Bytes::from(chunk), STALL).await {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => {
                self.dropped.store(true, Ordering::Relaxed);
                tracing::info!(tenant = %self.grant.tenant, "dropped an event stream whose client does not read it");
                Err(End::Closed)
            }
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(End::Closed),
        }
    }
}

fn file_event(change: &FileChange) -> String {
    let data = FileEvent::from_change(change);
    frame(data.file, &change.entry.commit, &data)
}

fn step_event(step: &ProposalChange) -> String {
    frame(
        step.kind.event(),
        &step.id,
        &ProposalEvent::from_change(step),
    )
}

/// One event in the format of the HTML standard: JSON has no raw newline, so one `data:`
/// line.
fn frame(kind: &str, id: &CommitId, data: &impl serde::Serialize) -> String {
    let json = serde_json::to_string(data).expect("event data serializes");
    format!("event: {kind}\nid: {id}\ndata: {json}\n\n")
}
