//! `/webhooks`: endpoints that receive signed events, their deliveries and manual retries
//! (CONTRACT §10, scope `webhooks:manage`).

use payroll_actors::telemetry::CountedSend;
use std::collections::HashMap;

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::views::Timestamp;
use payroll_actors::webhook::{
    signing,
    store::{self as webhook_store, fail_pending, insert_deliveries, new_delivery},
    subscriptions::{self, is_valid_pattern, valid_patterns_hint},
    supervisor::EndpointChanged,
};
use payroll_entities::{
    DeliveryStatus, WebhookStatus, event, ids, time, webhook_attempt, webhook_delivery,
    webhook_endpoint,
};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait as _, EntityTrait,
    IntoActiveModel, PaginatorTrait, QueryFilter, QueryOrder,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::http::query::fetch_page;
use crate::http::{
    audit::AuditRecord,
    auth,
    error::{ApiError, ErrorCode, FieldError},
    request::ApiRequest,
    resource::find_resource,
};

/// A webhook endpoint. `secret` appears only in the create and rotate-secret answers (and is
/// null in their idempotent replays: rotate again if it was lost). No `Debug`: it may hold the
/// secret.
/// Most subscriptions of one endpoint, and most characters in its description.
pub const MAX_EVENTS: usize = 50;
pub const DESCRIPTION_MAX: usize = 1000;

#[derive(Clone, Serialize, ToSchema)]
pub struct WebhookEndpointResource {
    pub id: String,
    pub url: String,
    /// Event kinds, `run.*` aliases or wildcards (`*`, `payroll.run.*`, `payout.*`).
    pub events: Vec<String>,
    pub description: Option<String>,
    #[schema(value_type = String)]
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// `whsec_` + base64 of 32 bytes: the Standard Webhooks signing secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub secret: Option<Option<String>>,
}

impl From<&webhook_endpoint::Model> for WebhookEndpointResource {
    fn from(e: &webhook_endpoint::Model) -> WebhookEndpointResource {
        WebhookEndpointResource {
            id: e.id.clone(),
            url: e.url.clone(),
            events: e.event_patterns(),
            description: e.description.clone(),
            status: e.status,
            disabled_reason: e.disabled_reason.clone(),
            disabled_at: e.disabled_at.map(Timestamp::from),
            created_at: e.created_at.into(),
            updated_at: e.updated_at.into(),
            secret: None,
        }
    }
}

impl WebhookEndpointResource {
    fn with_secret(mut self, secret: String) -> WebhookEndpointResource {
        self.secret = Some(Some(secret));
        self
    }

    /// As stored for idempotent replay: the secret is never kept in plaintext.
    fn redacted(&self) -> WebhookEndpointResource {
        let mut copy = self.clone();
        copy.secret = Some(None);
        copy
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptResource {
    pub attempt: i32,
    pub started_at: Timestamp,
    /// Null when no answer came (timeout, refused connection, blocked address).
    pub response_status: Option<i32>,
    pub duration_ms: i64,
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryResource {
    pub id: String,
    pub webhook_id: String,
    pub event_id: String,
    pub event_type: String,
    #[schema(value_type = String)]
    pub status: DeliveryStatus,
    /// Every attempt so far, oldest first.
    pub attempts: Vec<AttemptResource>,
    /// When the next attempt is due (PENDING only).
    pub next_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl DeliveryResource {
    fn new(d: webhook_delivery::Model, attempts: Vec<webhook_attempt::Model>) -> DeliveryResource {
        DeliveryResource {
            id: d.id,
            webhook_id: d.endpoint_id,
            event_id: d.event_id,
            event_type: d.event_type,
            status: d.status,
            attempts: attempts
                .into_iter()
                .map(|a| AttemptResource {
                    attempt: a.attempt,
                    started_at: a.started_at.into(),
                    response_status: a.response_status,
                    duration_ms: a.duration_ms,
                    error: a.error,
                })
                .collect(),
            next_attempt_at: d.next_attempt_at.map(Timestamp::from),
            last_error: d.last_error,
            created_at: d.created_at.into(),
            updated_at: d.updated_at.into(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// `https://…` (http:// only with `webhooks.allow_http`); its host must not resolve to a
    /// private address unless `webhooks.allow_private_networks`.
    #[schema(value_type = String)]
    pub url: Option<String>,
    /// Event kinds, `run.*` aliases or wildcards (`*`, `payroll.run.*`, `run.*`, `payout.*`).
    #[schema(value_type = Vec<String>)]
    pub events: Option<Vec<String>>,
    pub description: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyRequest {}

async fn find_endpoint(req: &ApiRequest, id: &str) -> Result<webhook_endpoint::Model, ApiError> {
    let endpoint = find_resource::<webhook_endpoint::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::Webhook,
        "webhook_endpoint",
        id,
        false,
    )
    .await?;
    if endpoint.deleted_at.is_some() {
        return Err(ApiError::not_found("webhook_endpoint", id));
    }
    Ok(endpoint)
}

fn not_active(endpoint: &webhook_endpoint::Model, operation: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidStatusTransition,
        format!(
            "The endpoint is DISABLED ({}); {operation} needs an ACTIVE endpoint.",
            endpoint.disabled_reason.as_deref().unwrap_or("disabled")
        ),
    )
    .detail("current_status", endpoint.status.as_str())
    .detail("allowed_transitions", json!(["ACTIVE"]))
    .detail(
        "allowed_operations",
        json!(["enable", "delete", "rotate-secret"]),
    )
    .hint(format!(
        "Fix the receiver, then POST /api/v1/webhooks/{}/enable and try again.",
        endpoint.id
    ))
}

fn wake(req: &ApiRequest, endpoint_id: &str) {
    req.state().webhooks.counted_do_send(EndpointChanged {
        endpoint_id: endpoint_id.to_owned(),
    });
}

/// Register a webhook endpoint for event kinds; its signing secret is shown this once.
#[utoipa::path(post, path = "/webhooks", operation_id = "createWebhook", tag = "webhooks",
    request_body = CreateWebhookRequest,
    responses((status = 201, description = "The endpoint with its signing `secret`, shown this once", body = WebhookEndpointResource)))]
#[tracing::instrument(skip_all)]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let (body, mut errors) = req.json_partial::<CreateWebhookRequest>()?;
    let state = req.state();
    let policy = state.settings.webhooks.policy();
    // Events first (CONTRACT §10), then the URL.
    let mut checks = Vec::new();
    match &body.events {
        None => checks.push(FieldError::new(
            "events",
            format!("required: a non-empty list of {}", valid_patterns_hint()),
        )),
        Some(events) if events.is_empty() => checks.push(FieldError::new(
            "events",
            format!("must not be empty; choose from {}", valid_patterns_hint()),
        )),
        Some(events) if events.len() > MAX_EVENTS => checks.push(FieldError::new(
            "events",
            format!("at most {MAX_EVENTS} entries"),
        )),
        Some(events) => {
            for (i, e) in events.iter().enumerate() {
                if !is_valid_pattern(e) {
                    checks.push(FieldError::new(
                        format!("events[{i}]"),
                        format!("unknown event kind `{e}`; valid: {}", valid_patterns_hint()),
                    ));
                }
            }
        }
    }
    crate::http::body::check_text(
        &mut checks,
        "description",
        body.description.as_deref(),
        DESCRIPTION_MAX,
    );
    let url = match &body.url {
        None => {
            checks.push(FieldError::new(
                "url",
                "required: the https:// URL that receives the events",
            ));
            None
        }
        Some(raw) => match policy.check_url(raw.trim()) {
            Ok(url) => Some(url),
            Err(refused) => {
                checks.push(FieldError::new("url", refused.0));
                None
            }
        },
    };
    crate::http::body::merge_errors(&mut errors, checks);
    if errors.is_empty()
        && let Some(url) = &url
        && let Err(refused) = policy.check_url_resolved(url.as_str()).await
    {
        errors.push(FieldError::new("url", refused.0));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let (Some(url), Some(mut events)) = (url, body.events) else {
        return Err(ApiError::internal("validated webhook body lost its fields"));
    };
    events.dedup();
    // An endpoint receives only what the key registering it could read (CONTRACT §10).
    let caller = req.caller()?;
    let missing: Vec<&str> = subscriptions::read_scopes_for(&events)
        .into_iter()
        .filter(|s| !auth::may_delegate(&caller.scopes, s))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::insufficient_scope(&missing, &caller.scopes).hint(
            "An endpoint receives only what the key registering it could read: subscribe to events whose objects this key may read, or use a key with the named scopes.",
        ));
    }
    let secret = signing::generate_secret();
    let sealed = state.secrets.seal(&secret).map_err(ApiError::internal)?;
    let now = time::now();
    let model = webhook_endpoint::Model {
        id: ids::new_id(ids::IdKind::Webhook),
        url: url.to_string(),
        events: json!(events),
        description: body.description.filter(|d| !d.trim().is_empty()),
        status: WebhookStatus::Active,
        disabled_reason: None,
        disabled_at: None,
        secret: sealed,
        previous_secret: None,
        previous_secret_expires_at: None,
        created_by_key_id: req.caller().ok().map(|c| c.key_id.clone()),
        created_at: now,
        updated_at: now,
        deleted_at: None,
    };
    let tx = state.db.begin_write().await?;
    // At most webhooks.max_endpoints at once: counted under a lock of this schema's endpoints
    // (PostgreSQL; SQLite's writers are one at a time), so two registrations cannot both take
    // the last place.
    if tx.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        tx.execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtext('payroll_webhook_endpoints:' || current_schema()))",
        )
        .await?;
    }
    let limit = u64::from(state.settings.webhooks.max_endpoints);
    let existing = webhook_endpoint::Entity::find()
        .filter(webhook_endpoint::Column::DeletedAt.is_null())
        .count(&*tx)
        .await?;
    if existing >= limit {
        return Err(ApiError::new(
            ErrorCode::WebhookLimitReached,
            format!("{existing} webhook endpoints exist; at most {limit} may."),
        )
        .detail("limit", limit));
    }
    webhook_endpoint::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let shown = WebhookEndpointResource::from(&model).with_secret(secret);
    let record = AuditRecord::new("WEBHOOK_CREATED", "webhook_endpoint", &model.id)
        .details(json!({"url": model.url, "events": events}));
    req.commit(
        tx,
        StatusCode::CREATED,
        &shown,
        Some(&shown.redacted()),
        record,
    )
    .await
}

/// List webhook endpoints (without secrets).
#[utoipa::path(get, path = "/webhooks", operation_id = "listWebhooks", tag = "webhooks",
    params(("status" = Option<WebhookStatus>, Query),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Endpoints, newest first (no secrets)", body = Vec<WebhookEndpointResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed("status", WebhookStatus::parse, &WebhookStatus::spellings());
    let page = query.page();
    query.finish(&["status", "limit", "offset"])?;
    let mut select =
        webhook_endpoint::Entity::find().filter(webhook_endpoint::Column::DeletedAt.is_null());
    if let Some(status) = status {
        select = select.filter(webhook_endpoint::Column::Status.eq(status));
    }
    let db = &req.state().db.conn;
    let (rows, total) =
        fetch_page(db, select.order_by_desc(webhook_endpoint::Column::Id), page).await?;
    let items: Vec<WebhookEndpointResource> =
        rows.iter().map(WebhookEndpointResource::from).collect();
    req.list(&items, page, total)
}

/// Get one webhook endpoint (without its secret).
#[utoipa::path(get, path = "/webhooks/{webhook_id}", operation_id = "getWebhook", tag = "webhooks",
    params(("webhook_id" = String, Path)),
    responses((status = 200, description = "The endpoint (no secret)", body = WebhookEndpointResource)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    req.ok(&WebhookEndpointResource::from(&endpoint))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeletedWebhook {
    pub id: String,
    pub deleted: bool,
}

/// Delete a webhook endpoint: no more deliveries, its pending ones fail; its record stays.
#[utoipa::path(delete, path = "/webhooks/{webhook_id}", operation_id = "deleteWebhook", tag = "webhooks",
    params(("webhook_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "Deleted: no more deliveries; its pending ones fail. Its deliveries stay on record.", body = DeletedWebhook)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn delete(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    let now = time::now();
    let tx = req.state().db.begin_write().await?;
    let mut active = endpoint.clone().into_active_model();
    active.deleted_at = Set(Some(now));
    active.updated_at = Set(now);
    active.update(&*tx).await?;
    let failed = fail_pending(&*tx, &endpoint.id, "endpoint deleted").await?;
    let record = AuditRecord::new("WEBHOOK_DELETED", "webhook_endpoint", &endpoint.id)
        .details(json!({"url": endpoint.url, "pending_deliveries_failed": failed}));
    let shown = DeletedWebhook {
        id: endpoint.id.clone(),
        deleted: true,
    };
    let response = req
        .commit::<_, DeletedWebhook>(tx, StatusCode::OK, &shown, None, record)
        .await;
    wake(&req, &endpoint.id);
    response
}

/// Enable a DISABLED webhook endpoint again.
#[utoipa::path(post, path = "/webhooks/{webhook_id}/enable", operation_id = "enableWebhook", tag = "webhooks",
    params(("webhook_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The endpoint, ACTIVE again (deliveries that failed stay FAILED: retry them one by one)", body = WebhookEndpointResource)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn enable(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    let tx = req.state().db.begin_write().await?;
    let before = endpoint.status;
    let enabled = if before == WebhookStatus::Active {
        endpoint
    } else {
        let mut active = endpoint.into_active_model();
        active.status = Set(WebhookStatus::Active);
        active.disabled_reason = Set(None);
        active.disabled_at = Set(None);
        active.updated_at = Set(time::now());
        active.update(&*tx).await?
    };
    let record = AuditRecord::new("WEBHOOK_ENABLED", "webhook_endpoint", &enabled.id)
        .details(json!({"before": {"status": before}, "after": {"status": WebhookStatus::Active}}));
    let shown = WebhookEndpointResource::from(&enabled);
    req.commit::<_, WebhookEndpointResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

/// Rotate a webhook endpoint's signing secret; the new one is shown this once.
#[utoipa::path(post, path = "/webhooks/{webhook_id}/rotate-secret", operation_id = "rotateWebhookSecret", tag = "webhooks",
    params(("webhook_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The endpoint with its new `secret`; the previous one keeps signing beside it for `webhooks.secret_rotation_grace_seconds`", body = WebhookEndpointResource)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn rotate_secret(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    find_endpoint(&req, req.param("webhook_id")).await?;
    let state = req.state();
    let secret = signing::generate_secret();
    let sealed = state.secrets.seal(&secret).map_err(ApiError::internal)?;
    let now = time::now();
    let grace = chrono::Duration::seconds(
        i64::try_from(state.settings.webhooks.secret_rotation_grace_seconds).unwrap_or(86_400),
    );
    let tx = state.db.begin_write().await?;
    // Read again under the lock, so two rotations at once each keep the secret before them.
    let endpoint = find_resource::<webhook_endpoint::Entity, _>(
        &*tx,
        ids::IdKind::Webhook,
        "webhook_endpoint",
        req.param("webhook_id"),
        true,
    )
    .await?;
    let mut active = endpoint.clone().into_active_model();
    active.previous_secret = Set(Some(endpoint.secret.clone()));
    active.previous_secret_expires_at = Set(Some(now + grace));
    active.secret = Set(sealed);
    active.updated_at = Set(now);
    let rotated = active.update(&*tx).await?;
    let record = AuditRecord::new("WEBHOOK_SECRET_ROTATED", "webhook_endpoint", &rotated.id)
        .details(json!({"previous_secret_signs_until": time::format(&(now + grace))}));
    let shown = WebhookEndpointResource::from(&rotated).with_secret(secret);
    let response = req
        .commit(tx, StatusCode::OK, &shown, Some(&shown.redacted()), record)
        .await;
    wake(&req, &rotated.id);
    response
}

/// Send a webhook.test event to one endpoint.
#[utoipa::path(post, path = "/webhooks/{webhook_id}/test", operation_id = "testWebhook", tag = "webhooks",
    params(("webhook_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 202, description = "A `webhook.test` event on its way to this endpoint alone", body = DeliveryResource)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn test(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    if endpoint.status != WebhookStatus::Active {
        return Err(not_active(&endpoint, "test"));
    }
    let event = event::Model {
        id: ids::new_id(ids::IdKind::Event),
        event_type: "webhook.test".to_owned(),
        resource_id: endpoint.id.clone(),
        created_at: time::now(),
        // The object names the endpoint only: events are listed to payroll:read keys.
        data: json!({"object": {"id": endpoint.id, "type": "webhook_endpoint"}}),
    };
    let delivery = new_delivery(&endpoint.id, &event);
    let tx = req.state().db.begin_write().await?;
    event::Entity::insert(event.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    insert_deliveries(&tx, vec![delivery.clone()]).await?;
    let record = AuditRecord::new("WEBHOOK_TEST_SENT", "webhook_endpoint", &endpoint.id)
        .details(json!({"event_id": event.id, "delivery_id": delivery.id}));
    let shown = DeliveryResource::new(delivery, Vec::new());
    let response = req
        .commit::<_, DeliveryResource>(tx, StatusCode::ACCEPTED, &shown, None, record)
        .await;
    wake(&req, &endpoint.id);
    response
}

/// List an endpoint's deliveries with every attempt, newest first.
#[utoipa::path(get, path = "/webhooks/{webhook_id}/deliveries", operation_id = "listWebhookDeliveries", tag = "webhooks",
    params(("webhook_id" = String, Path),
        ("status" = Option<DeliveryStatus>, Query),
        ("event_type" = Option<String>, Query, description = "an event kind"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Deliveries with every attempt, newest first", body = Vec<DeliveryResource>)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id")))]
pub async fn deliveries(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed(
        "status",
        DeliveryStatus::parse,
        &DeliveryStatus::spellings(),
    );
    let event_type = query.str("event_type");
    let page = query.page();
    query.finish(&["status", "event_type", "limit", "offset"])?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    let db = &req.state().db.conn;
    let mut select = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::EndpointId.eq(endpoint.id.as_str()));
    if let Some(status) = status {
        select = select.filter(webhook_delivery::Column::Status.eq(status));
    }
    if let Some(kind) = event_type {
        let canonical = super::events::kind_filter("event_type", &kind)?;
        select = select.filter(webhook_delivery::Column::EventType.eq(canonical));
    }
    let (rows, total) =
        fetch_page(db, select.order_by_desc(webhook_delivery::Column::Id), page).await?;
    let mut attempts = attempts_of(db, rows.iter().map(|d| d.id.clone()).collect()).await?;
    let items: Vec<DeliveryResource> = rows
        .into_iter()
        .map(|d| {
            let mine = attempts.remove(&d.id).unwrap_or_default();
            DeliveryResource::new(d, mine)
        })
        .collect();
    req.list(&items, page, total)
}

async fn attempts_of(
    db: &sea_orm::DatabaseConnection,
    delivery_ids: Vec<String>,
) -> Result<HashMap<String, Vec<webhook_attempt::Model>>, ApiError> {
    let mut by_delivery: HashMap<String, Vec<webhook_attempt::Model>> = HashMap::new();
    if delivery_ids.is_empty() {
        return Ok(by_delivery);
    }
    let rows = webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::DeliveryId.is_in(delivery_ids))
        .order_by_asc(webhook_attempt::Column::DeliveryId)
        .order_by_asc(webhook_attempt::Column::Attempt)
        .all(db)
        .await?;
    for row in rows {
        by_delivery
            .entry(row.delivery_id.clone())
            .or_default()
            .push(row);
    }
    Ok(by_delivery)
}

/// Deliver a final (SUCCEEDED or FAILED) webhook delivery of an ACTIVE endpoint once more, now.
#[utoipa::path(post, path = "/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", operation_id = "retryWebhookDelivery", tag = "webhooks",
    params(("webhook_id" = String, Path), ("delivery_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 202, description = "The delivery, PENDING again: one more attempt now (no scheduled retries after it)", body = DeliveryResource)))]
#[tracing::instrument(skip_all, fields(webhook_id = %req.param("webhook_id"), delivery_id = %req.param("delivery_id")))]
pub async fn retry_delivery(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let endpoint = find_endpoint(&req, req.param("webhook_id")).await?;
    let delivery_id = req.param("delivery_id");
    let db = &req.state().db;
    let delivery = find_resource::<webhook_delivery::Entity, _>(
        &db.conn,
        ids::IdKind::Delivery,
        "webhook_delivery",
        delivery_id,
        false,
    )
    .await?;
    if delivery.endpoint_id != endpoint.id {
        return Err(ApiError::not_found("webhook_delivery", delivery_id));
    }
    if endpoint.status != WebhookStatus::Active {
        return Err(not_active(&endpoint, "retrying a delivery"));
    }
    let tx = db.begin_write().await?;
    // Only a delivery that is final can be sent again; a PENDING one is already on its way.
    let updated = match webhook_store::retry_by_hand(&tx, &delivery).await? {
        Ok(updated) => updated,
        Err(refused) => {
            return Err(ApiError::new(
                ErrorCode::InvalidStatusTransition,
                format!(
                    "This delivery is {}: its next attempt is already scheduled.",
                    refused.current.as_str()
                ),
            )
            .detail("current_status", refused.current.as_str())
            .detail("allowed_transitions", json!(refused.allowed_transitions))
            .detail("allowed_operations", json!([]))
            .hint(format!(
                "Wait for it (next_attempt_at), then retry it if it ends FAILED; GET /api/v1/webhooks/{}/deliveries shows it.",
                endpoint.id
            )));
        }
    };
    let record = AuditRecord::new("WEBHOOK_DELIVERY_RETRIED", "webhook_delivery", &delivery.id)
        .details(json!({"webhook_id": endpoint.id, "before": {"status": delivery.status}, "after": {"status": DeliveryStatus::Pending}}));
    let attempts = attempts_of(&db.conn, vec![updated.id.clone()])
        .await?
        .remove(&updated.id)
        .unwrap_or_default();
    let shown = DeliveryResource::new(updated, attempts);
    let response = req
        .commit::<_, DeliveryResource>(tx, StatusCode::ACCEPTED, &shown, None, record)
        .await;
    wake(&req, &endpoint.id);
    response
}
