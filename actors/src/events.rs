//! Event rows: one per run or payout transition, in the transition's transaction. Their
//! `data.object` is the resource as the API shows it.

use chrono::{DateTime, Utc};
use payroll_entities::{bulk, db::WriteTx, event, ids, job, payout, payroll_run, time};
use sea_orm::DbErr;
use serde::Serialize;

use crate::views::{PayoutResource, RunResource};

/// An event to insert, its data already JSON text (serialized once, straight from the
/// resource).
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub id: String,
    pub event_type: String,
    pub resource_id: String,
    pub created_at: DateTime<Utc>,
    /// `{"object": …}` as JSON text.
    pub data: String,
}

#[derive(Serialize)]
struct Data<'a, T> {
    object: &'a T,
}

/// An event of `kind` about `resource_id` whose object is `object` as the API shows it.
pub fn new_event<T: Serialize>(kind: &str, resource_id: &str, object: &T) -> NewEvent {
    NewEvent {
        id: ids::new_id(ids::IdKind::Event),
        event_type: kind.to_owned(),
        resource_id: resource_id.to_owned(),
        created_at: time::now(),
        // A resource is plain data (no map with other keys than strings): its serialization
        // does not fail. Were it to, the event still says what happened to which resource.
        data: serde_json::to_string(&Data { object }).unwrap_or_else(|err| {
            tracing::error!(%kind, %resource_id, error = %err, "an event's resource could not be serialized");
            r#"{"object":null}"#.to_owned()
        }),
    }
}

pub fn run_event(kind: &str, run: &payroll_run::Model, job: Option<&job::Model>) -> NewEvent {
    new_event(kind, &run.id, &RunResource::new(run, job))
}

pub fn payout_event(kind: &str, payout: &payout::Model) -> NewEvent {
    new_event(kind, &payout.id, &PayoutResource::from(payout))
}

/// Inserts events in multi-row statements, with one delivery row per subscribed endpoint.
pub async fn insert_events(tx: &WriteTx, events: Vec<NewEvent>) -> Result<(), DbErr> {
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.id.as_str(), e.event_type.as_str()))
        .collect();
    crate::webhook::store::enqueue_deliveries(tx, &kinds).await?;
    use event::Column as C;
    let rows = events
        .into_iter()
        .map(|e| {
            vec![
                e.id.into(),
                e.event_type.into(),
                e.resource_id.into(),
                e.created_at.into(),
                e.data.into(),
            ]
        })
        .collect();
    bulk::insert_values::<event::Entity, _>(
        &**tx,
        &[C::Id, C::EventType, C::ResourceId, C::CreatedAt, C::Data],
        rows,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_data_is_the_object_as_the_api_shows_it() {
        #[derive(Serialize)]
        struct R {
            id: &'static str,
            amount_usd_cents: i64,
        }
        let e = new_event(
            "payout.completed",
            "pay_1",
            &R {
                id: "pay_1",
                amount_usd_cents: 5,
            },
        );
        let data: serde_json::Value = serde_json::from_str(&e.data).expect("json");
        assert_eq!(
            data,
            serde_json::json!({"object": {"id": "pay_1", "amount_usd_cents": 5}})
        );
        assert_eq!(e.resource_id, "pay_1");
        assert!(e.id.starts_with("evt_"), "{}", e.id);
    }
}
