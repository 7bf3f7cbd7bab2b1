//! Lease-fenced sends (CONTRACT §7): a withdrawal leaves this instance only if, at that moment,
//! this instance holds the lease of the run it pays. In one transaction the send is checked
//! against the lease (shared-locked on PostgreSQL, so a takeover waits for it) and stamped on
//! the payout (`send_count` + 1, `last_sent_at`). An instance that has lost a run sends nothing
//! for it, and the instance that took it over sees every send that did leave, with its time,
//! before it decides to send again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use payroll_entities::{PayoutStatus, db::Db, payout, run_lease};
use sea_orm::{
    ColumnTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    sea_query::{Expr, ExprTrait as _},
};

/// Most ids per statement: a whole batch of sends.
const CHUNK: usize = 1000;

/// Stamps the sends of these client ids whose payouts are still PENDING on that attempt, not
/// stuck, and whose runs `owner` holds now; answers each stamped id with its send count.
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
    let tx = db.begin_write().await?;
    for chunk in client_ids.chunks(CHUNK) {
        // Locked (PostgreSQL; SQLite holds the database): a transaction that ends the payout meanwhile (a job failing,
        // a look-up settling it) either commits first, and the row no longer qualifies, or
        // waits for this stamp and sees it.
        let rows: Vec<(String, String, String, i32)> = payout::Entity::find()
            .select_only()
            .column(payout::Column::Id)
            .column(payout::Column::PayrollRunId)
            .column(payout::Column::ClientWithdrawalId)
            .column(payout::Column::SendCount)
            .filter(super::payouts_of_client_ids(chunk))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending))
            .filter(payout::Column::StuckSince.is_null())
            .lock_exclusive()
            .into_tuple()
            .all(&*tx)
            .await?;
        let mut runs: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
        runs.sort();
        runs.dedup();
        let held: Vec<String> = run_lease::Entity::find()
            .select_only()
            .column(run_lease::Column::RunId)
            .filter(run_lease::Column::RunId.is_in(runs))
            .filter(run_lease::Column::Owner.eq(owner))
            .filter(run_lease::Column::ExpiresAt.gt(now))
            .lock_shared()
            .into_tuple()
            .all(&*tx)
            .await?;
        let allowed: Vec<&(String, String, String, i32)> =
            rows.iter().filter(|r| held.contains(&r.1)).collect();
        if allowed.is_empty() {
            continue;
        }
        payout::Entity::update_many()
            .col_expr(
                payout::Column::SendCount,
                Expr::col(payout::Column::SendCount).add(1),
            )
            .col_expr(payout::Column::LastSentAt, Expr::value(now))
            .filter(payout::Column::Id.is_in(allowed.iter().map(|r| r.0.clone())))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending))
            .filter(payout::Column::StuckSince.is_null())
            .exec(&*tx)
            .await?;
        for (_, _, client_id, count) in allowed {
            stamped.insert(client_id.clone(), count + 1);
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
            .filter(super::payouts_of_client_ids(chunk))
            .filter(payout::Column::SendCount.gt(0))
            .exec(conn)
            .await?;
    }
    Ok(())
}
