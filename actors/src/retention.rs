//! The `RetentionJanitor` purges idempotency records past their retention window, expires
//! approvals past theirs, and releases the holds of treasury transfers whose process stopped
//! before it released them.

use std::time::Duration;

use actix::prelude::*;
use payroll_entities::{db::Db, idempotency_record, time};

use crate::exchange::holds;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

pub struct RetentionJanitor {
    db: Db,
    interval: Duration,
}

impl RetentionJanitor {
    pub fn new(db: Db, interval: Duration) -> RetentionJanitor {
        RetentionJanitor { db, interval }
    }
}

/// Deletes expired idempotency records; returns how many.
pub async fn purge_expired_idempotency(db: &Db) -> Result<u64, sea_orm::DbErr> {
    let tx = db.begin_write().await?;
    let deleted = idempotency_record::Entity::delete_many()
        .filter(idempotency_record::Column::ExpiresAt.lt(time::now()))
        .exec(&*tx)
        .await?
        .rows_affected;
    tx.commit().await?;
    Ok(deleted)
}

/// How long a transfer's hold may last: far beyond any call to the exchange (each has a
/// deadline), so one still active is left from a process that stopped mid-transfer.
const TRANSFER_HOLD_LIMIT: chrono::Duration = chrono::Duration::minutes(10);

/// Releases transfer holds older than [`TRANSFER_HOLD_LIMIT`]; returns how many.
pub async fn release_stale_transfer_holds(db: &Db) -> Result<usize, sea_orm::DbErr> {
    // Transfer holds are stamped by the database's clock; judged by it too.
    let stale = holds::stale_transfer_holds(&db.conn, db.clock_now() - TRANSFER_HOLD_LIMIT).await?;
    if stale.is_empty() {
        return Ok(0);
    }
    let tx = db.begin_write().await?;
    holds::release(&*tx, &stale, holds::Release::Cancelled).await?;
    tx.commit().await?;
    Ok(stale.len())
}

impl Actor for RetentionJanitor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.interval, |this, ctx| {
            let db = this.db.clone();
            ctx.wait(
                async move {
                    match purge_expired_idempotency(&db).await {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(purged = n, "expired idempotency records purged"),
                        Err(err) => tracing::warn!(error = %err, "idempotency purge failed"),
                    }
                    match crate::approvals::expire_due(&db).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(approvals = n, "approvals expired"),
                        Err(err) => tracing::warn!(error = %err, "approvals not expired"),
                    }
                    match release_stale_transfer_holds(&db).await {
                        Ok(0) => {}
                        Ok(n) => tracing::warn!(
                            holds = n,
                            "holds of transfers left by a stopped process released"
                        ),
                        Err(err) => {
                            tracing::warn!(error = %err, "stale transfer holds not released")
                        }
                    }
                }
                .into_actor(this),
            );
        });
    }
}
