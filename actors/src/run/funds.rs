//! Funding figures (CONTRACT §7). A run's required funds are the amounts and fees of its PENDING
//! payouts; DEPOSITED and PAYING_OUT runs hold theirs reserved. Checks run inside a write
//! transaction holding the funds lock, so two runs never reserve the same money.

use payroll_entities::{PayoutStatus, RunStatus, payout, payroll_run};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QueryFilter, QuerySelect,
    Statement,
    sea_query::{Expr, ExprTrait as _, Query},
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
