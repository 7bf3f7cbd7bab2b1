//! Webhooks (CONTRACT §10): subscriptions, delivery rows written with their events, Standard
//! Webhooks signing, the SSRF guard, the retry schedule, and the dispatcher actors.

pub mod dispatcher;
pub mod guard;
pub mod schedule;
pub mod sealing;
pub mod signing;

use payroll_entities::{
    DeliveryStatus, WebhookStatus, db::WriteTx, event, ids, time, webhook_delivery,
    webhook_endpoint,
};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter,
    QuerySelect, sea_query::Expr,
};
use serde::Deserialize;

use crate::events::{EVENT_KINDS, canonical_name as canonical};

/// `webhooks.*` (CONTRACT §13).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Delays of the retries after a failed first attempt.
    pub retry_schedule_ms: Vec<u64>,
    /// An attempt answered 2xx within this long succeeds.
    pub timeout_ms: u64,
    pub max_in_flight_per_endpoint: u32,
    /// How long the previous secret keeps signing after a rotation.
    pub secret_rotation_grace_seconds: u64,
    pub allow_http: bool,
    pub allow_private_networks: bool,
}

impl WebhookSettings {
    pub fn policy(&self) -> guard::GuardPolicy {
        guard::GuardPolicy {
            allow_http: self.allow_http,
            allow_private_networks: self.allow_private_networks,
        }
    }
}

/// The wildcards an endpoint may subscribe to, beside every kind and its `run.` alias.
pub const WILDCARDS: &[&str] = &["*", "payroll.run.*", "run.*", "payout.*"];

/// Whether `pattern` is a known kind, alias or wildcard.
pub fn is_valid_pattern(pattern: &str) -> bool {
    let c = canonical(pattern);
    WILDCARDS.contains(&c.as_str()) || EVENT_KINDS.contains(&c.as_str())
}

/// Every accepted subscription, for error messages.
pub fn valid_patterns_hint() -> String {
    let mut all: Vec<String> = WILDCARDS.iter().map(|w| (*w).to_owned()).collect();
    all.extend(EVENT_KINDS.iter().map(|k| (*k).to_owned()));
    format!("{} (and run.X for every payroll.run.X)", all.join(", "))
}

/// Whether an endpoint subscribed to `patterns` receives events of `kind`. `webhook.test`
/// goes only to the endpoint it tests, never through subscriptions.
pub fn subscribes(patterns: &[String], kind: &str) -> bool {
    if kind == "webhook.test" {
        return false;
    }
    patterns.iter().any(|p| {
        let c = canonical(p);
        c == "*"
            || c == kind
            || c.strip_suffix('*')
                .is_some_and(|prefix| prefix.ends_with('.') && kind.starts_with(prefix))
    })
}

/// A new PENDING delivery, due now.
pub fn new_delivery(endpoint_id: &str, event: &event::Model) -> webhook_delivery::Model {
    let now = time::now();
    webhook_delivery::Model {
        id: ids::new_id(ids::IdKind::Delivery),
        endpoint_id: endpoint_id.to_owned(),
        event_id: event.id.clone(),
        event_type: event.event_type.clone(),
        status: DeliveryStatus::Pending,
        attempt_count: 0,
        retries_used: 0,
        manual: false,
        next_attempt_at: Some(now),
        last_error: None,
        created_at: now,
        updated_at: now,
        completed_at: None,
    }
}

/// Writes one delivery row per ACTIVE endpoint subscribed to each event, in the events'
/// transaction; the dispatchers hear of them once it commits.
pub async fn enqueue_deliveries(tx: &WriteTx, events: &[event::Model]) -> Result<(), DbErr> {
    if events.is_empty() {
        return Ok(());
    }
    let endpoints: Vec<(String, serde_json::Value)> = webhook_endpoint::Entity::find()
        .select_only()
        .column(webhook_endpoint::Column::Id)
        .column(webhook_endpoint::Column::Events)
        .filter(webhook_endpoint::Column::Status.eq(WebhookStatus::Active))
        .filter(webhook_endpoint::Column::DeletedAt.is_null())
        .into_tuple()
        .all(&**tx)
        .await?;
    if endpoints.is_empty() {
        return Ok(());
    }
    let endpoints: Vec<(String, Vec<String>)> = endpoints
        .into_iter()
        .map(|(id, events)| {
            let patterns = events
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            (id, patterns)
        })
        .collect();
    let rows: Vec<webhook_delivery::Model> = events
        .iter()
        .flat_map(|event| {
            endpoints
                .iter()
                .filter(|(_, patterns)| subscribes(patterns, &event.event_type))
                .map(|(id, _)| new_delivery(id, event))
        })
        .collect();
    insert_deliveries(tx, rows).await
}

/// Inserts delivery rows in multi-row statements and marks the transaction.
pub async fn insert_deliveries(
    tx: &WriteTx,
    rows: Vec<webhook_delivery::Model>,
) -> Result<(), DbErr> {
    if rows.is_empty() {
        return Ok(());
    }
    for chunk in rows.chunks(500) {
        let models: Vec<webhook_delivery::ActiveModel> = chunk
            .iter()
            .cloned()
            .map(IntoActiveModel::into_active_model)
            .collect();
        webhook_delivery::Entity::insert_many(models)
            .exec_without_returning(&**tx)
            .await?;
    }
    tx.wrote_deliveries(rows.iter().map(|r| r.endpoint_id.clone()));
    Ok(())
}

/// Fails the deliveries `condition` selects, with `reason` as their last error.
pub async fn fail_deliveries<C: ConnectionTrait>(
    conn: &C,
    condition: Condition,
    reason: &str,
) -> Result<u64, DbErr> {
    let now = time::now();
    Ok(webhook_delivery::Entity::update_many()
        .col_expr(
            webhook_delivery::Column::Status,
            Expr::value(DeliveryStatus::Failed.as_str()),
        )
        .col_expr(
            webhook_delivery::Column::NextAttemptAt,
            Expr::value(Option::<chrono::DateTime<chrono::Utc>>::None),
        )
        .col_expr(webhook_delivery::Column::LastError, Expr::value(reason))
        .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
        .col_expr(webhook_delivery::Column::CompletedAt, Expr::value(now))
        .filter(condition)
        .exec(conn)
        .await?
        .rows_affected)
}

/// Fails every PENDING delivery of an endpoint (it was disabled or deleted).
pub async fn fail_pending<C: ConnectionTrait>(
    conn: &C,
    endpoint_id: &str,
    reason: &str,
) -> Result<u64, DbErr> {
    fail_deliveries(
        conn,
        Condition::all()
            .add(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .add(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending)),
        reason,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn subscriptions_match_kinds_aliases_and_wildcards() {
        assert!(subscribes(&p(&["*"]), "payout.completed"));
        assert!(!subscribes(&p(&["*"]), "webhook.test"));
        assert!(subscribes(&p(&["run.*"]), "payroll.run.created"));
        assert!(subscribes(&p(&["payroll.run.*"]), "payroll.run.failed"));
        assert!(!subscribes(&p(&["payroll.run.*"]), "payout.failed"));
        assert!(subscribes(&p(&["payout.*"]), "payout.processing"));
        assert!(subscribes(&p(&["run.completed"]), "payroll.run.completed"));
        assert!(!subscribes(&p(&["run.completed"]), "payroll.run.created"));
        assert!(subscribes(
            &p(&["payout.failed", "payroll.run.created"]),
            "payroll.run.created"
        ));
    }

    #[test]
    fn patterns_are_validated() {
        for ok in [
            "*",
            "run.*",
            "payroll.run.*",
            "payout.*",
            "run.created",
            "payout.failed",
        ] {
            assert!(is_valid_pattern(ok), "{ok}");
        }
        for bad in [
            "",
            "payout",
            "payroll.*",
            "run.nope",
            "webhook.*",
            "PAYOUT.FAILED",
        ] {
            assert!(!is_valid_pattern(bad), "{bad}");
        }
    }
}
