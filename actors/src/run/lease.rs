//! Run leases: several instances on one database, each run worked by one of them. The holder
//! of a run's lease row sends its withdrawals, follows them at the exchange and watches its
//! funds; it renews the lease by heartbeat, and when it stops renewing (a crash, a lost
//! network) the lease expires and another instance takes the run over, reloading it from the
//! database. Any instance may still carry out a client's command on any run: run writes check
//! the run's version, so a stale writer fails and reloads instead of overwriting.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use payroll_entities::{RunStatus, db::Db, health::DbHealth, payroll_run, run_lease};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter, QuerySelect,
    sea_query::{Expr, ExprTrait, OnConflict, Query},
};

/// The statuses in which a run has work of its own (watching funds, paying out).
pub const WORKING: [RunStatus; 2] = [RunStatus::Confirmed, RunStatus::PayingOut];

/// Who this instance is, how long its leases last, and the clock they are read by.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// This process's instance id, unique per start.
    pub owner: String,
    pub ttl: Duration,
    /// The database's health, which reads the database's clock: every instance writes and
    /// compares leases by that one clock, not its own (CONTRACT §13).
    clock: Arc<DbHealth>,
}

impl LeaseSettings {
    pub fn new(ttl: Duration, clock: Arc<DbHealth>) -> LeaseSettings {
        LeaseSettings {
            owner: format!("ins_{}", ulid::Ulid::new()),
            ttl,
            clock,
        }
    }

    /// Now by the database's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.clock_now()
    }

    /// How often a holder renews: three times per lease.
    pub fn heartbeat(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(10))
    }

    fn expiry(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::seconds(15))
    }
}

/// Takes the run's lease, or renews it if this instance holds it already. False when another
/// instance holds a lease that has not expired.
pub async fn acquire(db: &Db, settings: &LeaseSettings, run_id: &str) -> Result<bool, DbErr> {
    let tx = db.begin_write().await?;
    let now = settings.now();
    let row = run_lease::Model {
        run_id: run_id.to_owned(),
        owner: settings.owner.clone(),
        acquired_at: now,
        expires_at: settings.expiry(now),
    };
    let taken = run_lease::Entity::insert(row.into_active_model())
        .on_conflict(
            OnConflict::column(run_lease::Column::RunId)
                .update_columns([run_lease::Column::Owner, run_lease::Column::ExpiresAt])
                .action_and_where(
                    Expr::col((run_lease::Entity, run_lease::Column::Owner))
                        .eq(settings.owner.as_str())
                        .or(Expr::col((run_lease::Entity, run_lease::Column::ExpiresAt)).lt(now)),
                )
                .to_owned(),
        )
        .exec_without_returning(&*tx)
        .await?;
    tx.commit().await?;
    Ok(taken == 1)
}

/// Whether this instance holds the run's lease now (checked inside the transaction that
/// commits withdrawals, so an instance that lost the lease commits none).
pub async fn holds<C: ConnectionTrait>(
    conn: &C,
    settings: &LeaseSettings,
    run_id: &str,
) -> Result<bool, DbErr> {
    // Shared-locked on PostgreSQL: a takeover (which updates the row) waits until the
    // transaction that checked it has committed, so the new holder sees what it committed.
    let held = run_lease::Entity::find_by_id(run_id.to_owned())
        .filter(run_lease::Column::Owner.eq(settings.owner.as_str()))
        .filter(run_lease::Column::ExpiresAt.gt(settings.now()))
        .lock_shared()
        .one(conn)
        .await?;
    Ok(held.is_some())
}

/// Renews, in one statement per chunk, this instance's live leases on these runs (the runs
/// with an actor here). It runs beside the actors, so a run actor busy with a long step
/// keeps its lease.
pub async fn renew(db: &Db, settings: &LeaseSettings, run_ids: &[String]) -> Result<(), DbErr> {
    let now = settings.now();
    for chunk in run_ids.chunks(500) {
        let tx = db.begin_write().await?;
        run_lease::Entity::update_many()
            .col_expr(
                run_lease::Column::ExpiresAt,
                Expr::value(settings.expiry(now)),
            )
            .filter(run_lease::Column::Owner.eq(settings.owner.as_str()))
            .filter(run_lease::Column::ExpiresAt.gt(now))
            .filter(run_lease::Column::RunId.is_in(chunk.to_vec()))
            .exec(&*tx)
            .await?;
        tx.commit().await?;
    }
    Ok(())
}

/// A subquery of the runs whose lease this instance holds now.
pub fn held_runs(settings: &LeaseSettings) -> sea_orm::sea_query::SelectStatement {
    run_lease::runs_held_by(&settings.owner, settings.now())
}

/// Gives the run's lease up (the run is done, or this instance is stopping), so another
/// instance may take it at once.
pub async fn release(db: &Db, settings: &LeaseSettings, run_id: &str) -> Result<(), DbErr> {
    let tx = db.begin_write().await?;
    run_lease::Entity::delete_many()
        .filter(run_lease::Column::RunId.eq(run_id))
        .filter(run_lease::Column::Owner.eq(settings.owner.as_str()))
        .exec(&*tx)
        .await?;
    tx.commit().await
}

/// Gives up every lease this instance holds.
pub async fn release_all(db: &Db, settings: &LeaseSettings) -> Result<u64, DbErr> {
    let tx = db.begin_write().await?;
    let released = run_lease::Entity::delete_many()
        .filter(run_lease::Column::Owner.eq(settings.owner.as_str()))
        .exec(&*tx)
        .await?
        .rows_affected;
    tx.commit().await?;
    Ok(released)
}

/// Runs with work of their own and no live lease: nobody works them.
pub async fn orphaned<C: ConnectionTrait>(
    conn: &C,
    settings: &LeaseSettings,
) -> Result<Vec<String>, DbErr> {
    let live = Query::select()
        .column(run_lease::Column::RunId)
        .from(run_lease::Entity)
        .and_where(Expr::col(run_lease::Column::ExpiresAt).gt(settings.now()))
        .to_owned();
    payroll_run::Entity::find()
        .select_only()
        .column(payroll_run::Column::Id)
        .filter(payroll_run::Column::Status.is_in(WORKING))
        .filter(payroll_run::Column::Id.not_in_subquery(live))
        .into_tuple::<String>()
        .all(conn)
        .await
}
