//! Test-run deductions (CONTRACT §9) as the run's steps move them: taken from an employee's
//! balance at confirm, given back when a run is cancelled or its payouts fail, credited when a
//! test payout completes.

use payroll_entities::{PayoutStatus, employee, payout};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait as _, IntoCondition},
};

use super::{messages::RunError, store::IDS_PER_STATEMENT};

/// Adds `amount` to an employee's test-run deduction balance (negative amounts are not used:
/// a deduction is taken by [`take_deduction`]).
pub async fn credit_deduction<C: ConnectionTrait>(
    conn: &C,
    employee_id: &str,
    amount: i64,
) -> Result<(), RunError> {
    employee::Entity::update_many()
        .col_expr(
            employee::Column::TestDeductionBalanceUsdCents,
            Expr::col(employee::Column::TestDeductionBalanceUsdCents).add(amount),
        )
        .filter(employee::Column::Id.eq(employee_id))
        .exec(conn)
        .await?;
    Ok(())
}

/// Takes `amount` off an employee's test-run deduction balance in one statement, only if the
/// balance still holds it; answers whether it was taken. What a completing test payout adds
/// meanwhile stays on the balance.
pub async fn take_deduction<C: ConnectionTrait>(
    conn: &C,
    employee_id: &str,
    amount: i64,
) -> Result<bool, RunError> {
    let taken = employee::Entity::update_many()
        .col_expr(
            employee::Column::TestDeductionBalanceUsdCents,
            Expr::col(employee::Column::TestDeductionBalanceUsdCents).sub(amount),
        )
        .filter(employee::Column::Id.eq(employee_id))
        .filter(employee::Column::TestDeductionBalanceUsdCents.gte(amount))
        .exec(conn)
        .await?;
    Ok(taken.rows_affected == 1)
}

/// Payouts whose deductions are given back or credited per page, so memory does not grow
/// with the run.
const PAGE: u64 = 2000;

/// The next page of the run's payouts in `status` that `matching` keeps, after the id `after`:
/// (payout, employee, the cents in column `cents`).
async fn page<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    status: PayoutStatus,
    matching: impl IntoCondition,
    cents: payout::Column,
    after: Option<&str>,
) -> Result<Vec<(String, String, i64)>, RunError> {
    let mut query = payout::Entity::find()
        .select_only()
        .column(payout::Column::Id)
        .column(payout::Column::EmployeeId)
        .column(cents)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(status))
        .filter(matching);
    if let Some(after) = after {
        query = query.filter(payout::Column::Id.gt(after));
    }
    Ok(query
        .order_by_asc(payout::Column::Id)
        .limit(PAGE)
        .into_tuple()
        .all(conn)
        .await?)
}

/// Gives back the test-run deductions of this run's FAILED payouts (the run has ended): each
/// payout's amount becomes its whole amount again, so a retry pays it in full, and the
/// employee's balance waits for a later run. Answers the sum given back.
pub async fn return_failed_deductions<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
) -> Result<i64, RunError> {
    let mut returned = 0i64;
    let mut after: Option<String> = None;
    loop {
        let taken = page(
            conn,
            run_id,
            PayoutStatus::Failed,
            payout::Column::TestRunDeductionUsdCents.gt(0),
            payout::Column::TestRunDeductionUsdCents,
            after.as_deref(),
        )
        .await?;
        let Some((last, ..)) = taken.last() else {
            break;
        };
        after = Some(last.clone());
        for (_, employee_id, amount) in &taken {
            credit_deduction(conn, employee_id, *amount).await?;
            returned += amount;
        }
        for chunk in taken.chunks(IDS_PER_STATEMENT) {
            payout::Entity::update_many()
                .col_expr(
                    payout::Column::AmountUsdCents,
                    Expr::col(payout::Column::AmountUsdCents)
                        .add(Expr::col(payout::Column::TestRunDeductionUsdCents)),
                )
                .col_expr(payout::Column::TestRunDeductionUsdCents, Expr::value(0i64))
                .filter(payout::Column::Id.is_in(chunk.iter().map(|(id, _, _)| id.clone())))
                .exec(conn)
                .await?;
        }
    }
    Ok(returned)
}

/// Credits each payee of `job_id`'s completed test payouts with what it was paid, as a
/// deduction from their next regular run (CONTRACT §9). Answers the sum credited.
pub async fn credit_completed<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    job_id: Option<&str>,
) -> Result<i64, RunError> {
    let mut credited = 0i64;
    let mut after: Option<String> = None;
    loop {
        let paid = page(
            conn,
            run_id,
            PayoutStatus::Completed,
            payout::Column::JobId.eq(job_id),
            payout::Column::AmountUsdCents,
            after.as_deref(),
        )
        .await?;
        let Some((last, ..)) = paid.last() else {
            break;
        };
        after = Some(last.clone());
        for (_, employee_id, amount) in &paid {
            credit_deduction(conn, employee_id, *amount).await?;
            credited += amount;
        }
    }
    Ok(credited)
}

/// Gives test-run deductions taken by this run's payouts back to their employees.
pub async fn return_deductions<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
) -> Result<i64, RunError> {
    let taken: Vec<(String, i64)> = payout::Entity::find()
        .select_only()
        .column(payout::Column::EmployeeId)
        .column(payout::Column::TestRunDeductionUsdCents)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::TestRunDeductionUsdCents.gt(0))
        .into_tuple()
        .all(conn)
        .await?;
    for (employee_id, amount) in &taken {
        credit_deduction(conn, employee_id, *amount).await?;
    }
    // Given back once: the payouts no longer hold them.
    payout::Entity::update_many()
        .col_expr(payout::Column::TestRunDeductionUsdCents, Expr::value(0i64))
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::TestRunDeductionUsdCents.gt(0))
        .exec(conn)
        .await?;
    Ok(taken.iter().map(|(_, a)| a).sum())
}
