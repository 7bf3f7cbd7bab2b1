//! Lease-fenced sends (CONTRACT §7): a withdrawal leaves this instance only if, at that moment,
//! this instance holds the lease of the run it pays. In one transaction the send is checked
//! against the lease (shared-locked on PostgreSQL, so a takeover waits for it) and stamped on
//! the payout (`send_count` + 1, `last_sent_at`, and no look-up since). An instance that has lost a run sends nothing
//! for it, and the instance that took it over sees every send that did leave, with its time,
//! before it decides to send again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use payroll_entities::{PayoutStatus, db::Db, payout, run_lease};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait as _, DbErr, EntityTrait as _, QueryFilter as _,
    sea_query::{Expr, ExprTrait as _, LockType, Query},
};

/// Most ids per statement: a whole batch of sends.
const CHUNK: usize = 1000;

/// Stamps the sends of these client ids whose payouts are still PENDING on that attempt, not
/// stuck, and whose runs `owner` holds now; answers each stamped id with its send count.
///
/// One `UPDATE … RETURNING` a chunk. The lease is read by a subquery that shares-locks it
/// (PostgreSQL; SQLite holds the database), so a takeover waits for this transaction, then
/// sees every stamp it made. A transaction that ends a payout meanwhile (a job failing, a
/// look-up settling it) either commits first, and the row, checked again as it is locked, no
/// longer qualifies, or waits for this stamp and sees it.
pub async fn stamp_sends(
    db: &Db,
    owner: &str,
    client_ids: &[String],
    now: DateTime<Utc>,
) -> Result<HashMap<String, i32>, DbErr> {
    let mut stamped = HashMap::new();
    if client_ids.is_empty() {
        return Ok(stamped);
    }
    let backend = db.backend();
    let held = run_lease::runs_held_by(owner, now)
        .lock(LockType::Share)
        .to_owned();
    let tx = db.begin_write().await?;
    for chunk in client_ids.chunks(CHUNK) {
        let mut update = Query::update();
        update
            .table(payout::Entity)
            .value(
                payout::Column::SendCount,
                Expr::col(payout::Column::SendCount).add(1),
            )
            .value(payout::Column::LastSentAt, now)
            .value(payout::Column::UnfoundLookups, 0)
            .cond_where(
                Condition::all()
                    .add(super::payouts_of_client_ids(backend, chunk))
                    .add(payout::Column::Status.eq(PayoutStatus::Pending))
                    .add(payout::Column::StuckSince.is_null())
                    .add(payout::Column::PayrollRunId.in_subquery(held.clone())),
            )
            .returning(Query::returning().columns([
                payout::Column::ClientWithdrawalId,
                payout::Column::SendCount,
            ]));
        for row in tx.query_all(&update).await? {
            let client_id: Option<String> = row.try_get("", "client_withdrawal_id")?;
            let count: i32 = row.try_get("", "send_count")?;
            if let Some(client_id) = client_id {
                stamped.insert(client_id, count);
            }
        }
    }
    tx.commit().await?;
    Ok(stamped)
}

/// Takes back the stamps of sends the exchange turned away with its rate limit: nothing was
/// created, so they do not count.
pub async fn unstamp<C: sea_orm::ConnectionTrait>(
    conn: &C,
    client_ids: &[String],
) -> Result<(), DbErr> {
    for chunk in client_ids.chunks(CHUNK) {
        payout::Entity::update_many()
            .col_expr(
                payout::Column::SendCount,
                Expr::col(payout::Column::SendCount).sub(1),
            )
            .filter(super::payouts_of_client_ids(
                conn.get_database_backend(),
                chunk,
            ))
            .filter(payout::Column::SendCount.gt(0))
            .exec(conn)
            .await?;
    }
    Ok(())
}
