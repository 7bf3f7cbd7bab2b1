//! The `RetentionJanitor` purges idempotency records past their retention window.

use std::time::Duration;

use actix::prelude::*;
use payroll_entities::{db::Db, idempotency_record, time};
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
                }
                .into_actor(this),
            );
        });
    }
}
