//! `Metrics`: the service's Prometheus metrics, one registry per running app (prometheus).
use crate::domain::yaml::splice::Made;
use prometheus::{
    Counter, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::atomic::{AtomicU64, Ordering};

/// Every metric the service exports. Cheap to clone (the collectors are shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// This registry among the process's (tests run many apps in one process): the key of
    /// the threads' caches of request series.
    id: u64,
    pub http_requests: IntCounterVec,
    pub http_latency: HistogramVec,
    pub commits: IntCounterVec,
    pub forced_writes: IntCounterVec,
    pub conflicts: IntCounterVec,
    pub git_errors: IntCounter,
    pub yaml_writes: IntCounterVec,
    pub repacks: IntCounterVec,
    pub repack_duration: HistogramVec,
    /// Open `GET /plans/events` streams.
    pub event_streams: IntGauge,
    /// Schemas in use (integration kinds, and the configuration's); 0: writes are checked
    /// against the YAML rules only.
    pub schemas_loaded: IntGauge,
    /// GETs held by `Prefer: wait`.
    pub long_polls: IntGauge,
    /// Per-file events written to streams, by file.
    pub events_sent: IntCounterVec,
    /// Writes of one tenant committed together, per batch.
    pub write_batches: Histogram,
    /// Reloads of the schemas folder (SIGHUP), by result: changed, same or failed.
    pub schema_reloads: IntCounterVec,
    /// Writes refused by a validator, by file.
    pub schema_refusals: IntCounterVec,
    /// Webhook delivery attempts, by outcome (delivered, http_error, timeout, refused, error).
    pub webhook_attempts: IntCounterVec,
    /// From a commit (its author date) to its event's 2xx, per event.
    pub webhook_lag: Histogram,
    /// Webhook subscriptions followed by this process, by state (active, failing).
    pub webhook_subscriptions: IntGaugeVec,
    /// Seconds webhook attempts waited for the dispatcher's CPU budget, summed.
    pub webhook_budget_wait: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let registry = Registry::new_custom(Some("planfiles".into()), None).expect("valid prefix");
        let http_requests = IntCounterVec::new(
            Opts::new(
                "http_requests_total",
                "HTTP requests by route, method and status",
            ),
            &["route", "method", "status"],
        )
        .expect("valid metric");
        let http_latency = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "HTTP request latency by route and method",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ]),
            &["route", "method"],
        )
        .expect("valid metric");
        let commits = IntCounterVec::new(
            Opts::new("commits_total", "Commits written, by file"),
            &["file"],
        )
        .expect("valid metric");
        let forced_writes = IntCounterVec::new(
            Opts::new(
                "forced_writes_total",
                "Commits made without a matching blob-id precondition, by file",
            ),
            &["file"],
        )
        .expect("valid metric");
        let conflicts = IntCounterVec::new(
            Opts::new(
                "conflicts_total",
                "Writes refused by a precondition, by file and status (409 or 412)",
            ),
            &["file", "status"],
        )
        .expect("valid metric");
        let git_errors = IntCounter::new(
            "git_errors_total",
            "Requests that failed in git or file I/O (answered 500)",
        )
        .expect("valid metric");
        let yaml_writes = IntCounterVec::new(
            Opts::new(
                "yaml_writes_total",
                "Writes of JSON content, by file and how the text was made: edited (the stored \
                 text, format kept), emitted (no stored text to edit) or fallback (an edit that \
                 did not read back as the content, emitted whole instead)",
            ),
            &["file", "made"],
        )
        .expect("valid metric");
        let repacks = IntCounterVec::new(
            Opts::new(
                "repacks_total",
                "Repacks of tenant repositories, by kind (incremental or full) and result",
            ),
            &["kind", "result"],
        )
        .expect("valid metric");
        let repack_duration = HistogramVec::new(
            HistogramOpts::new("repack_duration_seconds", "Time a repack took, by kind").buckets(
                vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
            ),
            &["kind"],
        )
        .expect("valid metric");
        let event_streams =
            IntGauge::new("event_streams", "Open GET /plans/events streams").expect("valid metric");
        let long_polls =
            IntGauge::new("long_polls", "GETs held by Prefer: wait").expect("valid metric");
        let schemas_loaded = IntGauge::new(
            "schemas_loaded",
            "Schemas in use (integration kinds and the configuration's); 0: writes are checked \
             against the YAML rules only",
        )
        .expect("valid metric");
        let events_sent = IntCounterVec::new(
            Opts::new(
                "events_sent_total",
                "Events written to event streams, by file (`proposal`: a proposal's step)",
            ),
            &["file"],
        )
        .expect("valid metric");
        let write_batches = Histogram::with_opts(
            HistogramOpts::new(
                "write_batch_writes",
                "Writes of one tenant committed together (checked and synced as one batch)",
            )
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
        )
        .expect("valid metric");
        let schema_reloads = IntCounterVec::new(
            Opts::new(
                "schema_reloads_total",
                "Reloads of the schemas folder (SIGHUP) by result: changed, same, or failed \
                 (the last good set stays in use)",
            ),
            &["result"],
        )
        .expect("valid metric");
        let schema_refusals = IntCounterVec::new(
            Opts::new(
                "schema_refusals_total",
                "Writes refused with 422 schema_violation, by file",
            ),
            &["file"],
        )
        .expect("valid metric");
        let webhook_attempts = IntCounterVec::new(
            Opts::new(
                "webhook_attempts_total",
                "Webhook delivery attempts, by outcome",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let webhook_lag = Histogram::with_opts(
            HistogramOpts::new(
                "webhook_delivery_lag_seconds",
                "From a commit to its webhook event's 2xx",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                3600.0,
            ]),
        )
        .expect("valid metric");
        let webhook_subscriptions = IntGaugeVec::new(
            Opts::new(
                "webhook_subscriptions",
                "Webhook subscriptions this process follows, by state",
            ),
            &["state"],
        )
        .expect("valid metric");
        let webhook_budget_wait = Counter::new(
            "webhook_cpu_budget_wait_seconds_total",
            "Seconds webhook attempts waited for the dispatcher's CPU budget (webhooks.cpu_share)",
        )
        .expect("valid metric");
        for c in [
            Box::new(webhook_attempts.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(webhook_lag.clone()),
            Box::new(webhook_subscriptions.clone()),
            Box::new(webhook_budget_wait.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        for outcome in [
            "delivered",
            "http_error",
            "timeout",
            "refused",
            "busy",
            "error",
        ] {
            webhook_attempts.with_label_values(&[outcome]);
        }
        for state in ["active", "failing"] {
            webhook_subscriptions.with_label_values(&[state]);
        }
        for c in [
            Box::new(event_streams.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(schemas_loaded.clone()),
            Box::new(schema_reloads.clone()),
            Box::new(schema_refusals.clone()),
            Box::new(write_batches.clone()),
            Box::new(long_polls.clone()),
            Box::new(events_sent.clone()),
            Box::new(http_requests.clone()),
            Box::new(http_latency.clone()),
            Box::new(commits.clone()),
            Box::new(forced_writes.clone()),
            Box::new(conflicts.clone()),
            Box::new(git_errors.clone()),
            Box::new(yaml_writes.clone()),
            Box::new(repacks.clone()),
            Box::new(repack_duration.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        // Series that exist from the start, so that their count never changes while the
        // service runs: every file, conflict status and repack kind and result.
        for file in ["integration", "configuration"] {
            commits.with_label_values(&[file]);
            events_sent.with_label_values(&[file]);
            schema_refusals.with_label_values(&[file]);
            forced_writes.with_label_values(&[file]);
            for status in ["409", "412"] {
                conflicts.with_label_values(&[file, status]);
            }
            for made in Made::ALL {
                yaml_writes.with_label_values(&[file, made.label()]);
            }
        }
        for result in ["changed", "same", "failed"] {
            schema_reloads.with_label_values(&[result]);
        }
        for kind in ["incremental", "merge", "full", "unknown"] {
            repack_duration.with_label_values(&[kind]);
            for result in ["ok", "error"] {
                repacks.with_label_values(&[kind, result]);
            }
        }
        Self {
            registry,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            http_requests,
            http_latency,
            commits,
            forced_writes,
            conflicts,
            git_errors,
            yaml_writes,
            repacks,
            repack_duration,
            event_streams,
            schemas_loaded,
            long_polls,
            events_sent,
            write_batches,
            schema_reloads,
            schema_refusals,
            webhook_attempts,
            webhook_lag,
            webhook_subscriptions,
            webhook_budget_wait,
        }
    }

    /// Counts a request of `route` and `method` that ended with `status` after `seconds`.
    /// The series of the requests a thread served last are kept in the thread
    /// ([`HOT_SERIES`] of them): a label lookup hashes every value under the vector's lock,
    /// a fifth of what the request metrics cost a cached GET.
    pub fn count_request(&self, route: &str, method: &'static str, status: u16, seconds: f64) {
        HOT.with_borrow_mut(|hot| {
            let found = hot.iter().position(|h| {
                h.registry == self.id
                    && h.status == status
                    && h.method == method
                    && *h.route == *route
            });
            let at = found.unwrap_or_else(|| {
                let series = Hot {
                    registry: self.id,
                    route: route.into(),
                    method,
                    status,
                    requests: self.http_requests.with_label_values(&[
                        route,
                        method,
                        &status.to_string(),
                    ]),
                    latency: self.http_latency.with_label_values(&[route, method]),
                };
                if hot.len() == HOT_SERIES {
                    // The oldest goes: what a thread serves now is what it will serve next.
                    hot.remove(0);
                }
                hot.push(series);
                hot.len() - 1
            });
            hot[at].requests.inc();
            hot[at].latency.observe(seconds);
        });
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// How many request series each thread keeps at hand.
const HOT_SERIES: usize = 16;

/// A request series a thread used lately, with its labels.
struct Hot {
    registry: u64,
    route: Box<str>,
    method: &'static str,
    status: u16,
    requests: IntCounter,
    latency: Histogram,
}

thread_local! {
    static HOT: std::cell::RefCell<Vec<Hot>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.commits.with_label_values(&["integration"]).inc();
        m.http_requests
            .with_label_values(&["/plans/integration-file", "PUT", "200"])
            .inc();
        let text = m.render();
        assert!(
            text.contains("planfiles_commits_total{file=\"integration\"} 1"),
            "{text}"
        );
        assert!(text.contains("# TYPE planfiles_http_requests_total counter"));
    }

    #[test]
    fn requests_count_into_their_own_app_and_labels_past_the_threads_cache() {
        let (a, b) = (Metrics::new(), Metrics::new());
        let route = "/plans/integration-file";
        for _ in 0..3 {
            a.count_request(route, "GET", 200, 0.001);
        }
        a.count_request(route, "GET", 404, 0.001);
        b.count_request(route, "GET", 200, 0.001);
        // More series than a thread keeps: the first ones are made again, from the registry.
        for i in 0..super::HOT_SERIES as u16 + 4 {
            a.count_request(route, "PUT", 200 + i, 0.001);
        }
        a.count_request(route, "GET", 200, 0.001);
        assert_eq!(
            HOT.with_borrow(Vec::len),
            HOT_SERIES,
            "a thread keeps no more"
        );
        // Another thread has its own cache and counts into the same series.
        std::thread::scope(|s| {
            s.spawn(|| a.count_request(route, "GET", 200, 0.001));
        });
        let text = a.render();
        let line = |method: &str, status: u16| {
            format!("planfiles_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}}")
        };
        assert!(text.contains(&format!("{} 5", line("GET", 200))), "{text}");
        assert!(text.contains(&format!("{} 1", line("GET", 404))), "{text}");
        assert!(text.contains(&format!("{} 1", line("PUT", 219))), "{text}");
        assert!(text.contains("planfiles_http_request_duration_seconds_count{method=\"GET\",route=\"/plans/integration-file\"} 6"), "{text}");
        assert!(text.contains("planfiles_http_request_duration_seconds_count{method=\"PUT\",route=\"/plans/integration-file\"} 20"), "{text}");
        let other = b.render();
        assert!(
            other.contains(&format!("{} 1", line("GET", 200))),
            "{other}"
        );
        assert!(!other.contains("PUT"), "{other}");
    }
}
