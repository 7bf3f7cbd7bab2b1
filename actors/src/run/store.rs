//! All SQL of runs and payouts: the snapshot a run actor holds, versioned run writes,
//! payout upserts, and the lookups the run's steps share (claims of client ids: `window`).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use payroll_entities::{
    PayoutStatus, RunStatus, RunType, bulk, db::Db, employee, job, payout, payroll_run, time,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Statement,
    sea_query::{Expr, OnConflict, Query},
};

use super::messages::RunError;

/// Ids per `IN (…)` list.
pub(super) const IDS_PER_STATEMENT: usize = 1000;

/// The run as its actor holds it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub run: payroll_run::Model,
    pub job: Option<job::Model>,
}

pub async fn load(db: &Db, run_id: &str) -> Result<Snapshot, RunError> {
    let run = payroll_run::Entity::find_by_id(run_id.to_owned())
        .one(&db.conn)
        .await?
        .ok_or(RunError::NotFound)?;
    let job = match &run.current_job_id {
        Some(id) => job::Entity::find_by_id(id.clone()).one(&db.conn).await?,
        None => None,
    };
    Ok(Snapshot { run, job })
}

/// The run's version as stored (None: the run is gone).
pub async fn stored_version(db: &Db, run_id: &str) -> Result<Option<i64>, DbErr> {
    payroll_run::Entity::find_by_id(run_id.to_owned())
        .select_only()
        .column(payroll_run::Column::Version)
        .into_tuple::<i64>()
        .one(&db.conn)
        .await
}

/// Writes the run if nobody changed it since `before_version`; bumps its version.
pub async fn save_run<C: ConnectionTrait>(
    conn: &C,
    before_version: i64,
    run: &mut payroll_run::Model,
) -> Result<(), RunError> {
    run.version = before_version + 1;
    run.updated_at = time::now();
    let changes = run.clone().into_active_model().reset_all();
    let written = payroll_run::Entity::update_many()
        .set(changes)
        .filter(payroll_run::Column::Id.eq(run.id.as_str()))
        .filter(payroll_run::Column::Version.eq(before_version))
        .exec(conn)
        .await?
        .rows_affected;
    if written == 1 {
        Ok(())
    } else {
        let stored = payroll_run::Entity::find_by_id(run.id.clone())
            .one(conn)
            .await?;
        tracing::warn!(
            run_id = %run.id,
            expected_version = before_version,
            stored_version = ?stored.map(|r| r.version),
            "stale run snapshot"
        );
        Err(RunError::Stale)
    }
}

/// Locks the run's row for the rest of the transaction and checks that it is still the
/// snapshot's version. When another instance changed it meanwhile (two instances executing
/// one run at once), the command is judged again against the run as stored: refused with its
/// current status when it no longer applies (`applies` says), else [`RunError::Stale`] (the
/// actor reloads and the client retries). Either way it is [`RunError::Superseded`], before
/// anything is written.
pub async fn lock_version<C: ConnectionTrait>(
    conn: &C,
    snapshot: &payroll_run::Model,
    applies: impl FnOnce(&payroll_run::Model) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let stored = payroll_run::Entity::find_by_id(snapshot.id.clone())
        .lock_exclusive()
        .one(conn)
        .await?
        .ok_or(RunError::NotFound)?;
    if stored.version == snapshot.version {
        return Ok(());
    }
    tracing::info!(
        run_id = %snapshot.id,
        snapshot_version = snapshot.version,
        stored_version = stored.version,
        "the run changed elsewhere; the command is judged against the stored run"
    );
    let answer = match applies(&stored) {
        Ok(()) => RunError::Stale,
        Err(refusal) => refusal,
    };
    Err(RunError::Superseded(Box::new(answer)))
}

/// Writes the job, stamping its update time.
pub async fn save_job<C: ConnectionTrait>(conn: &C, job: &mut job::Model) -> Result<(), RunError> {
    job.updated_at = time::now();
    job::Entity::update(job.clone().into_active_model().reset_all())
        .exec(conn)
        .await?;
    Ok(())
}

/// Writes changed payouts in multi-row statements (insert-or-update by id).
pub async fn save_payouts<C: ConnectionTrait>(
    conn: &C,
    payouts: &[payout::Model],
) -> Result<(), RunError> {
    use payout::Column as C;
    let on_conflict = OnConflict::column(C::Id)
        .update_columns([
            C::EmployeeName,
            C::EmployeeEmail,
            C::Status,
            C::AmountUsdCents,
            C::FeeUsdCents,
            C::TestRunDeductionUsdCents,
            C::Network,
            C::WalletAddress,
            C::Attempt,
            C::JobId,
            C::ClientWithdrawalId,
            C::CexWithdrawalId,
            C::OnChainTxHash,
            C::BlockExplorerUrl,
            C::FailedReason,
            C::InitiatedAt,
            C::CompletedAt,
            C::StuckSince,
            C::UpdatedAt,
        ])
        .to_owned();
    bulk::insert_chunked(
        conn,
        payouts
            .iter()
            .cloned()
            .map(IntoActiveModel::into_active_model),
        Some(&on_conflict),
    )
    .await?;
    Ok(())
}

/// What a settlement wrote to a payout, and so the columns it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// PROCESSING: the exchange took the withdrawal.
    Accepted,
    /// COMPLETED, with where to see it on chain.
    Completed,
    /// FAILED, with the reason.
    Failed,
    /// Marked stuck, status unchanged.
    Stuck,
    /// One more look-up that did not find it, status unchanged.
    Unfound,
}

impl Settled {
    const ALL: [Settled; 5] = [
        Settled::Accepted,
        Settled::Completed,
        Settled::Failed,
        Settled::Stuck,
        Settled::Unfound,
    ];

    /// The columns this change writes, besides the id.
    fn columns(self) -> &'static [payout::Column] {
        use payout::Column as C;
        match self {
            Settled::Accepted => &[C::Status, C::CexWithdrawalId, C::StuckSince, C::UpdatedAt],
            Settled::Completed => &[
                C::Status,
                C::CexWithdrawalId,
                C::OnChainTxHash,
                C::BlockExplorerUrl,
                C::CompletedAt,
                C::StuckSince,
                C::UpdatedAt,
            ],
            Settled::Failed => &[
                C::Status,
                C::CexWithdrawalId,
                C::FailedReason,
                C::StuckSince,
                C::UpdatedAt,
            ],
            Settled::Stuck => &[C::StuckSince, C::UpdatedAt],
            Settled::Unfound => &[C::UnfoundLookups],
        }
    }

    /// The payout's id and the values of [`Settled::columns`], in that order.
    fn row(self, p: &payout::Model) -> Vec<sea_orm::Value> {
        use sea_orm::Value;
        let id = Value::from(p.id.clone());
        let status = Value::from(p.status.as_str());
        let cex_id = Value::from(p.cex_withdrawal_id.clone());
        let stuck = Value::from(p.stuck_since);
        let updated = Value::from(p.updated_at);
        match self {
            Settled::Accepted => vec![id, status, cex_id, stuck, updated],
            Settled::Completed => vec![
                id,
                status,
                cex_id,
                Value::from(p.on_chain_tx_hash.clone()),
                Value::from(p.block_explorer_url.clone()),
                Value::from(p.completed_at),
                stuck,
                updated,
            ],
            Settled::Failed => vec![
                id,
                status,
                cex_id,
                Value::from(p.failed_reason.clone()),
                stuck,
                updated,
            ],
            Settled::Stuck => vec![id, stuck, updated],
            Settled::Unfound => vec![id, Value::from(p.unfound_lookups)],
        }
    }
}

/// Writes what the exchange's word changes on payouts, one `UPDATE … FROM (VALUES …)` per kind
/// of change (or a few, for many), each binding only the columns that change writes, rather
/// than an upsert of every column: settling never changes who is paid, how much or where.
pub async fn save_settled<C: ConnectionTrait>(
    conn: &C,
    payouts: &[(payout::Model, Settled)],
) -> Result<(), RunError> {
    for kind in Settled::ALL {
        let rows: Vec<Vec<sea_orm::Value>> = payouts
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(p, _)| kind.row(p))
            .collect();
        if !rows.is_empty() {
            bulk::update_from_values::<payout::Entity, _>(
                conn,
                payout::Column::Id,
                kind.columns(),
                rows,
            )
            .await?;
        }
    }
    Ok(())
}

/// A new attempt starts with no sends: counted sends belong to the attempt before. (Sends are
/// only ever counted by the exchange actor's fence, so `save_payouts` never writes them.)
pub async fn reset_sends<C: ConnectionTrait>(
    conn: &C,
    payout_ids: &[String],
) -> Result<(), RunError> {
    for chunk in payout_ids.chunks(IDS_PER_STATEMENT) {
        payout::Entity::update_many()
            .col_expr(payout::Column::SendCount, Expr::value(0))
            .col_expr(payout::Column::UnfoundLookups, Expr::value(0))
            .col_expr(
                payout::Column::LastSentAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .filter(payout::Column::Id.is_in(chunk.iter().cloned()))
            .exec(conn)
            .await?;
    }
    Ok(())
}

/// How many of the run's payouts are in `status`.
pub async fn count_in_status<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    status: PayoutStatus,
) -> Result<i64, RunError> {
    use sea_orm::PaginatorTrait as _;
    let count = payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(status))
        .count(conn)
        .await?;
    Ok(i64::try_from(count).unwrap_or(i64::MAX))
}

/// Up to `limit` of the run's payouts in `status` after `after` (an id), by id: one page of a
/// walk that never holds the whole run.
pub async fn payouts_page<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    status: PayoutStatus,
    after: Option<&str>,
    limit: u64,
) -> Result<Vec<payout::Model>, RunError> {
    let mut query = payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(status));
    if let Some(after) = after {
        query = query.filter(payout::Column::Id.gt(after));
    }
    Ok(query
        .order_by_asc(payout::Column::Id)
        .limit(limit)
        .all(conn)
        .await?)
}

/// Payouts by id, loaded in chunks.
pub async fn payouts_by_id<C: ConnectionTrait>(
    conn: &C,
    ids: &[String],
) -> Result<HashMap<String, payout::Model>, RunError> {
    load_payouts(conn, ids, false).await
}

/// Payouts by id, locked for the rest of the transaction on PostgreSQL (SQLite's write
/// transactions hold the database): a send stamped meanwhile by the exchange actor either
/// commits first, and is read here, or waits for this transaction and sees what it wrote.
pub async fn payouts_by_id_locked<C: ConnectionTrait>(
    conn: &C,
    ids: &[String],
) -> Result<HashMap<String, payout::Model>, RunError> {
    load_payouts(conn, ids, true).await
}

async fn load_payouts<C: ConnectionTrait>(
    conn: &C,
    ids: &[String],
    lock: bool,
) -> Result<HashMap<String, payout::Model>, RunError> {
    let mut sorted = ids.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut payouts = HashMap::with_capacity(sorted.len());
    for chunk in sorted.chunks(IDS_PER_STATEMENT) {
        let query = payout::Entity::find()
            .filter(bulk::one_of(
                conn.get_database_backend(),
                payout::Column::Id,
                chunk.iter().cloned(),
            ))
            // Rows are locked in one order, so two lockers never wait on each other.
            .order_by_asc(payout::Column::Id);
        let query = if lock { query.lock_exclusive() } else { query };
        for p in query.all(conn).await? {
            payouts.insert(p.id.clone(), p);
        }
    }
    Ok(payouts)
}

/// The payout, locked for the rest of the transaction on PostgreSQL (SQLite's write
/// transactions hold the database): a claim by the run's lease holder on another instance
/// waits for this transaction, or this one reads what the claim committed.
pub async fn payout_by_id<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    payout_id: &str,
) -> Result<payout::Model, RunError> {
    payout::Entity::find_by_id(payout_id.to_owned())
        .lock_exclusive()
        .one(conn)
        .await?
        .filter(|p| p.payroll_run_id == run_id)
        .ok_or_else(|| RunError::PayoutNotFound(payout_id.to_owned()))
}

/// Makes the run's PENDING payouts part of `job_id`; answers how many.
pub async fn assign_pending_to_job<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    job_id: &str,
) -> Result<u64, RunError> {
    Ok(payout::Entity::update_many()
        .col_expr(payout::Column::JobId, Expr::value(job_id))
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .exec(conn)
        .await?
        .rows_affected)
}

pub async fn insert_job<C: ConnectionTrait>(conn: &C, job: &job::Model) -> Result<(), RunError> {
    job::Entity::insert(job.clone().into_active_model())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// Client ids of the run's payouts handed to the exchange and not yet terminal.
pub async fn unsettled_client_ids(db: &Db, run_id: &str) -> Result<Vec<String>, RunError> {
    let ids: Vec<Option<String>> = payout::Entity::find()
        .select_only()
        .column(payout::Column::ClientWithdrawalId)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.is_in([PayoutStatus::Pending, PayoutStatus::Processing]))
        .filter(payout::Column::ClientWithdrawalId.is_not_null())
        .order_by_asc(payout::Column::Id)
        .into_tuple()
        .all(&db.conn)
        .await?;
    Ok(ids.into_iter().flatten().collect())
}

/// Client ids of payouts PROCESSING since before `since` and not yet reported stuck.
pub async fn processing_since(
    db: &Db,
    run_id: &str,
    since: DateTime<Utc>,
) -> Result<Vec<String>, RunError> {
    let ids: Vec<Option<String>> = payout::Entity::find()
        .select_only()
        .column(payout::Column::ClientWithdrawalId)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Processing))
        .filter(payout::Column::StuckSince.is_null())
        .filter(payout::Column::InitiatedAt.lt(since))
        .into_tuple()
        .all(&db.conn)
        .await?;
    Ok(ids.into_iter().flatten().collect())
}

/// When the first of these client ids was first sent (none was sent before it).
pub async fn first_sent(db: &Db, client_ids: &[String]) -> Result<Option<DateTime<Utc>>, RunError> {
    let mut first: Option<DateTime<Utc>> = None;
    for chunk in client_ids.chunks(IDS_PER_STATEMENT) {
        let found: Option<Option<DateTime<Utc>>> = payout::Entity::find()
            .select_only()
            .column_as(payout::Column::InitiatedAt.min(), "first")
            .filter(crate::exchange::payouts_of_client_ids(db.backend(), chunk))
            .into_tuple()
            .one(&db.conn)
            .await?;
        if let Some(Some(t)) = found {
            first = Some(first.map_or(t, |f| std::cmp::min(f, t)));
        }
    }
    Ok(first)
}

/// The payouts of a job not yet sent to the exchange: PENDING, no send counted.
pub async fn unsent_of_job<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    job_id: &str,
) -> Result<Vec<payout::Model>, RunError> {
    // Locked (PostgreSQL; SQLite holds the database), and the condition read again after any
    // wait: a send the exchange actor stamps meanwhile keeps its payout out of this list.
    Ok(payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::JobId.eq(job_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .filter(payout::Column::SendCount.eq(0))
        .order_by_asc(payout::Column::Id)
        .lock_exclusive()
        .all(conn)
        .await?)
}

/// The stuck payouts of a run, or of every run, oldest first. A payout is stuck only while its
/// run pays (PAYING_OUT), so without a run only those runs' payouts are read, through the
/// index on the run: never the history of every run paid.
pub async fn stuck_of<C: ConnectionTrait>(
    conn: &C,
    run_id: Option<&str>,
    limit: u64,
) -> Result<Vec<payout::Model>, RunError> {
    let query = payout::Entity::find()
        .filter(payout::Column::StuckSince.is_not_null())
        .filter(payout::Column::Status.is_in([PayoutStatus::Pending, PayoutStatus::Processing]));
    let query = match run_id {
        Some(run_id) => query.filter(payout::Column::PayrollRunId.eq(run_id)),
        None => query.filter(
            payout::Column::PayrollRunId.in_subquery(
                Query::select()
                    .column(payroll_run::Column::Id)
                    .from(payroll_run::Entity)
                    .and_where(payroll_run::Column::Status.eq(RunStatus::PayingOut))
                    .to_owned(),
            ),
        ),
    };
    Ok(query
        .order_by_asc(payout::Column::StuckSince)
        .limit(limit)
        .all(conn)
        .await?)
}

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

/// Inserts a run's row (its payouts follow with [`insert_payouts`]).
pub async fn insert_run<C: ConnectionTrait>(
    conn: &C,
    run: payroll_run::Model,
) -> Result<(), DbErr> {
    payroll_run::Entity::insert(run.into_active_model())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// New payouts, in multi-row statements.
pub async fn insert_payouts<C: ConnectionTrait>(
    conn: &C,
    payouts: Vec<payout::Model>,
) -> Result<(), DbErr> {
    bulk::insert_chunked(
        conn,
        payouts.into_iter().map(IntoActiveModel::into_active_model),
        None,
    )
    .await?;
    Ok(())
}

/// Employees by id, loaded in chunks (duplicates asked once).
pub async fn employees_by_id<C: ConnectionTrait>(
    conn: &C,
    ids: impl Iterator<Item = String>,
) -> Result<HashMap<String, employee::Model>, DbErr> {
    let ids: Vec<String> = ids.collect::<HashSet<_>>().into_iter().collect();
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
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
