//! The holds ledger of the exchange account (CONTRACT §7): one hold per funded payout attempt,
//! of its amount + fee. A hold is created in the transaction that funds its attempt (the run
//! becomes DEPOSITED, or a retry is accepted) and released in the transaction that records the
//! end of its claim on the balance (the exchange accepted it, or it ended without a
//! withdrawal). The account's reserved total is a counter moved by exactly what each of those
//! transactions creates or releases, so reading it costs one row.

use payroll_entities::{PayoutStatus, bulk::one_of, exchange_hold, exchange_reserve, payout, time};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement,
    sea_query::{Expr, ExprTrait as _, Query},
};

/// The one exchange account of a deployment.
pub const ACCOUNT: &str = "exchange";

/// Most keys in one statement (well under every backend's parameter limit): a whole batch of
/// sends.
const CHUNK: usize = 1000;

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The exchange accepted the withdrawal: its own available balance has dropped.
    Accepted,
    /// The exchange definitely refused the first send: nothing was withdrawn.
    Refused,
    /// The exchange reports the withdrawal failed before we saw it accepted.
    Failed,
    /// The payout or its run was cancelled before anything was sent.
    Cancelled,
}

impl Release {
    pub fn as_str(self) -> &'static str {
        match self {
            Release::Accepted => "accepted",
            Release::Refused => "refused",
            Release::Failed => "failed",
            Release::Cancelled => "cancelled",
        }
    }
}

/// A hold to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHold {
    pub payout_id: String,
    pub attempt: i32,
    pub run_id: String,
    /// Amount + fee.
    pub amount: i64,
}

const SUM: &str = "CAST(COALESCE(SUM(amount_usd_cents), 0) AS BIGINT)";

/// Σ active holds of the account (the counter), and the count of its funding decisions.
pub async fn reserved<C: ConnectionTrait>(conn: &C) -> Result<(i64, i64), DbErr> {
    Ok(exchange_reserve::Entity::find_by_id(ACCOUNT.to_owned())
        .one(conn)
        .await?
        .map_or((0, 0), |r| (r.reserved_usd_cents, r.decisions)))
}

/// The attempt number of a transfer's hold: a money movement out of the exchange account held
/// like a payout while the exchange is asked to make it (its id is the transfer's).
pub const TRANSFER_ATTEMPT: i32 = 0;

/// Holds `amount` for one try of an outgoing treasury transfer while the exchange makes it,
/// so that no decision taken meanwhile spends the same money; answers the hold's key. Each
/// try has a hold of its own (a try after a failed one holds again), stamped `now` by the
/// database's clock so that the janitor judges its age by the same clock.
pub async fn hold_transfer<C: ConnectionTrait>(
    conn: &C,
    transfer_id: &str,
    amount: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(String, i32), DbErr> {
    let key = payroll_entities::ids::new_id(payroll_entities::ids::IdKind::Transfer);
    hold_at(
        conn,
        vec![NewHold {
            payout_id: key.clone(),
            attempt: TRANSFER_ATTEMPT,
            run_id: transfer_id.to_owned(),
            amount,
        }],
        now,
    )
    .await?;
    Ok((key, TRANSFER_ATTEMPT))
}

/// Transfer holds older than `before`: their transfer was answered long since (each call to
/// the exchange has a deadline) and the process that held them stopped before it released
/// them.
pub async fn stale_transfer_holds<C: ConnectionTrait>(
    conn: &C,
    before: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(String, i32)>, DbErr> {
    exchange_hold::Entity::find()
        .select_only()
        .column(exchange_hold::Column::PayoutId)
        .column(exchange_hold::Column::Attempt)
        .filter(exchange_hold::Column::Attempt.eq(TRANSFER_ATTEMPT))
        .filter(exchange_hold::Column::PayoutId.starts_with("trf_"))
        .filter(exchange_hold::Column::ReleasedAt.is_null())
        .filter(exchange_hold::Column::CreatedAt.lt(before))
        .into_tuple()
        .all(conn)
        .await
}

/// Σ active holds of one run.
pub async fn held_by_run<C: ConnectionTrait>(conn: &C, run_id: &str) -> Result<i64, DbErr> {
    Ok(exchange_hold::Entity::find()
        .select_only()
        .column_as(Expr::cust(SUM), "total")
        .filter(exchange_hold::Column::PayrollRunId.eq(run_id))
        .filter(exchange_hold::Column::ReleasedAt.is_null())
        .into_tuple::<i64>()
        .one(conn)
        .await?
        .unwrap_or(0))
}

/// Moves the reserved total by `delta`. Holds created (`delta` > 0) are a funding decision
/// reserving money, which counts itself here in the same statement
/// ([`exchange_reserve::Model::decisions`]): a decision reading figures from before it reads
/// them again ([`super::desk`]). The row is locked from here to the commit, as late in its
/// transaction as the holds are written, after the payouts (the order every transaction takes
/// them in).
async fn move_counter<C: ConnectionTrait>(conn: &C, delta: i64) -> Result<(), DbErr> {
    if delta == 0 {
        return Ok(());
    }
    let decided = i64::from(delta > 0);
    let moved = exchange_reserve::Entity::update_many()
        .col_expr(
            exchange_reserve::Column::ReservedUsdCents,
            Expr::col(exchange_reserve::Column::ReservedUsdCents).add(delta),
        )
        .col_expr(
            exchange_reserve::Column::Decisions,
            Expr::col(exchange_reserve::Column::Decisions).add(decided),
        )
        .filter(exchange_reserve::Column::Account.eq(ACCOUNT))
        .exec(conn)
        .await?;
    if moved.rows_affected == 0 {
        exchange_reserve::Entity::insert(exchange_reserve::ActiveModel {
            account: sea_orm::Set(ACCOUNT.to_owned()),
            reserved_usd_cents: sea_orm::Set(delta),
            decisions: sea_orm::Set(decided),
        })
        .exec_without_returning(conn)
        .await?;
    }
    Ok(())
}

/// Holds for every PENDING payout of a run that is being funded; answers their sum.
pub async fn hold_pending_of_run<C: ConnectionTrait>(conn: &C, run_id: &str) -> Result<i64, DbErr> {
    // A page of the run's PENDING payouts at a time, by id, so memory does not grow with the
    // run; the reserved total moved once, by the sum, as one funding decision.
    let now = time::now();
    let mut total = 0i64;
    let mut after: Option<String> = None;
    loop {
        let mut query = payout::Entity::find()
            .select_only()
            .column(payout::Column::Id)
            .column(payout::Column::Attempt)
            .column(payout::Column::AmountUsdCents)
            .column(payout::Column::FeeUsdCents)
            .filter(payout::Column::PayrollRunId.eq(run_id))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending));
        if let Some(after) = &after {
            query = query.filter(payout::Column::Id.gt(after.as_str()));
        }
        let rows: Vec<(String, i32, i64, i64)> = query
            .order_by_asc(payout::Column::Id)
            .limit(HOLD_PAGE)
            .into_tuple()
            .all(conn)
            .await?;
        let Some((last, ..)) = rows.last() else {
            break;
        };
        after = Some(last.clone());
        let holds: Vec<NewHold> = rows
            .into_iter()
            .map(|(payout_id, attempt, amount, fee)| NewHold {
                payout_id,
                attempt,
                run_id: run_id.to_owned(),
                amount: amount + fee,
            })
            .collect();
        total = total
            .checked_add(insert_holds(conn, &holds, now).await?)
            .ok_or_else(|| {
                DbErr::Custom("the held amounts add up to more than can be represented".into())
            })?;
    }
    move_counter(conn, total).await?;
    Ok(total)
}

/// PENDING payouts held per page by [`hold_pending_of_run`].
const HOLD_PAGE: u64 = 2000;

/// Creates holds (an attempt already held is left as it is); answers the sum created.
pub async fn hold<C: ConnectionTrait>(conn: &C, holds: Vec<NewHold>) -> Result<i64, DbErr> {
    hold_at(conn, holds, time::now()).await
}

/// [`hold`], the holds stamped `now`.
async fn hold_at<C: ConnectionTrait>(
    conn: &C,
    holds: Vec<NewHold>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<i64, DbErr> {
    let total = insert_holds(conn, &holds, now).await?;
    move_counter(conn, total).await?;
    Ok(total)
}

/// Writes the holds of attempts not held yet, without moving the reserved total; answers
/// the sum written.
async fn insert_holds<C: ConnectionTrait>(
    conn: &C,
    holds: &[NewHold],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<i64, DbErr> {
    let mut total = 0i64;
    for chunk in holds.chunks(CHUNK) {
        let found: Vec<(String, i32)> = exchange_hold::Entity::find()
            .select_only()
            .column(exchange_hold::Column::PayoutId)
            .column(exchange_hold::Column::Attempt)
            .filter(of_attempts(
                conn.get_database_backend(),
                chunk.iter().map(|h| (h.payout_id.as_str(), h.attempt)),
            ))
            .into_tuple()
            .all(conn)
            .await?;
        let existing: std::collections::HashSet<(&str, i32)> =
            found.iter().map(|(id, a)| (id.as_str(), *a)).collect();
        let fresh: Vec<&NewHold> = chunk
            .iter()
            .filter(|h| !existing.contains(&(h.payout_id.as_str(), h.attempt)))
            .collect();
        if fresh.is_empty() {
            continue;
        }
        for h in &fresh {
            total = total.checked_add(h.amount).ok_or_else(|| {
                DbErr::Custom("the held amounts add up to more than can be represented".into())
            })?;
        }
        exchange_hold::Entity::insert_many(fresh.into_iter().map(|h| exchange_hold::ActiveModel {
            payout_id: sea_orm::Set(h.payout_id.clone()),
            attempt: sea_orm::Set(h.attempt),
            payroll_run_id: sea_orm::Set(h.run_id.clone()),
            amount_usd_cents: sea_orm::Set(h.amount),
            created_at: sea_orm::Set(now),
            released_at: sea_orm::Set(None),
            release_reason: sea_orm::Set(None),
        }))
        .exec_without_returning(conn)
        .await?;
    }
    Ok(total)
}

/// Releases the active holds of these attempts (payout id, attempt); answers the sum released.
/// Releasing a hold that is no longer active changes nothing, so every path that learns of an
/// attempt's end may call it.
pub async fn release<C: ConnectionTrait>(
    conn: &C,
    attempts: &[(String, i32)],
    why: Release,
) -> Result<i64, DbErr> {
    let mut total = 0i64;
    // Sorted before they are cut in chunks, so that rows are locked in one order across
    // chunks as within each.
    let mut attempts = attempts.to_vec();
    attempts.sort();
    attempts.dedup();
    let now = time::now();
    for chunk in attempts.chunks(CHUNK) {
        // One statement releases the active ones and answers their amounts. Found through the
        // primary key, by both its columns (`attempt = k AND payout_id IN (…)`, one per
        // attempt number), so a planner knows each pair matches at most one row even before
        // the table has statistics (by payout id alone, PostgreSQL read every hold of a table
        // it had not analysed yet). A hold another transaction releases meanwhile is waited
        // for and, read again, no longer matches (PostgreSQL; SQLite's write transactions are
        // serialised already): no hold is released, nor counted, twice. Rows are locked in the
        // order the plan visits them, not always key order, so two transactions releasing
        // some of the same holds at once (the exchange actor's release of accepted sends, and
        // a run's, only after a restart) may deadlock; PostgreSQL then aborts one, which
        // changes nothing: the exchange actor leaves those holds to the run, and a run's step
        // reloads and records them again.
        let mut update = Query::update();
        update
            .table(exchange_hold::Entity)
            .value(exchange_hold::Column::ReleasedAt, now)
            .value(exchange_hold::Column::ReleaseReason, why.as_str())
            .cond_where(
                Condition::all()
                    .add(of_attempts(
                        conn.get_database_backend(),
                        chunk.iter().map(|(id, a)| (id.as_str(), *a)),
                    ))
                    .add(exchange_hold::Column::ReleasedAt.is_null()),
            )
            .returning_col(exchange_hold::Column::AmountUsdCents);
        for row in conn.query_all(&update).await? {
            let amount: i64 = row.try_get("", "amount_usd_cents")?;
            total = total.checked_add(amount).ok_or_else(|| {
                DbErr::Custom("the released amounts add up to more than can be represented".into())
            })?;
        }
    }
    move_counter(conn, -total).await?;
    Ok(total)
}

/// Releases every active hold of a run; answers the sum released. One statement, whatever
/// the run's size: no hold is held in memory.
pub async fn release_run<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    why: Release,
) -> Result<i64, DbErr> {
    let now = time::now();
    let total = match conn.get_database_backend() {
        // Released and summed by one statement: a hold another transaction releases first is
        // skipped by it (its row read again once that one commits) and not counted.
        DatabaseBackend::Postgres => conn
            .query_one_raw(Statement::from_sql_and_values(
                DatabaseBackend::Postgres,
                RELEASE_RUN_POSTGRES,
                [now.into(), why.as_str().into(), run_id.into()],
            ))
            .await?
            .map(|row| row.try_get::<i64>("", "total"))
            .transpose()?
            .unwrap_or(0),
        // SQLite's write transaction holds the database: the sum read first is of exactly the
        // holds the update then releases.
        _ => {
            let total = held_by_run(conn, run_id).await?;
            exchange_hold::Entity::update_many()
                .col_expr(exchange_hold::Column::ReleasedAt, Expr::value(now))
                .col_expr(
                    exchange_hold::Column::ReleaseReason,
                    Expr::value(why.as_str()),
                )
                .filter(exchange_hold::Column::PayrollRunId.eq(run_id))
                .filter(exchange_hold::Column::ReleasedAt.is_null())
                .exec(conn)
                .await?;
            total
        }
    };
    move_counter(conn, -total).await?;
    Ok(total)
}

/// [`release_run`] on PostgreSQL: `$1` the time, `$2` the reason, `$3` the run.
const RELEASE_RUN_POSTGRES: &str = "WITH released AS (UPDATE exchange_holds \
     SET released_at = $1, release_reason = $2 \
     WHERE payroll_run_id = $3 AND released_at IS NULL RETURNING amount_usd_cents) \
     SELECT CAST(COALESCE(SUM(amount_usd_cents), 0) AS BIGINT) AS total FROM released";

/// The holds of these attempts: one `attempt = k AND payout_id IN (…)` per attempt number
/// (nearly always one), not one pair of equalities per attempt, which PostgreSQL reads by
/// scanning the table.
fn of_attempts<'a>(
    backend: DatabaseBackend,
    attempts: impl Iterator<Item = (&'a str, i32)>,
) -> Condition {
    let mut by_attempt: std::collections::BTreeMap<i32, Vec<String>> = Default::default();
    for (payout_id, attempt) in attempts {
        by_attempt
            .entry(attempt)
            .or_default()
            .push(payout_id.to_owned());
    }
    let mut which = Condition::any();
    for (attempt, ids) in by_attempt {
        which = which.add(
            Condition::all()
                .add(exchange_hold::Column::Attempt.eq(attempt))
                .add(one_of(backend, exchange_hold::Column::PayoutId, ids)),
        );
    }
    which
}

/// Takes PostgreSQL's advisory lock that serialises funding decisions across instances, in
/// `conn`'s transaction.
pub async fn lock_decisions<C: ConnectionTrait>(conn: &C) -> Result<(), DbErr> {
    if conn.get_database_backend() == DatabaseBackend::Postgres {
        conn.execute_raw(Statement::from_string(
            DatabaseBackend::Postgres,
            "SELECT pg_advisory_xact_lock(7301002)",
        ))
        .await?;
    }
    Ok(())
}
