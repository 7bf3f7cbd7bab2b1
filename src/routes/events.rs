//! `/events`: every event the service emitted (CONTRACT §5, §8), newest first.

use actix_web::HttpResponse;
use payroll_actors::event_kinds::{EVENT_KINDS, known_kind};
use payroll_entities::event;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

use crate::http::query::fetch_page;
use crate::http::{
    error::{ApiError, FieldError},
    request::ApiRequest,
};

pub use payroll_actors::views::EventResource;

/// List emitted events, newest first, filtered by type or creation time. Employee events are
/// listed only to keys that also hold employees:read.
#[utoipa::path(get, path = "/events", operation_id = "listEvents", tag = "events",
    params(
        ("type" = Option<String>, Query, description = "an event kind, e.g. payout.completed"),
        ("created_after" = Option<String>, Query, description = "date-time or date"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Emitted events, newest first", body = Vec<EventResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let kind = query.str("type");
    let created_after = query.datetime("created_after");
    let page = query.page();
    query.finish(&["type", "created_after", "limit", "offset"])?;
    let mut select = event::Entity::find();
    // Each event is listed to a caller who could read its object (CONTRACT §10): employee
    // events need employees:read besides the route's payroll:read.
    let caller = req.caller()?;
    if !crate::http::auth::grants(&caller.scopes, crate::http::auth::Scope::EmployeesRead) {
        select = select.filter(event::Column::EventType.not_like("employee.%"));
    }
    if let Some(kind) = kind {
        let canonical = kind_filter("type", &kind)?;
        select = select.filter(event::Column::EventType.eq(canonical));
    }
    if let Some(after) = created_after {
        select = select.filter(event::Column::CreatedAt.gt(after));
    }
    let db = &req.state().db.conn;
    let (rows, total) = fetch_page(db, select.order_by_desc(event::Column::Id), page).await?;
    let items: Vec<EventResource> = rows.into_iter().map(EventResource::from).collect();
    req.list(&items, page, total)
}

/// The canonical kind of a `type`-like query value (`run.X` aliases included), or a 400 naming
/// `field` and the known kinds.
/// What a `type` filter takes: every event kind and its `run.X` alias.
pub fn filter_kinds() -> Vec<String> {
    payroll_actors::event_kinds::kinds_and_aliases()
}

pub fn kind_filter(field: &str, raw: &str) -> Result<String, ApiError> {
    known_kind(raw).ok_or_else(|| {
        ApiError::query(vec![FieldError::new(
            field,
            format!(
                "unknown event kind `{raw}`; known: {}",
                EVENT_KINDS.join(", ")
            ),
        )])
    })
}
