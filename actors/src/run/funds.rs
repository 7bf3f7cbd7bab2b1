//! Funding figures (CONTRACT §7). A run's required funds are the amounts and fees of its PENDING
//! payouts; a run becoming DEPOSITED creates a hold for each of them in the holds ledger. Every
//! decision is taken through the `FundsDesk` (one at a time, at the exchange actor's
//! consistent point), so two runs never reserve the same money. The funds watch moves a
//! CONFIRMED run to DEPOSITED once it is covered.

use payroll_entities::{
    PayoutStatus, RunStatus, db::WriteTx, health::Fault, job, payout, payroll_run, time,
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, sea_query::Expr,
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
    exchange::{
        desk::{DecisionGuard, DeskError},
        holds,
    },
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

    /// The same account's figures against another `required`.
    pub fn with_required(self, required: i64) -> Figures {
        Figures::new(self.available, 0, required)
    }
}

const SUM: &str = "CAST(COALESCE(SUM(amount_usd_cents + fee_usd_cents), 0) AS BIGINT)";

/// Σ amount + fee of the run's PENDING payouts.
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

impl From<DeskError> for RunError {
    fn from(err: DeskError) -> RunError {
        match err {
            DeskError::Db(e) => e.into(),
            DeskError::Exchange(e) => e.into(),
            DeskError::Mailbox(e) => RunError::Unavailable(e.to_string()),
            DeskError::Contended => {
                RunError::Database(Fault::Conflict, DeskError::Contended.to_string())
            }
        }
    }
}

/// A write transaction in which a funding decision about `run_id` is made, with its figures
/// from the exchange actor's consistent point: available − what other runs hold, against
/// `required` (the run's PENDING payouts unless given). Keep the guard until the transaction
/// commits.
pub async fn funds_transaction(
    deps: &RunDeps,
    run_id: &str,
    required: Option<i64>,
) -> Result<(WriteTx, Figures, DecisionGuard), RunError> {
    let decision = deps.funds.open(Some(run_id)).await?;
    let point = decision.point.clone();
    let (tx, guard) = decision.begin();
    let required = match required {
        Some(r) => r,
        None => required_of(&*tx, run_id).await?,
    };
    let figures = Figures::new(point.available(), point.reserved_by_others(), required);
    Ok((tx, figures, guard))
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
    holds::hold_pending_of_run(&**tx, &run.id).await?;
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
        assert_eq!(
            f.with_required(1_500),
            Figures {
                required: 1_500,
                available: 2_000,
                deficit: 0
            }
        );
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
