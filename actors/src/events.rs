//! Event rows: one per run or payout transition, in the transition's transaction. Their
//! `data.object` is the resource as the API shows it.

use payroll_entities::{bulk, db::WriteTx, event, ids, job, payout, payroll_run, time};
use sea_orm::{DbErr, IntoActiveModel};
use serde_json::json;

use crate::views::{PayoutResource, RunResource};

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
    crate::webhook::store::enqueue_deliveries(tx, &events).await?;
    bulk::insert_chunked(
        &**tx,
        events.into_iter().map(IntoActiveModel::into_active_model),
        None,
    )
    .await?;
    Ok(())
}
