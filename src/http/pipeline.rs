//! The request gate: one middleware in front of every route. For `/api/v1` it applies the
//! contract's order of checks (CONTRACT §1): route (404/405) → authentication (401) → scope
//! (403) → rate limit (429) → `Api-Version` (400) → `Idempotency-Key` (400) → replay / in use /
//! reused → size and media type (413/415); then the handler validates the body. Everywhere it
//! sets the request id, completes error bodies, and records the audit entry of every API
//! request that did not commit its own.

use payroll_actors::telemetry::{self, AUDIT_BACKLOG_LIMIT, ActorKind};
use std::rc::Rc;

use actix_web::{
    Error, HttpMessage,
    body::{BoxBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    http::{
        ConnectionType, Method, StatusCode,
        header::{self, HeaderMap, HeaderValue},
    },
    middleware::Next,
    web,
};
use governor::clock::{Clock, DefaultClock};
use payroll_entities::ids;
use serde_json::json;

use crate::{
    http::{
        audit::{self, RequestFacts},
        auth,
        callers::authenticate,
        error::{ApiError, ErrorCode},
        fail_fast::{Interrupted, refused_by_health, unless_unreachable},
        idempotency::{self, Verdict},
        incoming::{BodyFault, read_body},
        request::{ApiRequest, AuditRecorded, BodyType, IdempotencyClaim, RequestInfo},
        route::{Access, BodyKind},
    },
    routes,
    state::AppState,
};
use payroll_actors::views::API_VERSION;

const API_PREFIX: &str = "/api/v1";

enum Admission {
    Proceed(Box<RequestInfo>),
    Replay { status: u16, body: String },
}

/// Runs every request in a `request` span (request id, method, path), so whatever it logs,
/// down to the run actors it asks, carries them; logs its outcome at debug (writes at info).
pub async fn gate<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    use tracing::Instrument as _;
    let request_id = request_id_of(req.headers());
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %req.method(),
        path = %req.path(),
    );
    let write = matches!(*req.method(), Method::POST | Method::PATCH | Method::DELETE);
    let started = std::time::Instant::now();
    let result = gate_request(req, next, request_id, started)
        .instrument(span.clone())
        .await;
    let _entered = span.enter();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match &result {
        Ok(res) if write => tracing::info!(status = res.status().as_u16(), ms, "request"),
        Ok(res) => tracing::debug!(status = res.status().as_u16(), ms, "request"),
        Err(err) => tracing::warn!(error = %err, ms, "request failed"),
    }
    result
}

async fn gate_request<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
    request_id: String,
    head_at: std::time::Instant,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        let err = ApiError::internal("application state missing");
        return Ok(finish(
            req.into_response(err.response(Some(&request_id))),
            &request_id,
        ));
    };
    // Counted in until its answer is ready; once the server stops, refused before any work,
    // not audited (the audit's last entries are being written), and its connection closed.
    let Some(_in_flight) = state.drain.enter() else {
        let err = ApiError::shutting_down();
        let mut res = finish(
            req.into_response(err.response(Some(&request_id))),
            &request_id,
        );
        res.response_mut()
            .head_mut()
            .set_connection_type(ConnectionType::Close);
        return Ok(res);
    };
    let path = req.path().to_owned();
    let Some(api_path) = path
        .strip_prefix(API_PREFIX)
        .filter(|p| p.is_empty() || p.starts_with('/'))
    else {
        let res = next.call(req).await?.map_into_boxed_body();
        return Ok(finish(res, &request_id));
    };
    let api_path = if api_path.is_empty() { "/" } else { api_path };

    let (stored_path, path_truncated) =
        audit::stored_path(&path, state.settings.audit.path_max_chars);
    let mut facts = RequestFacts {
        request_id: request_id.clone(),
        method: req.method().to_string(),
        path: stored_path,
        path_truncated,
        peer: req.peer_addr().map(|a| a.ip()),
        // Recorded for refusals too, when it is well-formed.
        idempotency_key: req
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| idempotency::parse_key(Some(v)).ok()),
        ..RequestFacts::default()
    };
    // The audit writer is behind: refused before any work, and (so the backlog stops growing)
    // not audited; payroll_actor_messages_refused_total counts these.
    if let Err(overloaded) = telemetry::admit(ActorKind::AuditWriter, AUDIT_BACKLOG_LIMIT) {
        let err = ApiError::from(overloaded);
        let res = req.into_response(err.response(Some(&request_id)));
        return Ok(finish(res, &request_id));
    }
    // The database is known to be down (or to refuse writes): answered at once, before any
    // work, rather than after the pool's acquire timeout. Not audited, like the refusals of
    // an overloaded or stopping server: nothing was done, and the audit writer's backlog
    // must not grow through an outage.
    if let Some(down) = refused_by_health(&state, req.method(), api_path) {
        let err = ApiError::database_down(&down);
        let res = req.into_response(err.response(Some(&request_id)));
        return Ok(finish(res, &request_id));
    }
    // A request under way when the database is found unreachable is answered then (503),
    // whatever it waits for: a write it began is rolled back with its connection, or, if its
    // commit went through, its idempotency record answers the retry.
    let health = state.db.health().clone();
    let mut taken: Option<IdempotencyClaim> = None;
    let served = unless_unreachable(
        &health,
        serve(req, next, &state, &mut facts, api_path, head_at, &mut taken),
    )
    .await;
    let (res, claim, details) = match served {
        Some(served) => served?,
        None => {
            // The request went with the handler: answered from the error by the framework.
            let error = ApiError::database_interrupted(&health.state());
            after(
                &state,
                &facts,
                taken.as_ref(),
                error.code.status().as_u16(),
                json!({"database": "unreachable"}),
            )
            .await;
            return Err(Interrupted { error, request_id }.into());
        }
    };
    let res = finish(res, &request_id);
    if let Some(fault) = res
        .response()
        .error()
        .and_then(|e| e.as_error::<ApiError>())
        .and_then(|e| e.fault)
    {
        health.note(fault, "a request met a database fault");
    }
    if !res.response().extensions().contains::<AuditRecorded>() {
        after(
            &state,
            &facts,
            claim.as_ref(),
            res.status().as_u16(),
            details,
        )
        .await;
    } else if let Some(claim) = claim.as_ref().filter(|_| !res.status().is_success()) {
        release(&state, claim).await;
    }
    Ok(res)
}

type Served = (
    ServiceResponse<BoxBody>,
    Option<IdempotencyClaim>,
    serde_json::Value,
);

/// Admits the request (route, key, scope, rate limit, idempotency, body) and runs its handler;
/// the claim it takes is noted in `taken` as soon as it is taken.
async fn serve<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: Next<B>,
    state: &web::Data<AppState>,
    facts: &mut RequestFacts,
    api_path: &str,
    head_at: std::time::Instant,
    taken: &mut Option<IdempotencyClaim>,
) -> Result<Served, Error> {
    let request_id = facts.request_id.clone();
    Ok(
        match admit(&mut req, state, facts, api_path, head_at).await {
            Ok(Admission::Proceed(info)) => {
                let claim = info.claim.clone();
                taken.clone_from(&claim);
                req.extensions_mut().insert(ApiRequest(Rc::new(*info)));
                match next.call(req).await {
                    Ok(res) => (res.map_into_boxed_body(), claim, json!({})),
                    Err(err) => {
                        let status = err.as_response_error().status_code().as_u16();
                        after(state, facts, claim.as_ref(), status, json!({})).await;
                        return Err(err);
                    }
                }
            }
            Ok(Admission::Replay { status, body }) => {
                metrics::counter!(
                    "payroll_idempotent_replays_total",
                    "operation" => facts.operation.unwrap_or("unknown")
                )
                .increment(1);
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                let response = actix_web::HttpResponse::build(status)
                    .content_type("application/json; charset=utf-8")
                    .insert_header(("Idempotent-Replayed", "true"))
                    .body(body);
                (
                    req.into_response(response),
                    None,
                    json!({"idempotent_replay": true}),
                )
            }
            Err(err) => {
                if let Some(fault) = err.fault {
                    state.db.health().note(fault, &err.message);
                }
                (
                    req.into_response(err.response(Some(&request_id))),
                    None,
                    json!({}),
                )
            }
        },
    )
}

/// Releases the claim of a failed write and records the request's audit entry (batched).
async fn after(
    state: &AppState,
    facts: &RequestFacts,
    claim: Option<&IdempotencyClaim>,
    status: u16,
    details: serde_json::Value,
) {
    if let Some(claim) = claim.filter(|_| !(200..300).contains(&status)) {
        release(state, claim).await;
    }
    // Refusals of requests without a usable key are stored up to
    // `audit.unauthenticated_per_second` per peer address and counted beyond it, so nobody
    // fills the audit log (and the disk) from outside; a key's requests are always recorded.
    if facts.api_key_id.is_none()
        && let Some(peer) = facts.peer
        && state
            .unauthenticated_audit
            .check_key(&audit::peer_bucket(peer))
            .is_err()
    {
        metrics::counter!("payroll_audit_dropped_total").increment(1);
        return;
    }
    state
        .audit
        .record(audit::request_entry(facts, status, None, details));
}

/// Releases the claim of a request that did not succeed, so that a retry under its key is
/// carried out at once. The answer never waits for a database known to be unreachable (the
/// request's own fault, or one found while the release waits for a connection): the claim is
/// then released in the background once the database answers again.
async fn release(state: &AppState, claim: &IdempotencyClaim) {
    let health = state.db.health().clone();
    match unless_unreachable(&health, idempotency::release(&state.db, claim)).await {
        Some(Ok(())) => return,
        Some(Err(err)) if health.report(&err).is_none() => {
            tracing::warn!(error = %err, "idempotency claim not released; it expires by itself");
            return;
        }
        Some(Err(_)) | None => {}
    }
    // The database is away: released once it answers again, so a retry of this write need not
    // wait for the claim to expire. Safe whenever it lands: only a claim still in flight under
    // this request's token is removed, and a write that did commit completed its record.
    let db = state.db.clone();
    let claim = claim.clone();
    actix_web::rt::spawn(async move {
        let expires = claim
            .locked_until
            .unwrap_or_else(payroll_entities::time::now);
        while payroll_entities::time::now() < expires {
            db.health().up().await;
            match idempotency::release(&db, &claim).await {
                Ok(()) => return,
                Err(err) if db.health().report(&err).is_some() => {
                    actix_web::rt::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "idempotency claim not released; it expires by itself");
                    return;
                }
            }
        }
    });
}

async fn admit(
    req: &mut ServiceRequest,
    state: &web::Data<AppState>,
    facts: &mut RequestFacts,
    api_path: &str,
    head_at: std::time::Instant,
) -> Result<Admission, ApiError> {
    let (route, params) = routes::match_route(req.method(), api_path)?;
    facts.operation = Some(route.operation);

    let caller = match route.access {
        Access::Public => None,
        Access::AnyOf(required) => {
            let caller = authenticate(state, req.headers()).await?;
            facts.api_key_id = Some(caller.key_id.clone());
            facts.agent_session_id.clone_from(&caller.session_id);
            // A session acts for its key but is not it: it never revokes it.
            let own_key = caller.session_id.is_none() && route.on_own_key(&params, &caller.key_id);
            if !required.iter().any(|s| auth::grants(&caller.scopes, *s)) && !own_key {
                let names: Vec<&str> = required.iter().map(|s| s.as_str()).collect();
                return Err(ApiError::insufficient_scope(&names, &caller.scopes));
            }
            rate_limit(state, &caller.key_id)?;
            Some(caller)
        }
        Access::AnyKey => {
            let caller = authenticate(state, req.headers()).await?;
            facts.api_key_id = Some(caller.key_id.clone());
            facts.agent_session_id.clone_from(&caller.session_id);
            rate_limit(state, &caller.key_id)?;
            Some(caller)
        }
    };

    if let Some(version) = req.headers().get("api-version")
        && version.to_str().ok().map(str::trim) != Some(API_VERSION)
    {
        return Err(ApiError::new(
            ErrorCode::UnsupportedApiVersion,
            format!(
                "Api-Version `{}` is not supported; this server speaks {API_VERSION}.",
                String::from_utf8_lossy(version.as_bytes())
            ),
        )
        .detail("supported_versions", json!([API_VERSION])));
    }

    let is_write = matches!(*req.method(), Method::POST | Method::PATCH | Method::DELETE);
    let idempotency_key = if is_write {
        let header = req
            .headers()
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap_or("\u{fffd}"));
        let key = idempotency::parse_key(header)?;
        facts.idempotency_key = Some(key.clone());
        Some(key)
    } else {
        None
    };

    // An import takes its place before its body is read: one refused holds no memory.
    let import_permit = if route.body == BodyKind::Import {
        Some(import_place(state)?)
    } else {
        None
    };
    let limit = match route.body {
        BodyKind::Import => state.settings.api.max_import_bytes,
        _ => state.settings.api.max_body_bytes,
    };
    let body = if route.body == BodyKind::None {
        Ok(web::Bytes::new())
    } else {
        let timeout = std::time::Duration::from_millis(state.settings.api.body_read_timeout_ms);
        read_body(req, limit, head_at, timeout).await
    };
    // A body cut short or too slow is no request: refused before anything is done, its
    // Idempotency-Key left untouched, so the whole body sent again runs.
    if let Err(fault @ (BodyFault::Incomplete | BodyFault::TimedOut(_))) = &body {
        return Err(fault.error());
    }

    let claim = match (idempotency_key, &caller) {
        (Some(key), Some(caller)) => {
            let fingerprint = match &body {
                Ok(bytes) => idempotency::fingerprint(route.operation, &params, bytes),
                // An oversized body matches no stored request.
                Err(_) => format!("{};oversized", route.operation),
            };
            let claim = IdempotencyClaim {
                lineage_id: caller.idempotency_space().to_owned(),
                key,
                fingerprint,
                locked_until: None,
            };
            match idempotency::check(&state.db, &claim.lineage_id, &claim.key, &claim.fingerprint)
                .await?
            {
                Verdict::Replay { status, body } => return Ok(Admission::Replay { status, body }),
                verdict => {
                    if let Some(err) = idempotency::verdict_error(&verdict) {
                        return Err(err);
                    }
                }
            }
            Some(claim)
        }
        _ => None,
    };

    let body = body.map_err(|fault| fault.error())?;
    let body_type = media_type(req.headers(), route.body, &body)?;

    let mut claim = claim;
    if let Some(claim) = claim.as_mut() {
        match idempotency::claim(&state.db, &state.settings.idempotency, claim).await? {
            Verdict::Proceed => {}
            Verdict::Replay { status, body } => return Ok(Admission::Replay { status, body }),
            verdict => {
                return Err(idempotency::verdict_error(&verdict)
                    .unwrap_or_else(|| ApiError::internal("unexpected idempotency verdict")));
            }
        }
    }

    Ok(Admission::Proceed(Box::new(RequestInfo {
        request_id: facts.request_id.clone(),
        route,
        params,
        caller,
        claim,
        body,
        body_type,
        query: req.query_string().to_owned(),
        path: facts.path.clone(),
        state: state.clone(),
        import_permit,
        approval: None,
    })))
}

pub(crate) fn rate_limit(state: &AppState, key_id: &str) -> Result<(), ApiError> {
    match state.limiter.check_key(&key_id.to_owned()) {
        Ok(()) => Ok(()),
        Err(not_until) => {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let seconds = seconds.max(1);
            let mut err = ApiError::new(
                ErrorCode::RateLimited,
                "This API key sent more requests than its rate limit allows.",
            )
            .detail("retry_after_seconds", seconds);
            err.retry_after = Some(seconds);
            Err(err)
        }
    }
}

/// A place among the imports this instance runs at once (`api.max_concurrent_imports`), or
/// 429 `RATE_LIMITED` (`reason: import_in_progress`) with `Retry-After`, the body left unread
/// and the connection closed.
fn import_place(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state.imports.clone().try_acquire_owned().map_err(|_| {
        let limit = state.settings.api.max_concurrent_imports;
        let mut err = ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "Another import is running on this server (at most {limit} at once); \
                 nothing was read or done."
            ),
        )
        .detail("reason", "import_in_progress")
        .detail("limit", limit as u64)
        .detail("retry_after_seconds", IMPORT_RETRY_AFTER_SECONDS)
        .hint(
            "Send the import again after Retry-After seconds, with the same Idempotency-Key; \
             imports run one after another.",
        );
        err.retry_after = Some(IMPORT_RETRY_AFTER_SECONDS);
        err.close_connection = true;
        err
    })
}

/// How long a refused import is asked to wait: a 100,000-row import takes a few seconds.
const IMPORT_RETRY_AFTER_SECONDS: u64 = 5;

/// JSON (also when no Content-Type is sent), or CSV where the route takes it.
fn media_type(headers: &HeaderMap, kind: BodyKind, body: &[u8]) -> Result<BodyType, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(BodyType::Json);
    }
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(BodyType::Json);
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(BodyType::Json),
        "text/csv" if kind == BodyKind::Import => Ok(BodyType::Csv),
        other => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "Content-Type `{other}` is not accepted here; send {}.",
                if kind == BodyKind::Import {
                    "application/json or text/csv"
                } else {
                    "application/json"
                }
            ),
        )
        .detail("content_type", other)),
    }
}

/// A client's `X-Request-Id` of 1–64 `[A-Za-z0-9_-]`, or a new one.
fn request_id_of(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=64).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| ids::new_id(ids::IdKind::Request))
}

/// Sets the request id and version headers and writes the request id into error bodies.
fn finish(res: ServiceResponse<BoxBody>, request_id: &str) -> ServiceResponse<BoxBody> {
    let api_error = res
        .response()
        .error()
        .map(|err| match err.as_error::<ApiError>() {
            Some(api_error) => api_error.clone(),
            None => foreign_error(err),
        });
    let mut res = match api_error {
        Some(api_error) => {
            let body = api_error.body(request_id).to_string();
            res.map_body(|head, _| {
                head.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json; charset=utf-8"),
                );
                BoxBody::new(body)
            })
        }
        None => res,
    };
    crate::http::envelope::answer_headers(res.headers_mut(), request_id);
    res
}

/// An error raised by the framework rather than by our code, in our vocabulary.
fn foreign_error(err: &actix_web::Error) -> ApiError {
    let status = err.as_response_error().status_code();
    let code = match status {
        StatusCode::NOT_FOUND => ErrorCode::RouteNotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::ServiceUnavailable,
        s if s.is_client_error() => ErrorCode::InvalidRequestBody,
        _ => return ApiError::internal(err),
    };
    ApiError::new(code, err.to_string())
}
