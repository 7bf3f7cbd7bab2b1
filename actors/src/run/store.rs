//! Persistence of runs as they are created, and lookups the run operations share.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use payroll_entities::{RunStatus, RunType, employee, payout, payroll_run};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, Statement,
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

/// Employees by id, loaded in chunks (duplicates asked once).
pub async fn employees_by_id<C: ConnectionTrait>(
    conn: &C,
    ids: impl Iterator<Item = String>,
) -> Result<HashMap<String, employee::Model>, DbErr> {
    let ids: Vec<String> = ids.collect::<HashSet<_>>().into_iter().collect();
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        for e in employee::Entity::find()
            .filter(employee::Column::Id.is_in(chunk.iter().cloned()))
            .all(conn)
            .await?
        {
            out.insert(e.id.clone(), e);
        }
    }
    Ok(out)
}
