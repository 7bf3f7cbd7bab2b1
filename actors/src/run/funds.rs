//! Funding figures (CONTRACT §7). A run's required funds are the amounts and fees of its PENDING
//! payouts; DEPOSITED and PAYING_OUT runs hold theirs reserved. Checks run inside a write
//! transaction holding the funds lock, so two runs never reserve the same money. The funds
//! watch moves a CONFIRMED run to DEPOSITED once it is covered.

use payroll_entities::{PayoutStatus, RunStatus, db::WriteTx, job, payout, payroll_run, time};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QueryFilter, QuerySelect,
    Statement,
    sea_query::{Expr, ExprTrait as _, Query},
};
use serde_json::json;

use super::{
    deps::RunDeps,
    messages::RunError,
    store::{self, Snapshot},
};
use crate::{
    audit::{self, system_entry},
    events::{insert_events, run_event},
    exchange::actor::GetBalances,
    telemetry::CountedSend,
};

/// The figures of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub required: i64,
    /// What the exchange holds for this run: max(0, available − reserved by other runs).
    pub available: i64,
    pub deficit: i64,
}

impl Figures {
    pub fn new(exchange_available: i64, reserved_by_others: i64, required: i64) -> Figures {
        let available = std::cmp::max(exchange_available.saturating_sub(reserved_by_others), 0);
        Figures {
            required,
            available,
            deficit: std::cmp::max(required.saturating_sub(available), 0),
        }
    }

    pub fn sufficient(&self) -> bool {
        self.deficit == 0
    }
}

/// Serialises funds checks across transactions (and instances) on PostgreSQL; SQLite's write
/// transactions are serialised already.
pub async fn lock_funds<C: ConnectionTrait>(conn: &C) -> Result<(), DbErr> {
    if conn.get_database_backend() == DatabaseBackend::Postgres {
        conn.execute_raw(Statement::from_string(
            DatabaseBackend::Postgres,
            "SELECT pg_advisory_xact_lock(7301002)",
        ))
        .await?;
    }
    Ok(())
}

const SUM: &str = "CAST(COALESCE(SUM(amount_usd_cents + fee_usd_cents), 0) AS BIGINT)";

/// Σ amount + fee of the run's PENDING payouts (or of the given ones).
pub async fn required_of<C: ConnectionTrait>(conn: &C, run_id: &str) -> Result<i64, DbErr> {
    Ok(payout::Entity::find()
        .select_only()
        .column_as(Expr::cust(SUM), "total")
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .into_tuple::<i64>()
        .one(conn)
        .await?
        .unwrap_or(0))
}

/// What DEPOSITED and PAYING_OUT runs other than `run_id` hold reserved.
pub async fn reserved_by_others<C: ConnectionTrait>(conn: &C, run_id: &str) -> Result<i64, DbErr> {
    reserved_except(conn, Some(run_id)).await
}

/// What every funded run holds reserved.
pub async fn reserved_total<C: ConnectionTrait>(conn: &C) -> Result<i64, DbErr> {
    reserved_except(conn, None).await
}

async fn reserved_except<C: ConnectionTrait>(conn: &C, except: Option<&str>) -> Result<i64, DbErr> {
    let mut funded = Query::select()
        .column(payroll_run::Column::Id)
        .from(payroll_run::Entity)
        .and_where(
            Expr::col(payroll_run::Column::Status)
                .is_in([RunStatus::Deposited.as_str(), RunStatus::PayingOut.as_str()]),
        )
        .to_owned();
    if let Some(run_id) = except {
        funded.and_where(Expr::col(payroll_run::Column::Id).ne(run_id));
    }
    Ok(payout::Entity::find()
        .select_only()
        .column_as(Expr::cust(SUM), "total")
        .filter(payout::Column::PayrollRunId.in_subquery(funded))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .into_tuple::<i64>()
        .one(conn)
        .await?
        .unwrap_or(0))
}

async fn exchange_available(deps: &RunDeps) -> Result<i64, RunError> {
    Ok(deps
        .exchange
        .counted_send(GetBalances)
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(|e| RunError::Exchange(e.to_string()))?
        .available
        .0)
}

/// A write transaction in which a funding decision is made, with its figures. Decisions are
/// serialised (the process's funds lock, and PostgreSQL's advisory lock held from the first
/// read to the commit). Reservations are read before the exchange balance: a withdrawal
/// accepted in between lowers the balance after its reservation was counted, which can only
/// understate what is free, never overstate it. `required` defaults to the run's pending
/// payouts. Keep the returned guard until the transaction commits.
pub async fn funds_transaction<'a>(
    deps: &'a RunDeps,
    run_id: &str,
    required: Option<i64>,
) -> Result<(WriteTx, Figures, tokio::sync::MutexGuard<'a, ()>), RunError> {
    let guard = deps.funds_lock.lock().await;
    let (tx, reserved) = if deps.db.backend() == sea_orm::DatabaseBackend::Postgres {
        let tx = deps.db.begin_write().await?;
        lock_funds(&*tx).await?;
        let reserved = reserved_by_others(&*tx, run_id).await?;
        (Some(tx), reserved)
    } else {
        // SQLite: the sandbox writes to this database too, so no write transaction may be
        // held across the exchange call; the funds lock serialises the decisions.
        (None, reserved_by_others(&deps.db.conn, run_id).await?)
    };
    let available = exchange_available(deps).await?;
    let tx = match tx {
        Some(tx) => tx,
        None => deps.db.begin_write().await?,
    };
    let required = match required {
        Some(r) => r,
        None => required_of(&*tx, run_id).await?,
    };
    Ok((tx, Figures::new(available, reserved, required), guard))
}

/// A CONFIRMED run the funds cover becomes DEPOSITED, with its event, in `tx`. The caller
/// checked the transition and the funds.
pub async fn mark_deposited(
    tx: &WriteTx,
    run: &payroll_run::Model,
    job: Option<&job::Model>,
) -> Result<payroll_run::Model, RunError> {
    let mut after = run.clone();
    after.status = RunStatus::Deposited;
    after.deposited_at = Some(time::now());
    store::save_run(&**tx, run.version, &mut after).await?;
    insert_events(tx, vec![run_event("payroll.run.deposited", &after, job)]).await?;
    Ok(after)
}

/// The funds watch of a CONFIRMED run: DEPOSITED once covered.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id))]
pub async fn watch_funds(deps: &RunDeps, snapshot: Snapshot) -> Result<Snapshot, RunError> {
    let Snapshot { run, job } = snapshot;
    if run.status != RunStatus::Confirmed {
        return Ok(Snapshot { run, job });
    }
    let (tx, f, _funds) = funds_transaction(deps, &run.id, None).await?;
    if !f.sufficient() {
        return Ok(Snapshot { run, job });
    }
    let after = mark_deposited(&tx, &run, job.as_ref()).await?;
    audit::insert(
        &*tx,
        system_entry(
            "PAYROLL_RUN_DEPOSITED",
            "payroll_run",
            &run.id,
            json!({
                "status": {"before": run.status, "after": after.status},
                "required_usdc_cents": f.required, "available_usdc_cents": f.available,
            }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(Snapshot { run: after, job })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_the_contract() {
        let f = Figures::new(10_000, 3_000, 5_000);
        assert_eq!(
            f,
            Figures {
                required: 5_000,
                available: 7_000,
                deficit: 0
            }
        );
        assert!(f.sufficient());
        let f = Figures::new(10_000, 8_000, 5_000);
        assert_eq!(
            f,
            Figures {
                required: 5_000,
                available: 2_000,
                deficit: 3_000
            }
        );
        assert!(!f.sufficient());
        // Money moved out from outside: available never goes below 0.
        let f = Figures::new(1_000, 8_000, 5_000);
        assert_eq!(
            f,
            Figures {
                required: 5_000,
                available: 0,
                deficit: 5_000
            }
        );
    }
}
