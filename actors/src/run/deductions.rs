//! Test-run deductions (CONTRACT §9) as the run's steps move them: taken from an employee's
//! balance at confirm, given back when a run is cancelled or its payouts fail, credited when a
//! test payout completes.

use payroll_entities::{PayoutStatus, employee, payout};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect,
    sea_query::{Expr, ExprTrait as _},
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

/// Gives back the test-run deductions of this run's FAILED payouts (the run has ended): each
/// payout's amount becomes its whole amount again, so a retry pays it in full, and the
/// employee's balance waits for a later run. Answers the sum given back.
pub async fn return_failed_deductions<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
) -> Result<i64, RunError> {
    let taken: Vec<(String, String, i64)> = payout::Entity::find()
        .select_only()
        .column(payout::Column::Id)
        .column(payout::Column::EmployeeId)
        .column(payout::Column::TestRunDeductionUsdCents)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Failed))
        .filter(payout::Column::TestRunDeductionUsdCents.gt(0))
        .into_tuple()
        .all(conn)
        .await?;
    for (_, employee_id, amount) in &taken {
        credit_deduction(conn, employee_id, *amount).await?;
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
    Ok(taken.iter().map(|(_, _, a)| a).sum())
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
