//! All webhook SQL: delivery rows written with their events, claims of due deliveries, the
//! outcomes of attempts, failing deliveries and disabling endpoints.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use chrono::{DateTime, Utc};
use payroll_entities::{
    DeliveryStatus, WebhookStatus, bulk,
    db::{Db, WriteTx},
    event, ids, time, webhook_attempt, webhook_delivery, webhook_endpoint,
};
use rand::Rng;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, LockBehavior, LockType, OnConflict},
};
use serde_json::json;

use super::{
    http::{Claimed, Outcome, Target},
    settings::WebhookDeps,
    signing::secret_key,
    subscriptions::subscribes,
    transitions::{self, DeliveryOp, DeliveryState, Refused, Transition},
};
use crate::{
    audit::{self, system_entry},
    views::EventResource,
};

/// A new PENDING delivery, due now.
pub fn new_delivery(endpoint_id: &str, event: &event::Model) -> webhook_delivery::Model {
    delivery_of(endpoint_id, &event.id, &event.event_type)
}

fn delivery_of(endpoint_id: &str, event_id: &str, event_type: &str) -> webhook_delivery::Model {
    let now = time::now();
    webhook_delivery::Model {
        id: ids::new_id(ids::IdKind::Delivery),
        endpoint_id: endpoint_id.to_owned(),
        event_id: event_id.to_owned(),
        event_type: event_type.to_owned(),
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

/// Writes one delivery row per ACTIVE endpoint subscribed to each event (its id and type), in the events'
/// transaction; the dispatchers hear of them once it commits.
pub async fn enqueue_deliveries(tx: &WriteTx, events: &[(&str, &str)]) -> Result<(), DbErr> {
    if events.is_empty() {
        return Ok(());
    }
    let endpoints: Vec<(String, serde_json::Value, Option<String>)> =
        webhook_endpoint::Entity::find()
            .select_only()
            .column(webhook_endpoint::Column::Id)
            .column(webhook_endpoint::Column::Events)
            .column(webhook_endpoint::Column::CreatedByKeyId)
            .filter(webhook_endpoint::Column::Status.eq(WebhookStatus::Active))
            .filter(webhook_endpoint::Column::DeletedAt.is_null())
            .into_tuple()
            .all(&**tx)
            .await?;
    if endpoints.is_empty() {
        return Ok(());
    }
    let readers = employee_readers(tx, &endpoints, events).await?;
    let endpoints: Vec<(String, Vec<String>)> = endpoints
        .into_iter()
        .map(|(id, events, _)| {
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
        .flat_map(|(event_id, event_type)| {
            endpoints
                .iter()
                .filter(|(_, patterns)| subscribes(patterns, event_type))
                // An employee's object goes only where its registering key could read it
                // (`*` subscribed before employee events existed included).
                .filter(|(id, _)| !event_type.starts_with("employee.") || readers.contains(id))
                .map(|(id, _)| delivery_of(id, event_id, event_type))
        })
        .collect();
    insert_deliveries(tx, rows).await
}

/// The endpoints (of `endpoints`) whose registering key holds `employees:read`, read only when
/// `events` hold an employee event (CONTRACT §10: an endpoint receives only what the key that
/// registered it could read).
async fn employee_readers(
    tx: &WriteTx,
    endpoints: &[(String, serde_json::Value, Option<String>)],
    events: &[(&str, &str)],
) -> Result<std::collections::HashSet<String>, DbErr> {
    if !events.iter().any(|(_, kind)| kind.starts_with("employee.")) {
        return Ok(Default::default());
    }
    let keys: Vec<String> = endpoints.iter().filter_map(|(_, _, k)| k.clone()).collect();
    let readers: std::collections::HashSet<String> = payroll_entities::api_key::Entity::find()
        .filter(bulk::one_of(
            tx.get_database_backend(),
            payroll_entities::api_key::Column::Id,
            keys,
        ))
        .all(&**tx)
        .await?
        .into_iter()
        .filter(|k| {
            k.scopes
                .split(',')
                .any(|s| s == "employees:read" || s == "employees:*")
        })
        .map(|k| k.id)
        .collect();
    Ok(endpoints
        .iter()
        .filter(|(_, _, k)| k.as_ref().is_some_and(|k| readers.contains(k)))
        .map(|(id, _, _)| id.clone())
        .collect())
}

/// Inserts delivery rows in multi-row statements and marks the transaction.
pub async fn insert_deliveries(
    tx: &WriteTx,
    rows: Vec<webhook_delivery::Model>,
) -> Result<(), DbErr> {
    if rows.is_empty() {
        return Ok(());
    }
    let endpoints: Vec<String> = rows.iter().map(|r| r.endpoint_id.clone()).collect();
    bulk::insert_chunked(
        &**tx,
        rows.into_iter().map(IntoActiveModel::into_active_model),
        None,
    )
    .await?;
    // The dispatchers of these endpoints are woken once the transaction commits.
    tx.note_for_commit(endpoints);
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

/// Endpoints with a due delivery (with `all`, every endpoint with a pending one).
pub async fn endpoints_with_pending(db: &Db, all: bool) -> Result<Vec<String>, DbErr> {
    let mut select = webhook_delivery::Entity::find()
        .select_only()
        .column(webhook_delivery::Column::EndpointId)
        .distinct()
        .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending));
    if !all {
        select = select.filter(webhook_delivery::Column::NextAttemptAt.lte(time::now()));
    }
    select.into_tuple::<String>().all(&db.conn).await
}

pub enum Claim {
    Gone,
    Due {
        target: Target,
        claimed: Vec<Claimed>,
        next_due: Option<DateTime<Utc>>,
    },
}

/// Disables an endpoint (if still ACTIVE), fails its pending deliveries and audits it, in `tx`.
async fn disable_endpoint(tx: &WriteTx, endpoint_id: &str, reason: &str) -> Result<bool, DbErr> {
    let now = time::now();
    let changed = webhook_endpoint::Entity::update_many()
        .col_expr(
            webhook_endpoint::Column::Status,
            Expr::value(WebhookStatus::Disabled.as_str()),
        )
        .col_expr(
            webhook_endpoint::Column::DisabledReason,
            Expr::value(reason),
        )
        .col_expr(webhook_endpoint::Column::DisabledAt, Expr::value(now))
        .col_expr(webhook_endpoint::Column::UpdatedAt, Expr::value(now))
        .filter(webhook_endpoint::Column::Id.eq(endpoint_id))
        .filter(webhook_endpoint::Column::Status.eq(WebhookStatus::Active))
        .exec(&**tx)
        .await?
        .rows_affected;
    if changed != 1 {
        return Ok(false);
    }
    let failed = fail_pending(&**tx, endpoint_id, &format!("endpoint disabled: {reason}")).await?;
    audit::insert(
        &**tx,
        system_entry(
            "WEBHOOK_DISABLED",
            "webhook_endpoint",
            endpoint_id,
            json!({"before": {"status": "ACTIVE"}, "after": {"status": "DISABLED"}, "disabled_reason": reason, "pending_deliveries_failed": failed}),
        ),
    )
    .await?;
    tracing::warn!(endpoint = %endpoint_id, %reason, "webhook endpoint disabled");
    Ok(true)
}

/// Loads the endpoint and claims up to `limit` due deliveries of it, none of `held`.
pub async fn claim_due(
    deps: &WebhookDeps,
    endpoint_id: &str,
    limit: usize,
    held: Vec<String>,
) -> Result<Claim, DbErr> {
    let db = &deps.db;
    let endpoint = webhook_endpoint::Entity::find_by_id(endpoint_id)
        .one(&db.conn)
        .await?;
    let endpoint = match endpoint {
        Some(e) if e.deleted_at.is_none() && e.status == WebhookStatus::Active => e,
        other => {
            let reason = match other {
                Some(e) if e.deleted_at.is_none() => format!(
                    "endpoint disabled: {}",
                    e.disabled_reason.as_deref().unwrap_or("disabled")
                ),
                _ => "endpoint deleted".to_owned(),
            };
            let tx = db.begin_write().await?;
            fail_pending(&*tx, endpoint_id, &reason).await?;
            tx.commit().await?;
            return Ok(Claim::Gone);
        }
    };
    let target = match target_of(deps, &endpoint) {
        Ok(target) => target,
        Err(e) => {
            tracing::error!(endpoint = %endpoint_id, error = %e, "webhook secret cannot be opened");
            let tx = db.begin_write().await?;
            disable_endpoint(
                &tx,
                endpoint_id,
                "its signing secret cannot be opened (was auth.key_pepper changed?); rotate the secret, then enable the endpoint",
            )
            .await?;
            tx.commit().await?;
            return Ok(Claim::Gone);
        }
    };
    let due = |now: DateTime<Utc>| {
        let mut select = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending))
            .filter(webhook_delivery::Column::NextAttemptAt.lte(now));
        if !held.is_empty() {
            select = select.filter(webhook_delivery::Column::Id.is_not_in(held.clone()));
        }
        select
    };
    // A read first, so an endpoint with nothing due never takes the write lock.
    let any_due = limit > 0
        && due(time::now())
            .select_only()
            .column(webhook_delivery::Column::Id)
            .limit(1)
            .into_tuple::<String>()
            .one(&db.conn)
            .await?
            .is_some();
    let mut claimed = Vec::new();
    if any_due {
        let tx = db.begin_write().await?;
        // The clock is read once the lock is held, so waiting for it never eats the lease.
        let now = time::now();
        // Retries first, so a backlog of first attempts never pushes a retry past its time;
        // each query walks the claim index in due order.
        let postgres = db.backend() == DatabaseBackend::Postgres;
        let mut rows = Vec::new();
        for retries in [true, false] {
            let room = limit.saturating_sub(rows.len());
            if room == 0 {
                break;
            }
            let mut select = due(now);
            select = if retries {
                select.filter(webhook_delivery::Column::AttemptCount.gt(0))
            } else {
                select.filter(webhook_delivery::Column::AttemptCount.eq(0))
            };
            let mut select = select
                .order_by_asc(webhook_delivery::Column::NextAttemptAt)
                .order_by_asc(webhook_delivery::Column::Id)
                .limit(u64::try_from(room).unwrap_or(64));
            if postgres {
                select = select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
            }
            rows.extend(select.all(&*tx).await?);
        }
        if !rows.is_empty() {
            let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
            webhook_delivery::Entity::update_many()
                .col_expr(
                    webhook_delivery::Column::NextAttemptAt,
                    Expr::value(now + deps.lease()),
                )
                .filter(webhook_delivery::Column::Id.is_in(ids))
                .exec(&*tx)
                .await?;
            let event_ids: Vec<String> = rows.iter().map(|r| r.event_id.clone()).collect();
            let events: HashMap<String, event::Model> = event::Entity::find()
                .filter(event::Column::Id.is_in(event_ids))
                .all(&*tx)
                .await?
                .into_iter()
                .map(|e| (e.id.clone(), e))
                .collect();
            for row in rows {
                let body = match events.get(&row.event_id) {
                    Some(e) => serde_json::to_vec(&EventResource::from(e.clone()))
                        .map_err(|e| DbErr::Custom(e.to_string()))?,
                    None => {
                        // An event row never goes away; a delivery without one cannot be sent.
                        fail_deliveries(
                            &*tx,
                            Condition::all().add(webhook_delivery::Column::Id.eq(row.id.as_str())),
                            "the event no longer exists",
                        )
                        .await?;
                        continue;
                    }
                };
                claimed.push(Claimed {
                    delivery_id: row.id,
                    event_id: row.event_id,
                    attempt: row.attempt_count + 1,
                    retries_used: row.retries_used,
                    manual: row.manual,
                    body,
                });
            }
        }
        tx.commit().await?;
    }
    // The earliest due time, asked of first attempts and retries apart so each walks the
    // claim index instead of every pending row.
    let mut next_due: Option<DateTime<Utc>> = None;
    for retries in [true, false] {
        let select = webhook_delivery::Entity::find()
            .select_only()
            .column_as(webhook_delivery::Column::NextAttemptAt.min(), "next")
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending));
        let select = if retries {
            select.filter(webhook_delivery::Column::AttemptCount.gt(0))
        } else {
            select.filter(webhook_delivery::Column::AttemptCount.eq(0))
        };
        let at = select
            .into_tuple::<Option<DateTime<Utc>>>()
            .one(&db.conn)
            .await?
            .flatten();
        next_due = match (next_due, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(Claim::Due {
        target,
        claimed,
        next_due,
    })
}

/// The keys that sign now: the current secret, and the previous one within its grace (skipped
/// with a warning if it cannot be opened).
fn target_of(deps: &WebhookDeps, endpoint: &webhook_endpoint::Model) -> Result<Target, DbErr> {
    let open = |sealed: &str| -> Result<Vec<u8>, DbErr> {
        let secret = deps
            .secrets
            .open(sealed)
            .map_err(|e| DbErr::Custom(e.to_string()))?;
        secret_key(&secret)
            .ok_or_else(|| DbErr::Custom("a stored webhook secret is malformed".into()))
    };
    let mut keys = vec![open(&endpoint.secret)?];
    if let (Some(previous), Some(until)) = (
        &endpoint.previous_secret,
        endpoint.previous_secret_expires_at,
    ) && until > time::now()
    {
        match open(previous) {
            Ok(key) => keys.push(key),
            Err(e) => {
                tracing::warn!(endpoint = %endpoint.id, error = %e, "the previous webhook secret cannot be opened; signing with the current one only")
            }
        }
    }
    Ok(Target {
        url: Arc::from(endpoint.url.as_str()),
        keys: Arc::new(keys),
    })
}

pub struct Recorded {
    pub disabled: bool,
    pub next_retry: Option<DateTime<Utc>>,
}

/// Records outcomes: attempts, successes, failures with their next retry or their end, and
/// the endpoint disabled when a delivery ran out of retries or got a 410. Each delivery update
/// holds only if the delivery is still at the attempt this outcome belongs to, so a stale or
/// repeated outcome changes nothing.
pub async fn record(
    deps: &WebhookDeps,
    endpoint_id: &str,
    outcomes: &[Outcome],
) -> Result<Recorded, DbErr> {
    let schedule = &deps.settings.retry_schedule_ms;
    let tx = deps.db.begin_write().await?;
    let now = time::now();
    if deps.db.backend() == DatabaseBackend::Postgres
        && outcomes.iter().any(|o| o.disables(schedule))
    {
        // The endpoint row first, as every disabling transaction takes it: no lock cycle with
        // another instance disabling the same endpoint.
        webhook_endpoint::Entity::find_by_id(endpoint_id)
            .lock_exclusive()
            .one(&*tx)
            .await?;
    }
    let attempts = outcomes.iter().map(|o| {
        webhook_attempt::Model {
            delivery_id: o.delivery_id.clone(),
            attempt: o.attempt,
            started_at: o.started_at,
            response_status: o.response_status.map(i32::from),
            duration_ms: o.duration_ms,
            error: o.error.clone(),
        }
        .into_active_model()
    });
    let once = OnConflict::columns([
        webhook_attempt::Column::DeliveryId,
        webhook_attempt::Column::Attempt,
    ])
    .do_nothing()
    .to_owned();
    bulk::insert_chunked(&*tx, attempts, Some(&once)).await?;
    // Successes, one statement per attempt number (nearly always just 1).
    let mut succeeded: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.succeeded()) {
        succeeded
            .entry(o.attempt)
            .or_default()
            .push(o.delivery_id.clone());
    }
    for (attempt, ids) in succeeded {
        for chunk in ids.chunks(500) {
            webhook_delivery::Entity::update_many()
                .col_expr(
                    webhook_delivery::Column::Status,
                    Expr::value(DeliveryStatus::Succeeded.as_str()),
                )
                .col_expr(webhook_delivery::Column::AttemptCount, Expr::value(attempt))
                .col_expr(
                    webhook_delivery::Column::NextAttemptAt,
                    Expr::value(Option::<DateTime<Utc>>::None),
                )
                .col_expr(
                    webhook_delivery::Column::LastError,
                    Expr::value(Option::<String>::None),
                )
                .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
                .col_expr(webhook_delivery::Column::CompletedAt, Expr::value(now))
                .filter(webhook_delivery::Column::Id.is_in(chunk.to_vec()))
                .filter(webhook_delivery::Column::AttemptCount.eq(attempt - 1))
                .exec(&*tx)
                .await?;
        }
    }
    let mut disable: Option<String> = None;
    let mut next_retry: Option<DateTime<Utc>> = None;
    for o in outcomes.iter().filter(|o| !o.succeeded()) {
        let error = o.error.clone().unwrap_or_else(|| "failed".to_owned());
        let transition = o.transition(schedule, rand::thread_rng().gen_range(0.0..=0.1));
        let mut update = webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::AttemptCount,
                Expr::value(o.attempt),
            )
            .col_expr(
                webhook_delivery::Column::LastError,
                Expr::value(error.clone()),
            )
            .col_expr(
                webhook_delivery::Column::NextAttemptAt,
                Expr::value(transition.next_attempt_at(now)),
            )
            .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now));
        match transition {
            Transition::RetryIn { retry, .. } => {
                update = update.col_expr(webhook_delivery::Column::RetriesUsed, Expr::value(retry));
            }
            _ => {
                update = update
                    .col_expr(
                        webhook_delivery::Column::Status,
                        Expr::value(transition.status().as_str()),
                    )
                    .col_expr(webhook_delivery::Column::CompletedAt, Expr::value(now));
            }
        }
        let changed = update
            .filter(webhook_delivery::Column::Id.eq(o.delivery_id.as_str()))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending))
            .filter(webhook_delivery::Column::AttemptCount.eq(o.attempt - 1))
            .exec(&*tx)
            .await?
            .rows_affected;
        if changed != 1 {
            // Stale: this delivery moved on (failed with its endpoint, or retried by hand).
            continue;
        }
        match transition {
            Transition::RetryIn { .. } => {
                if let Some(at) = transition.next_attempt_at(now) {
                    next_retry = Some(next_retry.map_or(at, |n| n.min(at)));
                }
            }
            Transition::Failed {
                disables_endpoint: true,
            } if disable.is_none() || o.response_status == Some(410) => {
                disable = Some(if o.response_status == Some(410) {
                    format!(
                        "the receiver answered 410 Gone to delivery {}",
                        o.delivery_id
                    )
                } else {
                    format!(
                        "delivery {} failed {} attempts; last error: {error}",
                        o.delivery_id, o.attempt
                    )
                });
            }
            _ => {}
        }
    }
    let disabled = match disable {
        Some(reason) => disable_endpoint(&tx, endpoint_id, &reason).await?,
        None => false,
    };
    tx.commit().await?;
    Ok(Recorded {
        disabled,
        next_retry,
    })
}

/// A client's retry of a finished delivery: PENDING again, manual (one attempt), due now, in
/// `tx`; the endpoint's dispatcher hears of it once `tx` commits. The delivery table refuses a
/// delivery still PENDING (also one a concurrent retry made PENDING since it was read).
pub async fn retry_by_hand(
    tx: &WriteTx,
    delivery: &webhook_delivery::Model,
) -> Result<Result<webhook_delivery::Model, Refused>, DbErr> {
    let state = |status| DeliveryState {
        status,
        retries_used: delivery.retries_used,
        manual: delivery.manual,
    };
    let transition =
        match transitions::apply(state(delivery.status), DeliveryOp::RetryByHand, &[], 0.0) {
            Ok(t) => t,
            Err(refused) => return Ok(Err(refused)),
        };
    let now = time::now();
    let changed = webhook_delivery::Entity::update_many()
        .col_expr(
            webhook_delivery::Column::Status,
            Expr::value(transition.status().as_str()),
        )
        .col_expr(webhook_delivery::Column::Manual, Expr::value(true))
        .col_expr(
            webhook_delivery::Column::NextAttemptAt,
            Expr::value(transition.next_attempt_at(now)),
        )
        .col_expr(
            webhook_delivery::Column::CompletedAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
        .filter(webhook_delivery::Column::Id.eq(delivery.id.as_str()))
        .filter(webhook_delivery::Column::Status.eq(delivery.status))
        .exec(&**tx)
        .await?
        .rows_affected;
    if changed != 1 {
        let refused = transitions::apply(
            state(DeliveryStatus::Pending),
            DeliveryOp::RetryByHand,
            &[],
            0.0,
        );
        return Ok(Err(refused.err().unwrap_or(Refused {
            current: DeliveryStatus::Pending,
            allowed_transitions: &[],
        })));
    }
    let updated = webhook_delivery::Entity::find_by_id(delivery.id.clone())
        .one(&**tx)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(delivery.id.clone()))?;
    tx.note_for_commit([updated.endpoint_id.clone()]);
    Ok(Ok(updated))
}
