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
    ColumnTrait, ConnectionTrait as _, DbErr, EntityTrait, QueryFilter, QuerySelect, QueryTrait,
    sea_query::{Expr, ExprTrait as _, Query},
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
    // The runs `owner` holds now, shared-locked first (PostgreSQL; SQLite holds the database):
    // a takeover waits for this stamp, and sees it.
    let held: Vec<String> = run_lease::Entity::find()
        .select_only()
        .column(run_lease::Column::RunId)
        .filter(run_lease::Column::Owner.eq(owner))
        .filter(run_lease::Column::ExpiresAt.gt(now))
        .lock_shared()
        .into_tuple()
        .all(&*tx)
        .await?;
    if held.is_empty() {
        tx.commit().await?;
        return Ok(stamped);
    }
    for chunk in client_ids.chunks(CHUNK) {
        // One statement stamps and answers the counts. A transaction that ends the payout
        // meanwhile (a job failing, a look-up settling it) either commits first, and the row no
        // longer qualifies, or waits for this stamp (the row is locked) and sees it.
        let mut update = payout::Entity::update_many()
            .col_expr(
                payout::Column::SendCount,
                Expr::col(payout::Column::SendCount).add(1),
            )
            .col_expr(payout::Column::LastSentAt, Expr::value(now))
            .filter(payout::Column::ClientWithdrawalId.is_in(chunk.iter().cloned()))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending))
            .filter(payout::Column::StuckSince.is_null())
            .filter(payout::Column::PayrollRunId.is_in(held.iter().cloned()))
            .into_query();
        update.returning(Query::returning().columns([
            payout::Column::ClientWithdrawalId,
            payout::Column::SendCount,
        ]));
        for row in tx.query_all(&update).await? {
            let client_id: String = row.try_get_by_index(0)?;
            let count: i32 = row.try_get_by_index(1)?;
            stamped.insert(client_id, count);
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
            .filter(payout::Column::ClientWithdrawalId.is_in(chunk.iter().cloned()))
            .filter(payout::Column::SendCount.gt(0))
            .exec(conn)
            .await?;
    }
    Ok(())
}
