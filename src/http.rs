//! The HTTP service: application state, routes and the server (actix-web).
mod admin;
mod body;
mod budget;
mod cache;
mod commits;
mod common;
mod conditional;
pub mod console;
mod cors;
mod diff;
mod events;
mod git;
mod handlers;
mod history;
mod middleware;
mod openapi;
mod ops;
mod problem;
mod proposals;
mod query;
mod restore;
pub mod routes;
pub(crate) mod schema;
mod schemas;
mod signing;
mod socket;
mod sse;
mod views;
mod webhooks;
mod write;

pub use body::BodyPace;
pub use budget::BodyBudget;
pub use cache::ResponseCache;
pub use openapi::document as openapi_document;
pub use problem::{problem_type, ApiError};

use crate::auth::{Principal, Verifier};
use crate::metrics::Metrics;
use crate::storage::Storage;
use actix_web::dev::{Payload, Server};
use actix_web::middleware::{from_fn, Condition};
use actix_web::{web, App, FromRequest, HttpRequest, HttpServer};
use std::future::{ready, Ready};
use std::net::TcpListener;
use std::time::Duration;

/// What every request can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub storage: Storage,
    pub verifier: Verifier,
    pub body_limit: usize,
    /// How long a client has to send a whole body once it has its turn, and how fast.
    pub body_pace: BodyPace,
    pub metrics: Metrics,
    /// When true, `/metrics` needs a token with `planfiles.metrics.read`.
    pub metrics_require_token: bool,
    /// Background repacks after writes.
    pub upkeep: crate::upkeep::Upkeep,
    /// Each tenant's writes, in turn.
    pub writers: crate::plans::writer::Writers,
    /// Serialized GET bodies at a known head commit.
    pub responses: ResponseCache,
    /// Bounds the bytes of request bodies read and processed at once (memory), per tenant too.
    pub bodies: BodyBudget,
    /// Turns to parse and render a stored file (`?ref=`, a GET after a change): up to a
    /// megabyte of YAML costs tens of megabytes while it is rendered.
    pub renders: crate::gates::Turns,
    /// The change feed, the limits of streams and long-polls, tickets, and their shutdown.
    pub events: crate::events::Events,
    /// This shard among others: whom it imports from, and the turns imports take.
    pub cluster: ClusterState,
    /// The operator's schemas in use (swapped whole on a reload).
    pub validators: crate::validation::Validators,
    /// Pushes received at once: 4 in all, 1 per tenant; and the largest push.
    pub pushes: crate::gates::Turns,
    pub push_max_bytes: usize,
    /// Webhook subscriptions' rules and dispatcher (`None`: built without them, as some
    /// tests are; their endpoints then answer 503).
    pub webhooks: Option<crate::webhooks::Webhooks>,
}

/// What `POST /admin/tenants/{id}/import` needs.
#[derive(Clone)]
pub struct ClusterState {
    /// The shards imports may fetch from (`cluster.peers`); none: imports are refused.
    pub peers: Vec<crate::domain::ShardUrl>,
    /// This shard's URL (`cluster.self_url`): an import takes a tenant only from a source
    /// that is moving it here.
    pub me: Option<crate::domain::ShardUrl>,
    /// Imports running at once: 2 in all, 1 per tenant.
    pub imports: crate::gates::Turns,
}

impl ClusterState {
    fn new(
        peers: Vec<crate::domain::ShardUrl>,
        me: Option<crate::domain::ShardUrl>,
        wait: Duration,
    ) -> Self {
        Self {
            peers,
            me,
            imports: crate::gates::Turns::new(2, 1, wait),
        }
    }
}

/// Pushes received at once, in all and for one tenant.
const PUSHES: usize = 4;
const PUSHES_PER_TENANT: usize = 1;

/// Stored files parsed and rendered at once, in all and for one tenant.
const RENDERS: usize = 8;
const RENDERS_PER_TENANT: usize = 2;

/// The limits that keep one client or tenant from holding what others need.
#[derive(Debug, Clone)]
pub struct Limits {
    pub body_limit: usize,
    pub body_pace: BodyPace,
    /// Bytes of bodies in flight, in all and for one tenant.
    pub bodies_in_flight: usize,
    pub bodies_per_tenant: usize,
    /// Writes of one tenant queued or running at most.
    pub write_queue_depth: usize,
    /// How long a request waits for a turn (writer, body budget) before 503 `busy`.
    pub queue_timeout: Duration,
}

impl Limits {
    pub fn from_config(server: &crate::config::ServerConfig) -> Self {
        Self {
            body_limit: server.body_limit,
            body_pace: BodyPace {
                total: Duration::from_secs(server.body_timeout_secs),
                min_bytes_per_sec: server.body_min_bytes_per_sec,
            },
            bodies_in_flight: server.bodies_in_flight_bytes,
            bodies_per_tenant: server.bodies_per_tenant_bytes,
            write_queue_depth: server.write_queue_depth,
            queue_timeout: Duration::from_secs(server.queue_timeout_secs),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::from_config(&Default::default())
    }
}

impl AppState {
    /// The state of a server over `storage`; `repack_threshold` loose objects start a
    /// background repack (0: never).
    pub fn new(
        storage: Storage,
        verifier: Verifier,
        metrics: Metrics,
        limits: &Limits,
        repack_threshold: usize,
    ) -> Self {
        let upkeep = crate::upkeep::Upkeep::new(storage.clone(), repack_threshold, metrics.clone());
        let events =
            crate::events::Events::new(storage.clone(), metrics.clone(), Default::default());
        Self {
            writers: crate::plans::writer::Writers::new(
                storage.clone(),
                upkeep.clone(),
                metrics.write_batches.clone(),
                limits.write_queue_depth,
                limits.queue_timeout,
            ),
            storage,
            verifier,
            body_limit: limits.body_limit,
            body_pace: limits.body_pace,
            metrics,
            metrics_require_token: false,
            upkeep,
            responses: Default::default(),
            bodies: BodyBudget::new(
                limits.bodies_in_flight,
                limits.bodies_per_tenant,
                limits.queue_timeout,
            ),
            renders: crate::gates::Turns::new(RENDERS, RENDERS_PER_TENANT, limits.queue_timeout),
            events,
            cluster: ClusterState::new(Vec::new(), None, limits.queue_timeout),
            validators: crate::validation::Validators::none(),
            pushes: crate::gates::Turns::new(PUSHES, PUSHES_PER_TENANT, limits.queue_timeout),
            push_max_bytes: crate::config::GitConfig::default().push_max_bytes,
            webhooks: None,
        }
    }

    /// Webhooks with their dispatcher (built over this state's storage, feed and metrics:
    /// call after `events_config`).
    pub fn webhooks(
        mut self,
        config: crate::config::WebhooksConfig,
    ) -> Result<Self, crate::webhooks::BuildError> {
        self.webhooks = Some(crate::webhooks::Webhooks::new(
            self.storage.clone(),
            self.events.clone(),
            self.metrics.clone(),
            config,
        )?);
        Ok(self)
    }

    /// The largest push (`git.push_max_bytes`).
    pub fn push_max_bytes(mut self, bytes: usize) -> Self {
        self.push_max_bytes = bytes;
        self
    }

    /// The schemas writes are checked against and reads judged by.
    pub fn validators(mut self, validators: crate::validation::Validators) -> Self {
        self.validators = validators;
        self
    }

    /// The shards this one may import tenants from (`cluster.peers`), and this shard's own
    /// URL (`cluster.self_url`).
    pub fn cluster(
        mut self,
        peers: Vec<crate::domain::ShardUrl>,
        me: Option<crate::domain::ShardUrl>,
    ) -> Self {
        self.cluster = ClusterState::new(peers, me, self.cluster.imports.wait());
        self
    }

    /// The `[events]` settings (limits, heartbeat, waits, polling).
    pub fn events_config(mut self, config: crate::config::EventsConfig) -> Self {
        self.events =
            crate::events::Events::new(self.storage.clone(), self.metrics.clone(), config);
        self
    }

    /// With `true`, `/metrics` needs a token with `planfiles.metrics.read`.
    pub fn metrics_require_token(mut self, on: bool) -> Self {
        self.metrics_require_token = on;
        self
    }

    /// Waits for a turn to read and process the body of `req` for `tenant`, whose size counts
    /// against the budget (up to `limit` when it does not say); the turn ends when it is
    /// dropped. Bodies waiting for a turn stay in the client's and the kernel's buffers.
    pub(crate) async fn admit(
        &self,
        req: &HttpRequest,
        tenant: &crate::domain::TenantId,
        limit: usize,
    ) -> Result<budget::BodyTurn, ApiError> {
        let declared = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        self.bodies.admit(tenant, declared, limit).await
    }
}

/// Server settings that are not part of the application state.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub workers: usize,
    pub client_request_timeout: Duration,
    pub shutdown_timeout: Duration,
    /// A connection whose client accepts no bytes for this long is closed.
    pub send_stall: Duration,
    /// Origins whose pages may call the API (CORS); none: no CORS.
    pub cors_allowed_origins: Vec<String>,
}

/// Builds the server on an already bound listener (port 0 works: ask the listener its port).
pub fn serve(
    state: AppState,
    listener: TcpListener,
    options: &ServerOptions,
) -> std::io::Result<Server> {
    let data = web::Data::new(state);
    let origins = options.cors_allowed_origins.clone();
    let mut server = HttpServer::new(move || {
        let cors = !origins.is_empty();
        App::new()
            .app_data(data.clone())
            // CORS inside the request context: preflights and refused origins are logged
            // and counted like any request, and the body type the server sees stays one.
            .wrap(Condition::new(cors, cors::policy(&origins)))
            .wrap(from_fn(middleware::request_context))
            .configure(routes::configure)
            .default_service(web::to(common::not_found))
    })
    .on_connect(socket::on_connect(options.send_stall))
    .disable_signals()
    .client_request_timeout(options.client_request_timeout)
    .shutdown_timeout(options.shutdown_timeout.as_secs())
    .listen(listener)?;
    if options.workers > 0 {
        server = server.workers(options.workers);
    }
    Ok(server.run())
}

/// On SIGTERM or SIGINT: end the event streams and held requests (`/readyz` answers 503 from
/// then on), serve on for `drain` after a SIGTERM (a second signal cuts it short), stop
/// accepting, let in-flight requests finish, then return.
pub fn stop_on_signals(
    handle: actix_web::dev::ServerHandle,
    events: crate::events::Events,
    drain: Duration,
) {
    actix_web::rt::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        events.shut_down();
        if name == "SIGTERM" && !drain.is_zero() {
            tracing::info!(
                signal = name,
                drain_secs = drain.as_secs(),
                "draining: /readyz answers 503, requests are still served"
            );
            tokio::select! {
                _ = tokio::time::sleep(drain) => {}
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        tracing::info!(signal = name, "shutting down: finishing in-flight requests");
        handle.stop(true).await;
    });
}

impl FromRequest for Principal {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req
            .app_data::<web::Data<AppState>>()
            .expect("AppState is registered");
        let header = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let verified = state
            .verifier
            .verify_header(header)
            .map_err(ApiError::Unauthorized);
        if let Ok(who) = &verified {
            // The tenant for the request log line, when that line is written.
            if middleware::request_log_enabled() {
                actix_web::HttpMessage::extensions_mut(req).insert(who.clone());
            }
        }
        ready(verified)
    }
}
