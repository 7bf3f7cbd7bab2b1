//! `/audit-log`: every API request, system action and admin command (scope `audit:read`).

use actix_web::HttpResponse;
use payroll_actors::telemetry::AUDIT_BACKLOG_LIMIT;
use payroll_actors::views::Timestamp;
use payroll_entities::{ActorType, audit_entry};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::query::fetch_page;
use crate::http::{error::ApiError, request::ApiRequest};

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntryResource {
    pub id: String,
    pub occurred_at: Timestamp,
    pub request_id: Option<String>,
    pub actor_type: ActorType,
    /// The key, or for an agent session its creating key.
    pub api_key_id: Option<String>,
    /// The agent session the request was made under.
    pub agent_session_id: Option<String>,
    pub method: Option<String>,
    pub path: Option<String>,
    /// The OpenAPI operationId.
    pub operation: Option<String>,
    /// What changed (`PAYROLL_RUN_CREATED`, …); null for reads and refusals.
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub status_code: Option<i32>,
    pub idempotency_key: Option<String>,
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl From<audit_entry::Model> for AuditEntryResource {
    fn from(m: audit_entry::Model) -> AuditEntryResource {
        AuditEntryResource {
            id: m.id,
            occurred_at: m.occurred_at.into(),
            request_id: m.request_id,
            actor_type: m.actor_type,
            api_key_id: m.api_key_id,
            agent_session_id: m.agent_session_id,
            method: m.method,
            path: m.path,
            operation: m.operation,
            action: m.action,
            resource_type: m.resource_type,
            resource_id: m.resource_id,
            status_code: m.status_code,
            idempotency_key: m.idempotency_key,
            details: m.details,
        }
    }
}

/// List audit log entries, newest first, filtered by key, actor type, agent session, action,
/// operation, resource or time.
#[utoipa::path(get, path = "/audit-log", operation_id = "listAuditEntries", tag = "audit",
    params(
        ("api_key_id" = Option<String>, Query), ("actor_type" = Option<ActorType>, Query), ("agent_session_id" = Option<String>, Query), ("action" = Option<String>, Query, description = "comma-separated list"),
        ("operation" = Option<String>, Query), ("resource_type" = Option<String>, Query), ("resource_id" = Option<String>, Query),
        ("after" = Option<String>, Query, description = "date-time or date"), ("before" = Option<String>, Query, description = "date-time or date"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Audit entries, newest first", body = Vec<AuditEntryResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let api_key_id = query.str("api_key_id");
    let actor_type = query.str("actor_type");
    let agent_session_id = query.str("agent_session_id");
    let actions = query.str("action");
    let operation = query.str("operation");
    let resource_type = query.str("resource_type");
    let resource_id = query.str("resource_id");
    let after = query.datetime("after");
    let before = query.datetime("before");
    let page = query.page();
    let actor_type = match actor_type
        .as_deref()
        .map(|raw| (raw, ActorType::parse(raw)))
    {
        None => None,
        Some((_, Some(parsed))) => Some(parsed),
        Some((raw, None)) => {
            return Err(ApiError::query(vec![crate::http::error::FieldError::new(
                "actor_type",
                format!("`{raw}` is not one of {}", ActorType::spellings()),
            )]));
        }
    };
    query.finish(&[
        "api_key_id",
        "actor_type",
        "agent_session_id",
        "action",
        "operation",
        "resource_type",
        "resource_id",
        "after",
        "before",
        "limit",
        "offset",
    ])?;
    // Entries of earlier reads and refusals may still be in the writer's batch.
    req.state()
        .audit
        .bounded_flush(AUDIT_BACKLOG_LIMIT)?
        .await?;

    let mut select = audit_entry::Entity::find();
    if let Some(id) = api_key_id {
        select = select.filter(audit_entry::Column::ApiKeyId.eq(id));
    }
    if let Some(actor_type) = actor_type {
        select = select.filter(audit_entry::Column::ActorType.eq(actor_type));
    }
    if let Some(id) = agent_session_id {
        select = select.filter(audit_entry::Column::AgentSessionId.eq(id));
    }
    if let Some(actions) = actions {
        let list: Vec<String> = actions
            .split(',')
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        select = select.filter(audit_entry::Column::Action.is_in(list));
    }
    if let Some(op) = operation {
        select = select.filter(audit_entry::Column::Operation.eq(op));
    }
    if let Some(rt) = resource_type {
        select = select.filter(audit_entry::Column::ResourceType.eq(rt));
    }
    if let Some(rid) = resource_id {
        select = select.filter(audit_entry::Column::ResourceId.eq(rid));
    }
    if let Some(after) = after {
        select = select.filter(audit_entry::Column::OccurredAt.gt(after));
    }
    if let Some(before) = before {
        select = select.filter(audit_entry::Column::OccurredAt.lt(before));
    }
    let db = &req.state().db.conn;
    let (rows, total) = fetch_page(db, select.order_by_desc(audit_entry::Column::Id), page).await?;
    let items: Vec<AuditEntryResource> = rows.into_iter().map(AuditEntryResource::from).collect();
    req.list(&items, page, total)
}
