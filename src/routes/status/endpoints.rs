//! The webhook endpoints section of `/status`: each endpoint not deleted (newest
//! [`MAX_ENDPOINTS`]), its URL without credentials or query, status, pending and failed
//! deliveries and its last successful delivery.

use std::{collections::HashMap, fmt::Write as _};

use chrono::{DateTime, Utc};
use payroll_entities::{DeliveryStatus, WebhookStatus, time, webhook_delivery, webhook_endpoint};
use sea_orm::{
    ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, Func},
};

use crate::{routes::html::escape, state::AppState};

/// Endpoints shown at most.
const MAX_ENDPOINTS: u64 = 100;

/// An endpoint with its delivery figures.
pub(super) struct EndpointHealth {
    endpoint: webhook_endpoint::Model,
    pending: i64,
    failed: i64,
    last_success: Option<DateTime<Utc>>,
}

pub(super) async fn endpoints(state: &AppState) -> Result<Vec<EndpointHealth>, sea_orm::DbErr> {
    let conn = &state.db.conn;
    let list = webhook_endpoint::Entity::find()
        .filter(webhook_endpoint::Column::DeletedAt.is_null())
        .order_by_desc(webhook_endpoint::Column::CreatedAt)
        .limit(MAX_ENDPOINTS)
        .all(conn)
        .await?;
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = list.iter().map(|e| e.id.clone()).collect();
    let counts: Vec<(String, DeliveryStatus, i64)> = webhook_delivery::Entity::find()
        .select_only()
        .column(webhook_delivery::Column::EndpointId)
        .column(webhook_delivery::Column::Status)
        .column_as(
            Expr::expr(Func::count(Expr::col(webhook_delivery::Column::Id))),
            "n",
        )
        .filter(webhook_delivery::Column::EndpointId.is_in(ids.clone()))
        .filter(
            webhook_delivery::Column::Status
                .is_in([DeliveryStatus::Pending, DeliveryStatus::Failed]),
        )
        .group_by(webhook_delivery::Column::EndpointId)
        .group_by(webhook_delivery::Column::Status)
        .into_tuple()
        .all(conn)
        .await?;
    let last: Vec<(String, Option<DateTime<Utc>>)> = webhook_delivery::Entity::find()
        .select_only()
        .column(webhook_delivery::Column::EndpointId)
        .column_as(
            Expr::expr(Func::max(Expr::col(webhook_delivery::Column::CompletedAt))),
            "last",
        )
        .filter(webhook_delivery::Column::EndpointId.is_in(ids))
        .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Succeeded))
        .group_by(webhook_delivery::Column::EndpointId)
        .into_tuple()
        .all(conn)
        .await?;
    let mut figures: HashMap<String, (i64, i64)> = HashMap::new();
    for (endpoint_id, status, n) in counts {
        let entry = figures.entry(endpoint_id).or_default();
        match status {
            DeliveryStatus::Pending => entry.0 += n,
            DeliveryStatus::Failed => entry.1 += n,
            DeliveryStatus::Succeeded => {}
        }
    }
    let last: HashMap<String, Option<DateTime<Utc>>> = last.into_iter().collect();
    Ok(list
        .into_iter()
        .map(|endpoint| {
            let (pending, failed) = figures.get(&endpoint.id).copied().unwrap_or_default();
            let last_success = last.get(&endpoint.id).copied().flatten();
            EndpointHealth {
                endpoint,
                pending,
                failed,
                last_success,
            }
        })
        .collect())
}

pub(super) fn render_endpoints(html: &mut String, list: &[EndpointHealth]) {
    if list.is_empty() {
        html.push_str("<p class=\"muted\">No webhook endpoints.</p>");
        return;
    }
    html.push_str(concat!(
        "<table id=\"webhooks\"><tr><th>Endpoint</th><th>URL</th><th>Status</th>",
        "<th>Pending</th><th>Failed</th><th>Last success</th></tr>"
    ));
    for item in list {
        let e = &item.endpoint;
        let status = match &e.disabled_reason {
            Some(reason) if e.status != WebhookStatus::Active => format!(
                "<span class=\"bad\">{}</span><br><span class=\"muted\">{}</span>",
                escape(e.status.as_str()),
                escape(reason)
            ),
            _ if e.status != WebhookStatus::Active => {
                format!("<span class=\"bad\">{}</span>", escape(e.status.as_str()))
            }
            _ => format!("<span class=\"ok\">{}</span>", escape(e.status.as_str())),
        };
        let _ = write!(
            html,
            concat!(
                "<tr><td><code>{id}</code></td><td>{url}</td><td>{status}</td>",
                "<td>{pending}</td><td>{failed}</td><td>{last}</td></tr>"
            ),
            id = escape(&e.id),
            url = escape(&display_url(&e.url)),
            status = status,
            pending = item.pending,
            failed = item.failed,
            last = item
                .last_success
                .map(|t| escape(&time::format(&t)))
                .unwrap_or_else(|| "never".to_owned()),
        );
    }
    html.push_str("</table>");
}

/// A URL without credentials, query or fragment, which may carry tokens.
fn display_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    match without_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => without_query.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials_and_queries() {
        assert_eq!(
            display_url("https://user:pw@hooks.example.com/in/1?token=abc#x"),
            "https://hooks.example.com/in/1"
        );
        assert_eq!(
            display_url("http://127.0.0.1:9/ok"),
            "http://127.0.0.1:9/ok"
        );
        assert_eq!(display_url("https://a.example"), "https://a.example");
    }
}
