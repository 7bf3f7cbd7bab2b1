//! Persistence of runs and payouts. Every run write checks and increments `version`, so a stale
//! writer can never overwrite a newer state.

use chrono::{DateTime, Utc};
use payroll_entities::{PayoutStatus, RunStatus, RunType, payout, payroll_run};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait,
    IntoActiveModel, QueryFilter, Statement, sea_query::Expr,
};

/// Rows per INSERT: well below SQLite's and PostgreSQL's bind-parameter limits.
const INSERT_CHUNK: usize = 1000;

/// Serialises run creation on PostgreSQL for the rest of the transaction, so two concurrent
/// creations cannot both pass the overlap check. SQLite writers are serialised already.
pub async fn lock_run_creation<C: ConnectionTrait>(conn: &C) -> Result<(), DbErr> {
    if conn.get_database_backend() == DatabaseBackend::Postgres {
        conn.execute_raw(Statement::from_string(
            DatabaseBackend::Postgres,
            "SELECT pg_advisory_xact_lock(7301001)",
        ))
        .await?;
    }
    Ok(())
}

/// A regular, non-test, non-cancelled run sharing part of the period, if any.
pub async fn find_overlapping_regular<C: ConnectionTrait>(
    conn: &C,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Option<payroll_run::Model>, DbErr> {
    payroll_run::Entity::find()
        .filter(payroll_run::Column::RunType.eq(RunType::Regular))
        .filter(payroll_run::Column::IsTestRun.eq(false))
        .filter(payroll_run::Column::Status.ne(RunStatus::Cancelled))
        .filter(payroll_run::Column::PeriodStart.lte(end))
        .filter(payroll_run::Column::PeriodEnd.gte(start))
        .one(conn)
        .await
}

/// Inserts a run and its payouts, the payouts in multi-row statements.
pub async fn insert_run<C: ConnectionTrait>(
    conn: &C,
    run: payroll_run::Model,
    payouts: Vec<payout::Model>,
) -> Result<(), DbErr> {
    payroll_run::Entity::insert(run.into_active_model())
        .exec_without_returning(conn)
        .await?;
    let mut rows = payouts.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<payout::ActiveModel> = rows
            .by_ref()
            .take(INSERT_CHUNK)
            .map(IntoActiveModel::into_active_model)
            .collect();
        payout::Entity::insert_many(chunk)
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

/// The run was changed by someone else since it was read.
#[derive(Debug)]
pub struct StaleRun;

/// Writes `changes` to the run read as `before`, if nobody changed it since; bumps `version`.
pub async fn update_run<C: ConnectionTrait>(
    conn: &C,
    before: &payroll_run::Model,
    mut changes: payroll_run::ActiveModel,
) -> Result<Result<(), StaleRun>, DbErr> {
    changes.version = Set(before.version + 1);
    let result = payroll_run::Entity::update_many()
        .set(changes)
        .filter(payroll_run::Column::Id.eq(before.id.as_str()))
        .filter(payroll_run::Column::Version.eq(before.version))
        .exec(conn)
        .await?;
    Ok(if result.rows_affected == 1 {
        Ok(())
    } else {
        Err(StaleRun)
    })
}

/// Cancels every PENDING payout of a run; returns how many.
pub async fn cancel_pending_payouts<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    now: DateTime<Utc>,
) -> Result<u64, DbErr> {
    Ok(payout::Entity::update_many()
        .col_expr(
            payout::Column::Status,
            Expr::value(PayoutStatus::Cancelled.as_str()),
        )
        .col_expr(payout::Column::UpdatedAt, Expr::value(now))
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .exec(conn)
        .await?
        .rows_affected)
}
