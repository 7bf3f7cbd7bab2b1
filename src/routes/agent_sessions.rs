//! `/agent-sessions`: a key delegates part of its scopes to an agent for a bounded time
//! (CONTRACT §16). The token is shown once and stored as a keyed hash; a session never holds
//! `keys:manage`, `treasury:write` or `payroll:approve`, and never creates keys or sessions.

use actix_web::{HttpResponse, http::StatusCode};
use chrono::{DateTime, Duration, Utc};
use payroll_actors::views::Timestamp;
use payroll_entities::{ApiKeyStatus, agent_session, api_key, ids, time};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::http::{
    audit::AuditRecord,
    auth::{self, Scope},
    callers::session_status,
    dates::{DateInput, DayEdge},
    error::{ApiError, FieldError},
    query::fetch_page,
    request::{ApiRequest, Caller},
    resource::find_resource,
};

/// Most characters in a session's description.
pub const DESCRIPTION_MAX: usize = 200;

/// The scopes (and wildcards) a session may be given: every one but the humans' own.
pub fn delegable_scopes() -> Vec<String> {
    let mut names: Vec<String> = Scope::ALL
        .iter()
        .map(|s| s.as_str().to_owned())
        .chain(Scope::WILDCARDS.iter().map(|w| (*w).to_owned()))
        .filter(|name| !auth::is_human_only(name))
        .collect();
    names.sort();
    names
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentSessionRequest {
    /// Scopes or wildcards delegated to the agent: each held by the calling key, and never
    /// `keys:manage`, `treasury:write` (or `treasury:*`) or `payroll:approve`.
    #[schema(value_type = Vec<String>)]
    pub scopes: Option<Vec<String>>,
    /// When the session ends (date-time, or a date meaning its start): at most
    /// `agent_sessions.max_hours` (default 24) ahead, which is also the default.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateInput>,
    /// What the agent is for, shown in the audit log and on approvals (1–200 characters).
    #[schema(value_type = String)]
    pub description: Option<String>,
}

/// An agent session as the API shows it; `token` only in the create answer (`null` in its
/// idempotent replay).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgentSessionResource {
    pub id: String,
    pub description: String,
    pub scopes: Vec<String>,
    pub status: ApiKeyStatus,
    pub expires_at: Timestamp,
    pub created_by_key_id: String,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    /// The first 12 characters of the token, to recognise it.
    pub prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<Option<String>>,
}

impl AgentSessionResource {
    pub fn new(
        model: &agent_session::Model,
        creator: Option<&api_key::Model>,
        now: DateTime<Utc>,
    ) -> AgentSessionResource {
        AgentSessionResource {
            id: model.id.clone(),
            description: model.description.clone(),
            scopes: auth::parse_scope_list(&model.scopes),
            status: session_status(model, creator, now).0,
            expires_at: model.expires_at.into(),
            created_by_key_id: model.created_by_key_id.clone(),
            created_at: model.created_at.into(),
            last_used_at: model.last_used_at.map(Timestamp::from),
            prefix: model.prefix.clone(),
            token: None,
        }
    }
}

/// Whether `caller` may see (and revoke) `session`: its creator's lineage, a key with
/// `keys:manage`, or the session itself.
fn may_see(caller: &Caller, session: &agent_session::Model) -> bool {
    caller.session_id.as_deref() == Some(session.id.as_str())
        || (caller.session_id.is_none()
            && (caller.key_lineage_id == session.lineage_id
                || auth::grants(&caller.scopes, Scope::KeysManage)))
}

async fn creator_of(
    req: &ApiRequest,
    session: &agent_session::Model,
) -> Result<Option<api_key::Model>, ApiError> {
    Ok(
        api_key::Entity::find_by_id(session.created_by_key_id.as_str())
            .one(&req.state().db.conn)
            .await?,
    )
}

/// The session `id` if the caller may see it, else 404 (another's session is not revealed).
async fn find_session(req: &ApiRequest, id: &str) -> Result<agent_session::Model, ApiError> {
    let session = find_resource::<agent_session::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::AgentSession,
        "agent_session",
        id,
        false,
    )
    .await?;
    if may_see(req.caller()?, &session) {
        Ok(session)
    } else {
        Err(ApiError::not_found("agent_session", id))
    }
}

/// Create an agent session: part of the calling key's scopes, for a bounded time.
///
/// The token (`mps_live_…`) is shown this once; it is a Bearer credential like a key. A
/// session cannot create keys or sessions.
#[utoipa::path(post, path = "/agent-sessions", operation_id = "createAgentSession", tag = "agent-sessions",
    request_body = CreateAgentSessionRequest,
    responses((status = 201, description = "The new session; `token` is its Bearer credential, shown this once", body = AgentSessionResource)))]
#[tracing::instrument(skip_all)]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let caller = req.caller()?.clone();
    if caller.session_id.is_some() {
        return Err(ApiError::session_refused(
            "create agent sessions",
            &caller.scopes,
        ));
    }
    let body: CreateAgentSessionRequest = req.json()?;
    let mut errors = Vec::new();
    let description = body.description.unwrap_or_default();
    if description.trim().is_empty() {
        errors.push(FieldError::new(
            "description",
            "required: what the agent is for (1 to 200 characters)",
        ));
    } else {
        crate::http::body::check_text(
            &mut errors,
            "description",
            Some(&description),
            DESCRIPTION_MAX,
        );
    }
    let scopes = body.scopes.unwrap_or_default();
    if scopes.is_empty() {
        errors.push(FieldError::new(
            "scopes",
            "required: a non-empty list of scopes",
        ));
    }
    let delegable = delegable_scopes();
    for (i, scope) in scopes.iter().enumerate() {
        if !delegable.contains(scope) {
            let why = if auth::is_known_scope(scope) {
                format!(
                    "`{scope}` belongs to humans: an agent session never holds keys:manage, treasury:write or payroll:approve"
                )
            } else {
                format!("unknown scope `{scope}`")
            };
            errors.push(FieldError::new(
                format!("scopes[{i}]"),
                format!("{why}; a session takes: {}", delegable.join(", ")),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let beyond: Vec<&str> = scopes
        .iter()
        .filter(|s| !auth::may_delegate(&caller.scopes, s))
        .map(String::as_str)
        .collect();
    if !beyond.is_empty() {
        return Err(ApiError::insufficient_scope(&beyond, &caller.scopes)
            .hint("A session is given only scopes its creating key holds."));
    }
    let state = req.state();
    let now = time::now();
    let max_hours = state.settings.agent_sessions.max_hours;
    let latest = now + Duration::hours(max_hours as i64);
    let expires_at = body.expires_at.map(|d| d.resolve(DayEdge::Start));
    // Times the clock refuses are conflicts, not malformed bodies (409).
    match expires_at {
        Some(at) if at <= now => {
            return Err(ApiError::state_conflict(vec![FieldError::new(
                "expires_at",
                format!(
                    "{} is already past: give a time in the future",
                    time::format(&at)
                ),
            )]));
        }
        Some(at) if at > latest => {
            return Err(ApiError::state_conflict(vec![FieldError::new(
                "expires_at",
                format!(
                    "at most agent_sessions.max_hours ({max_hours}) ahead: {} at the latest",
                    time::format(&latest)
                ),
            )]));
        }
        _ => {}
    }
    let mut scopes = scopes;
    scopes.sort();
    scopes.dedup();
    let token = auth::generate_session_token();
    let model = agent_session::Model {
        id: ids::new_id(ids::IdKind::AgentSession),
        description: description.trim().to_owned(),
        scopes: scopes.join(","),
        prefix: token.chars().take(auth::DISPLAY_PREFIX_LEN).collect(),
        token_hash: auth::hash_key(state.pepper.expose().as_bytes(), &token),
        created_by_key_id: caller.key_id.clone(),
        lineage_id: caller.key_lineage_id.clone(),
        expires_at: expires_at.unwrap_or(latest),
        revoked_at: None,
        last_used_at: None,
        created_at: now,
    };
    let tx = state.db.begin_write().await?;
    agent_session::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let creator = api_key::Entity::find_by_id(caller.key_id.as_str())
        .one(&*tx)
        .await?;
    let mut shown = AgentSessionResource::new(&model, creator.as_ref(), now);
    let mut kept = shown.clone();
    kept.token = Some(None);
    shown.token = Some(Some(token));
    let record = AuditRecord::new("AGENT_SESSION_CREATED", "agent_session", &model.id).details(
        json!({"description": model.description, "scopes": scopes, "expires_at": time::format(&model.expires_at)}),
    );
    req.commit(tx, StatusCode::CREATED, &shown, Some(&kept), record)
        .await
}

/// List agent sessions: the calling key's own (every one with `keys:manage`).
#[utoipa::path(get, path = "/agent-sessions", operation_id = "listAgentSessions", tag = "agent-sessions",
    params(("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Agent sessions, newest first (never their tokens)", body = Vec<AgentSessionResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let page = query.page();
    query.finish(&["limit", "offset"])?;
    let caller = req.caller()?;
    let mut select = agent_session::Entity::find();
    if let Some(own) = &caller.session_id {
        select = select.filter(agent_session::Column::Id.eq(own.as_str()));
    } else if !auth::grants(&caller.scopes, Scope::KeysManage) {
        select = select.filter(agent_session::Column::LineageId.eq(caller.key_lineage_id.as_str()));
    }
    let db = &req.state().db.conn;
    let (rows, total) =
        fetch_page(db, select.order_by_desc(agent_session::Column::Id), page).await?;
    let creators: std::collections::HashMap<String, api_key::Model> = api_key::Entity::find()
        .filter(api_key::Column::Id.is_in(rows.iter().map(|r| r.created_by_key_id.clone())))
        .all(db)
        .await?
        .into_iter()
        .map(|k| (k.id.clone(), k))
        .collect();
    let now = time::now();
    let items: Vec<AgentSessionResource> = rows
        .iter()
        .map(|s| AgentSessionResource::new(s, creators.get(&s.created_by_key_id), now))
        .collect();
    req.list(&items, page, total)
}

/// Get one agent session (never its token).
#[utoipa::path(get, path = "/agent-sessions/{session_id}", operation_id = "getAgentSession", tag = "agent-sessions",
    params(("session_id" = String, Path)),
    responses((status = 200, description = "The session", body = AgentSessionResource)))]
#[tracing::instrument(skip_all, fields(session_id = %req.param("session_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let session = find_session(&req, req.param("session_id")).await?;
    let creator = creator_of(&req, &session).await?;
    req.ok(&AgentSessionResource::new(
        &session,
        creator.as_ref(),
        time::now(),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyBody {}

/// Revoke an agent session at once (its creator, a key with `keys:manage`, or the session
/// itself); it cannot be undone.
#[utoipa::path(delete, path = "/agent-sessions/{session_id}", operation_id = "revokeAgentSession", tag = "agent-sessions",
    params(("session_id" = String, Path)), request_body(content = Option<EmptyBody>),
    responses((status = 200, description = "The session, now REVOKED", body = AgentSessionResource)))]
#[tracing::instrument(skip_all, fields(session_id = %req.param("session_id")))]
pub async fn revoke(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyBody = req.json()?;
    let session = find_session(&req, req.param("session_id")).await?;
    let now = time::now();
    let tx = req.state().db.begin_write().await?;
    let revoked = if session.revoked_at.is_some() {
        session
    } else {
        let mut active = session.into_active_model();
        active.revoked_at = Set(Some(now));
        active.update(&*tx).await?
    };
    payroll_actors::approvals::reject_pending_of(
        &tx,
        payroll_actors::approvals::Revoked::Session(&revoked.id),
        "the requesting agent session was revoked",
    )
    .await?;
    let creator = api_key::Entity::find_by_id(revoked.created_by_key_id.as_str())
        .one(&*tx)
        .await?;
    let shown = AgentSessionResource::new(&revoked, creator.as_ref(), now);
    let record = AuditRecord::new("AGENT_SESSION_REVOKED", "agent_session", &revoked.id);
    req.commit::<_, AgentSessionResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

/// Revokes, in `tx`, every session `key_id` created (its key was revoked).
pub async fn revoke_sessions_of<C: sea_orm::ConnectionTrait>(
    conn: &C,
    key_id: &str,
    now: DateTime<Utc>,
) -> Result<u64, sea_orm::DbErr> {
    use sea_orm::sea_query::Expr;
    Ok(agent_session::Entity::update_many()
        .col_expr(agent_session::Column::RevokedAt, Expr::value(now))
        .filter(agent_session::Column::CreatedByKeyId.eq(key_id))
        .filter(agent_session::Column::RevokedAt.is_null())
        .exec(conn)
        .await?
        .rows_affected)
}
