//! `/api-keys`: issue, list, show, rotate and revoke API keys (scope `keys:manage`).

use actix_web::{HttpResponse, http::StatusCode};
use chrono::Duration;
use payroll_entities::{api_key, ids, time};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::http::key_cache::announce_key_change;
use crate::http::query::fetch_page;
use crate::http::{
    audit::AuditRecord,
    auth,
    dates::{DateInput, DayEdge},
    error::{ApiError, FieldError},
    keys::{self, ApiKeyResource},
    request::ApiRequest,
    resource::find_resource,
};

/// Most characters in a key's name.
pub const NAME_MAX: usize = 200;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyRequest {
    /// A name saying who or what uses the key.
    #[schema(value_type = String)]
    pub name: Option<String>,
    /// Scopes or wildcards (`payroll:*`); each must be held by the calling key.
    #[schema(value_type = Vec<String>)]
    pub scopes: Option<Vec<String>>,
    /// When the key stops working (date-time, or a date meaning its start); none means never.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateInput>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyRequest {}

/// 403 naming the scopes of `scopes` the caller lacks, if any.
fn holds_every_scope(req: &ApiRequest, scopes: &[String]) -> Result<(), ApiError> {
    let caller = req.caller()?;
    let beyond: Vec<&str> = scopes
        .iter()
        .filter(|s| !auth::may_delegate(&caller.scopes, s))
        .map(String::as_str)
        .collect();
    if beyond.is_empty() {
        Ok(())
    } else {
        Err(ApiError::insufficient_scope(&beyond, &caller.scopes))
    }
}

async fn find_key(req: &ApiRequest, id: &str) -> Result<api_key::Model, ApiError> {
    find_resource::<api_key::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::ApiKey,
        "api_key",
        id,
        false,
    )
    .await
}

/// List API keys (never their secrets).
#[utoipa::path(get, path = "/api-keys", operation_id = "listApiKeys", tag = "api-keys",
    params(("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "API keys, newest first", body = Vec<ApiKeyResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let page = query.page();
    query.finish(&["limit", "offset"])?;
    let db = &req.state().db.conn;
    let select = api_key::Entity::find().order_by_desc(api_key::Column::Id);
    let (rows, total) = fetch_page(db, select, page).await?;
    let now = time::now();
    let items: Vec<ApiKeyResource> = rows
        .iter()
        .map(|k| ApiKeyResource::from_model(k, now))
        .collect();
    req.list(&items, page, total)
}

/// Create an API key with scopes the calling key holds; its plaintext is shown this once.
#[utoipa::path(post, path = "/api-keys", operation_id = "createApiKey", tag = "api-keys",
    request_body = CreateApiKeyRequest,
    responses((status = 201, description = "The new key; `key` is its plaintext, shown this once", body = ApiKeyResource)))]
#[tracing::instrument(skip_all)]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let body: CreateApiKeyRequest = req.json()?;
    let caller = req.caller()?;
    let mut errors = Vec::new();
    let name = body.name.unwrap_or_default();
    if name.trim().is_empty() {
        errors.push(FieldError::new("name", "required: a non-empty name"));
    } else if name.chars().count() > NAME_MAX {
        errors.push(FieldError::new(
            "name",
            format!("at most {NAME_MAX} characters"),
        ));
    } else if let Some(problem) = crate::http::body::text_problem(&name) {
        errors.push(FieldError::new("name", problem));
    }
    let scopes = body.scopes.unwrap_or_default();
    if scopes.is_empty() {
        errors.push(FieldError::new(
            "scopes",
            "required: a non-empty list of scopes",
        ));
    }
    for (i, scope) in scopes.iter().enumerate() {
        if !auth::is_known_scope(scope) {
            errors.push(FieldError::new(
                format!("scopes[{i}]"),
                format!(
                    "unknown scope `{scope}`; known: {}, {}",
                    auth::all_scope_names().join(", "),
                    auth::Scope::WILDCARDS.join(", ")
                ),
            ));
        }
    }
    let now = time::now();
    let expires_at = body.expires_at.map(|d| d.resolve(DayEdge::Start));
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    // A time already past is a conflict with the clock, not a malformed body (409).
    if let Some(at) = expires_at.filter(|t| *t <= now) {
        return Err(ApiError::state_conflict(vec![FieldError::new(
            "expires_at",
            format!(
                "{} is already past: give a time in the future",
                time::format(&at)
            ),
        )]));
    }
    let beyond: Vec<&str> = scopes
        .iter()
        .filter(|s| !auth::may_delegate(&caller.scopes, s))
        .map(String::as_str)
        .collect();
    if !beyond.is_empty() {
        return Err(ApiError::insufficient_scope(&beyond, &caller.scopes)
            .hint("A key can only be given scopes its creator holds; ask a key holding them to create it."));
    }
    let mut scopes = scopes;
    scopes.dedup();
    let state = req.state();
    let (model, plaintext) = keys::new_key(
        state.pepper.expose().as_bytes(),
        name.trim(),
        &scopes,
        expires_at,
        None,
    );
    let tx = state.db.begin_write().await?;
    api_key::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let shown = ApiKeyResource::from_model(&model, now).with_plaintext(plaintext);
    let record = AuditRecord::new("API_KEY_CREATED", "api_key", &model.id)
        .details(json!({"name": model.name, "scopes": scopes}));
    req.commit(
        tx,
        StatusCode::CREATED,
        &shown,
        Some(&shown.redacted()),
        record,
    )
    .await
}

/// Get one API key (never its secret).
#[utoipa::path(get, path = "/api-keys/{key_id}", operation_id = "getApiKey", tag = "api-keys",
    params(("key_id" = String, Path)),
    responses((status = 200, description = "The key", body = ApiKeyResource)))]
#[tracing::instrument(skip_all, fields(key_id = %req.param("key_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let key = find_key(&req, req.param("key_id")).await?;
    req.ok(&ApiKeyResource::from_model(&key, time::now()))
}

/// Get the calling API key, to learn its scopes. Called with an agent session's token, it
/// answers the session in the same shape (`id` `ses_…`, `name` its description).
#[utoipa::path(get, path = "/api-keys/current", operation_id = "getCurrentApiKey", tag = "api-keys",
    responses((status = 200, description = "The calling key (never its secret): its scopes tell a client what it may do", body = ApiKeyResource)))]
#[tracing::instrument(skip_all)]
pub async fn current(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let caller = req
        .caller
        .as_ref()
        .ok_or_else(|| ApiError::internal("an authenticated route without a caller"))?;
    let key = find_key(&req, &caller.key_id).await?;
    let now = time::now();
    // An agent session is shown as the credential it is, in the key's shape: its id, its
    // description as the name, its own scopes and status.
    if let Some(session_id) = &caller.session_id {
        let session = payroll_entities::agent_session::Entity::find_by_id(session_id.as_str())
            .one(&req.state().db.conn)
            .await?
            .ok_or_else(|| ApiError::not_found("agent_session", session_id))?;
        let status = crate::http::callers::session_status(&session, Some(&key), now).0;
        return req.ok(&ApiKeyResource {
            id: session.id,
            name: session.description,
            prefix: session.prefix,
            scopes: auth::parse_scope_list(&session.scopes),
            status,
            expires_at: Some(session.expires_at.into()),
            last_used_at: session.last_used_at.map(Into::into),
            created_at: session.created_at.into(),
            rotated_from: None,
            key: None,
        });
    }
    req.ok(&ApiKeyResource::from_model(&key, now))
}

/// Only an ACTIVE key is rotated (409 otherwise).
fn rotatable(key: &api_key::Model, now: chrono::DateTime<chrono::Utc>) -> Result<(), ApiError> {
    let (status, _) = auth::key_status(key, now);
    if status == payroll_entities::ApiKeyStatus::Active {
        return Ok(());
    }
    Err(ApiError::new(
        crate::http::error::ErrorCode::InvalidStatusTransition,
        format!("Only an ACTIVE key can be rotated; this one is {status}."),
    )
    .detail("current_status", status.as_str())
    .detail("allowed_operations", json!([]))
    .detail("allowed_transitions", json!([]))
    .hint("Create a new key with POST /api/v1/api-keys instead."))
}

/// Rotate an API key: a new key is issued and the old one keeps working for the grace period.
#[utoipa::path(post, path = "/api-keys/{key_id}/rotate", operation_id = "rotateApiKey", tag = "api-keys",
    params(("key_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 201, description = "The new key with the same name and scopes; the old one works for `auth.rotation_grace_seconds` more", body = ApiKeyResource)))]
#[tracing::instrument(skip_all, fields(key_id = %req.param("key_id")))]
pub async fn rotate(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let old = find_key(&req, req.param("key_id")).await?;
    let now = time::now();
    rotatable(&old, now)?;
    let scopes = auth::parse_scope_list(&old.scopes);
    holds_every_scope(&req, &scopes).map_err(|e| {
        e.hint("Rotating a key issues a new key with its scopes; only a key holding all of them may rotate it.")
    })?;
    let state = req.state();
    let (model, plaintext) = keys::new_key(
        state.pepper.expose().as_bytes(),
        &old.name,
        &scopes,
        old.expires_at,
        Some(&old),
    );
    let grace_end = now + Duration::seconds(state.settings.auth.rotation_grace_seconds as i64);
    let tx = state.db.begin_write().await?;
    // One successor a key: the old key's row is locked, then its successor looked for, so two
    // rotations at once make one key and a 409.
    // Judged again on the locked row: a revocation that committed since the read above wins.
    let locked = api_key::Entity::find_by_id(old.id.clone())
        .lock_exclusive()
        .one(&*tx)
        .await?
        .unwrap_or_else(|| old.clone());
    rotatable(&locked, now)?;
    if let Some(successor) = api_key::Entity::find()
        .filter(api_key::Column::RotatedFrom.eq(old.id.as_str()))
        .one(&*tx)
        .await?
    {
        return Err(ApiError::new(
            crate::http::error::ErrorCode::KeyAlreadyRotated,
            format!("Key {} was rotated already, to {}.", old.id, successor.id),
        )
        .detail("successor_key_id", successor.id));
    }
    api_key::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let mut retiring = old.clone().into_active_model();
    retiring.grace_expires_at = Set(Some(
        old.grace_expires_at.map_or(grace_end, |g| g.min(grace_end)),
    ));
    retiring.update(&*tx).await?;
    announce_key_change(&*tx, &old.key_hash).await?;
    let shown = ApiKeyResource::from_model(&model, now).with_plaintext(plaintext);
    let record = AuditRecord::new("API_KEY_ROTATED", "api_key", &model.id).details(json!({
        "rotated_from": old.id,
        "old_key_valid_until": time::format(&grace_end),
    }));
    let answer = req
        .commit(
            tx,
            StatusCode::CREATED,
            &shown,
            Some(&shown.redacted()),
            record,
        )
        .await;
    // Its grace end applies from the next request on.
    state.verified_keys.forget(&old.key_hash);
    answer
}

/// Revoke an API key at once; it cannot be undone.
#[utoipa::path(delete, path = "/api-keys/{key_id}", operation_id = "revokeApiKey", tag = "api-keys",
    params(("key_id" = String, Path)),
    responses((status = 200, description = "The key, now REVOKED", body = ApiKeyResource)))]
#[tracing::instrument(skip_all, fields(key_id = %req.param("key_id")))]
pub async fn revoke(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let key = find_key(&req, req.param("key_id")).await?;
    // Revoking, like rotating, needs every scope of the target; a key may always revoke itself.
    let caller = req.caller()?;
    if caller.session_id.is_some() || caller.key_id != key.id {
        holds_every_scope(&req, &auth::parse_scope_list(&key.scopes)).map_err(|e| {
            e.hint("Revoking a key needs every scope it holds; a key holding all of them (or the key itself) may revoke it.")
        })?;
    }
    let now = time::now();
    let tx = req.state().db.begin_write().await?;
    let hash = key.key_hash.clone();
    let revoked = if key.revoked_at.is_some() {
        key
    } else {
        let mut active = key.into_active_model();
        active.revoked_at = Set(Some(now));
        let revoked = active.update(&*tx).await?;
        announce_key_change(&*tx, &hash).await?;
        revoked
    };
    // Its agent sessions end with it (CONTRACT §2, §16).
    crate::routes::agent_sessions::revoke_sessions_of(&*tx, &revoked.id, now).await?;
    payroll_actors::approvals::reject_pending_of(
        &tx,
        payroll_actors::approvals::Revoked::Key(&revoked.id),
        "the requesting API key (or the key of the requesting agent session) was revoked",
    )
    .await?;
    let shown = ApiKeyResource::from_model(&revoked, now);
    let record = AuditRecord::new("API_KEY_REVOKED", "api_key", &revoked.id);
    let answer = req
        .commit::<_, ApiKeyResource>(tx, StatusCode::OK, &shown, None, record)
        .await;
    // Refused from the next request on, not after the cache's moment.
    req.state().verified_keys.forget(&hash);
    answer
}
