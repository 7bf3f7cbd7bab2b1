//! `/events`: every event the service emitted (CONTRACT §5, §8), newest first.

use actix_web::HttpResponse;
use payroll_actors::events::EVENT_KINDS;
use payroll_entities::event;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::{
    api::ApiRequest,
    error::{ApiError, FieldError},
};

pub use payroll_entities::views::EventResource;

#[utoipa::path(get, path = "/events", operation_id = "listEvents", tag = "events",
    params(
        ("type" = Option<String>, Query, description = "an event kind, e.g. payout.completed"),
        ("created_after" = Option<String>, Query, description = "date-time or date"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Emitted events, newest first", body = Vec<EventResource>)))]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let kind = query.str("type");
    let created_after = query.datetime("created_after");
    let page = query.page();
    query.finish(&["type", "created_after", "limit", "offset"])?;
    let mut select = event::Entity::find();
    if let Some(kind) = kind {
        // `run.X` is an alias of `payroll.run.X`.
        let canonical = match kind.strip_prefix("run.") {
            Some(rest) => format!("payroll.run.{rest}"),
            None => kind.clone(),
        };
        if !EVENT_KINDS.contains(&canonical.as_str()) {
            return Err(ApiError::query(vec![FieldError::new(
                "type",
                format!(
                    "unknown event kind `{kind}`; known: {}",
                    EVENT_KINDS.join(", ")
                ),
            )]));
        }
        select = select.filter(event::Column::EventType.eq(canonical));
    }
    if let Some(after) = created_after {
        select = select.filter(event::Column::CreatedAt.gt(after));
    }
    let db = &req.state().db.conn;
    let total = select.clone().count(db).await?;
    let items: Vec<EventResource> = select
        .order_by_desc(event::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .into_iter()
        .map(EventResource::from)
        .collect();
    req.list(&items, page, total)
}
