//! Event rows: one per run or payout transition, in the transition's transaction. Their
//! `data.object` is the resource as the API shows it.

use payroll_entities::{db::WriteTx, event, ids, job, payout, payroll_run, time};
use sea_orm::{DbErr, EntityTrait, IntoActiveModel};
use serde_json::json;

use crate::views::{PayoutResource, RunResource};

/// Every event kind (CONTRACT §10).
pub const EVENT_KINDS: &[&str] = &[
    "payroll.run.created",
    "payroll.run.confirmed",
    "payroll.run.deposited",
    "payroll.run.executing",
    "payroll.run.completed",
    "payroll.run.failed",
    "payroll.run.cancelled",
    "payout.processing",
    "payout.completed",
    "payout.failed",
    "payout.cancelled",
    "webhook.test",
];

/// The canonical name of an event kind or subscription: `run.X` is an alias of `payroll.run.X`.
pub fn canonical_name(name: &str) -> String {
    match name.strip_prefix("run.") {
        Some(rest) => format!("payroll.run.{rest}"),
        None => name.to_owned(),
    }
}

/// The canonical kind `name` stands for, if it is a known kind or alias.
pub fn known_kind(name: &str) -> Option<String> {
    let canonical = canonical_name(name);
    EVENT_KINDS
        .contains(&canonical.as_str())
        .then_some(canonical)
}

pub fn run_event(kind: &str, run: &payroll_run::Model, job: Option<&job::Model>) -> event::Model {
    event::Model {
        id: ids::new_id(ids::IdKind::Event),
        event_type: kind.to_owned(),
        resource_id: run.id.clone(),
        created_at: time::now(),
        data: json!({ "object": RunResource::new(run, job) }),
    }
}

pub fn payout_event(kind: &str, payout: &payout::Model) -> event::Model {
    event::Model {
        id: ids::new_id(ids::IdKind::Event),
        event_type: kind.to_owned(),
        resource_id: payout.id.clone(),
        created_at: time::now(),
        data: json!({ "object": PayoutResource::from(payout) }),
    }
}

/// Inserts events in multi-row statements, with one delivery row per subscribed endpoint.
pub async fn insert_events(tx: &WriteTx, events: Vec<event::Model>) -> Result<(), DbErr> {
    crate::webhook::enqueue_deliveries(tx, &events).await?;
    let conn = &**tx;
    let mut rows = events.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<event::ActiveModel> = rows
            .by_ref()
            .take(500)
            .map(IntoActiveModel::into_active_model)
            .collect();
        event::Entity::insert_many(chunk)
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}
