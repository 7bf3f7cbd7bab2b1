//! One tracing subscriber for the process: `log.format` pretty or JSON, filtered by
//! `log.level` (or `RUST_LOG` when set), written to stderr. And the process's metrics
//! recorder (Prometheus, rendered by `GET /metrics`) with the middleware that counts HTTP
//! requests.

use std::{sync::OnceLock, time::Instant};

use actix_web::{
    Error,
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    middleware::Next,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// sea-orm-migration tells every migration it applies at `info` (two lines each, some sixty on a
/// first start, around the bootstrap key); the service tells their count in one line instead.
/// Each migration's own lines show at `debug` and beyond, or when `log.level` names the target.
fn quiet_migrations(filter: EnvFilter, level: &str) -> EnvFilter {
    let verbose = level
        .split(',')
        .any(|d| matches!(d.trim(), "debug" | "trace") || d.contains("sea_orm_migration"));
    match "sea_orm_migration=warn".parse() {
        Ok(directive) if !verbose => filter.add_directive(directive),
        _ => filter,
    }
}

pub fn init(settings: &LogSettings) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| quiet_migrations(EnvFilter::new(&settings.level), &settings.level));
    // Colour only for a person at a terminal: a log written to a file or a pipe stays plain.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let result = match settings.format().unwrap_or(LogFormat::Pretty) {
        // Each line carries the fields of its spans (request id, run id, endpoint id).
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
    // A second initialisation (tests) keeps the first subscriber.
    drop(result);
}

/// Bucket bounds (seconds) of every `_seconds` histogram: from a millisecond (a cached read)
/// to a minute (a withdrawal waiting for the exchange's rate limit).
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use. The recorder is global to the
/// process, so applications built in one process (tests) share it. `None` if another recorder
/// was installed first; the metrics then go there and `/metrics` says so.
pub fn metrics_handle() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS);
            match builder.and_then(|b| b.install_recorder()) {
                Ok(handle) => {
                    describe_metrics();
                    Some(handle)
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the metrics recorder could not be installed");
                    None
                }
            }
        })
        .as_ref()
}

/// Counts every request by its route pattern (never the raw path, which carries ids), method
/// and status, and times it. Outermost, so refusals by the gate are counted too.
pub async fn http_metrics<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<B>, Error> {
    let start = Instant::now();
    let method = method_label(req.method()).to_owned();
    // Asked of the answer: once routed, the resource map names the matched resource's
    // pattern without matching the path again. An error instead of an answer carries no
    // request, so it counts as unmatched.
    let result = next.call(req).await;
    let (status, route) = match &result {
        Ok(res) => (res.status(), res.request().match_pattern()),
        Err(err) => (err.as_response_error().status_code(), None),
    };
    let route = route.unwrap_or_else(|| "unmatched".to_owned());
    let (requests, duration) = http_handles(route, method, status.as_u16());
    requests.increment(1);
    duration.record(start.elapsed().as_secs_f64());
    result
}

/// A method's label: the standard ones by name, any other `other`, so nothing a client sends
/// grows the number of series (CONTRACT §13).
pub fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// Handles kept per worker thread once made: the most this keeps of them.
const MAX_KEPT_HANDLES: usize = 1024;

type HttpHandles = (metrics::Counter, metrics::Histogram);

thread_local! {
    /// The request counter and duration histogram of each (route, method, status) seen on
    /// this thread, so a request does not build and look up its metric keys anew.
    static HTTP_HANDLES: std::cell::RefCell<std::collections::HashMap<(String, String, u16), HttpHandles>> =
        std::cell::RefCell::default();
}

fn http_handles(route: String, method: String, status: u16) -> HttpHandles {
    let key = (route, method, status);
    if let Some(handles) = HTTP_HANDLES.with_borrow(|kept| kept.get(&key).cloned()) {
        return handles;
    }
    let (route, method, status) = key;
    let handles = (
        metrics::counter!(
            "payroll_http_requests_total",
            "method" => method.clone(),
            "route" => route.clone(),
            "status" => status.to_string()
        ),
        metrics::histogram!(
            "payroll_http_request_duration_seconds",
            "method" => method.clone(),
            "route" => route.clone()
        ),
    );
    HTTP_HANDLES.with_borrow_mut(|kept| {
        if kept.len() < MAX_KEPT_HANDLES {
            kept.insert((route, method, status), handles.clone());
        }
    });
    handles
}

/// The `# HELP` lines; docs/operations.md lists the same names with their labels.
fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "payroll_http_requests_total",
        "HTTP requests by route pattern, method and status."
    );
    describe_histogram!(
        "payroll_http_request_duration_seconds",
        Unit::Seconds,
        "Time to answer an HTTP request, by route pattern and method."
    );
    describe_gauge!("payroll_actors_alive", "Actors running, by kind.");
    describe_counter!(
        "payroll_payouts_settled_total",
        "Payouts settled by the exchange's word, by outcome (completed, failed)."
    );
    describe_gauge!(
        "payroll_exchange_provider",
        "1, labelled with the exchange provider in force (sandbox, okx, binance)."
    );
    describe_gauge!(
        "payroll_database_up",
        "1 while the database answers and takes writes, 0 while it is unreachable or refuses writes."
    );
    describe_gauge!(
        "payroll_email_transport_up",
        "1 while the mailer reaches its mail server (or writes its outbox folder), 0 since a try failed for lack of it."
    );
    describe_counter!(
        "payroll_audit_dropped_total",
        "Refusals without a usable key not stored in the audit log (beyond audit.unauthenticated_per_second from one peer)."
    );
    describe_gauge!(
        "payroll_actor_mailbox_depth",
        "Messages sent to actors of this kind and not yet picked up."
    );
    describe_counter!(
        "payroll_actor_messages_handled_total",
        "Messages handled, by actor kind and message type."
    );
    describe_histogram!(
        "payroll_actor_handler_duration_seconds",
        Unit::Seconds,
        "Time from picking a message up to its answer, by actor kind and message type."
    );
    describe_counter!(
        "payroll_actor_restarts_total",
        "Supervised actors restarted (reloaded from the database), by kind."
    );
    describe_counter!(
        "payroll_withdrawals_total",
        "Withdrawals answered by the exchange, by outcome."
    );
    describe_histogram!(
        "payroll_exchange_rate_limit_wait_seconds",
        Unit::Seconds,
        "Time a batch of withdrawals waited for rate-limit tokens."
    );
    describe_gauge!(
        "payroll_exchange_rate_limit_tokens",
        "Whole withdrawal tokens left in the exchange rate limiter."
    );
    describe_gauge!(
        "payroll_exchange_withdrawals_queued",
        "Withdrawals waiting at the exchange actor for a token."
    );
    describe_counter!(
        "payroll_webhook_deliveries_total",
        "Webhook delivery attempts recorded, by outcome."
    );
    describe_gauge!(
        "payroll_webhook_deliveries_pending",
        "Webhook deliveries still to be delivered (counted at scrape)."
    );
    describe_gauge!(
        "payroll_webhook_endpoints_disabled",
        "Webhook endpoints disabled and not deleted (counted at scrape)."
    );
    describe_counter!(
        "payroll_webhook_endpoints_disabled_total",
        "Webhook endpoints disabled by the dispatcher (410 or retries exhausted)."
    );
    describe_counter!(
        "payroll_emails_total",
        "Email send attempts from the outbox, by outcome."
    );
    describe_gauge!(
        "payroll_email_outbox_pending",
        "Emails in the outbox not yet sent (counted at scrape)."
    );
    describe_counter!(
        "payroll_idempotent_replays_total",
        "Requests answered by replaying a stored idempotent response, by operation."
    );
    describe_gauge!(
        "payroll_db_pool_connections",
        "Database pool connections open, by state (idle, in_use)."
    );
    describe_gauge!(
        "payroll_db_pool_max_connections",
        "The database pool's configured maximum (database.max_connections)."
    );
    describe_counter!(
        "payroll_stuck_payouts_reported_total",
        "Payouts found processing at the exchange past exchange.stuck_after_ms."
    );
    describe_gauge!(
        "payroll_actor_mailbox_limit",
        "Messages that may wait for actors of this kind before the API's senders are refused."
    );
    describe_gauge!("payroll_runs", "Runs by status (counted at scrape).");
    describe_gauge!(
        "payroll_payouts_stuck",
        "Payouts stuck now, waiting for an operator (counted at scrape)."
    );
    payroll_actors::telemetry::register_closed_sets();
}
