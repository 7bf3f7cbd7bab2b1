//! The withdrawal window: client withdrawal ids claimed for the next payouts of a run (fenced by
//! its lease), found through the run's index, and handed back at shutdown when they never left.

use payroll_entities::{
    Cents, Network, PayoutStatus, RunStatus, bulk, db::Db, payout, payroll_run, time,
};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait as _, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
    sea_query::{Expr, ExprTrait as _, Query},
};

use super::{
    lease::{self, LeaseSettings},
    messages::RunError,
    store::IDS_PER_STATEMENT,
};
use crate::exchange::{WithdrawalRequest, payouts_of_client_ids};

/// What a claim committed.
#[derive(Debug, Default)]
pub struct Claim {
    /// The withdrawals to send, under the client ids just committed.
    pub requests: Vec<WithdrawalRequest>,
    /// The run had fewer unclaimed payouts after `from` than were asked for.
    pub exhausted: bool,
    /// The id the claim read onward from (`None`: the run's start).
    pub from: Option<String>,
    /// The last payout id the claim read: where the next one reads onward from.
    pub last_read: Option<String>,
}

impl Claim {
    /// None is left to claim: the claim read the whole run, from its start, and came back
    /// short. (Read onward from an id, a short claim says nothing of the payouts before it,
    /// which a retry or a hand-back may have made claimable again.)
    pub fn run_exhausted(&self) -> bool {
        self.exhausted && self.from.is_none()
    }
}

/// Commits client withdrawal ids for up to `limit` payouts not yet handed over, read onward
/// from the payout id `from` (the last one the previous claim read; `None`: from the run's
/// start), and returns the withdrawals to send. Nothing is sent for a payout whose id is not
/// committed.
///
/// The withdrawals are built from the rows as the update wrote them (`RETURNING`), so a payout
/// that something else changed between the read of the window and its claim (cancelled, or
/// failed with its job and retried under a new attempt) is either not claimed or sent under
/// the client id actually committed.
#[tracing::instrument(skip_all, fields(run_id = %run.id, limit))]
pub async fn claim_window(
    db: &Db,
    lease_settings: &LeaseSettings,
    run: &payroll_run::Model,
    limit: usize,
    from: Option<String>,
) -> Result<Claim, RunError> {
    if limit == 0 || run.status != RunStatus::PayingOut {
        return Ok(Claim {
            from,
            ..Claim::default()
        });
    }
    let tx = db.begin_write().await?;
    // Fenced by the lease: an instance that lost it commits no withdrawal.
    if !lease::holds(&*tx, lease_settings, &run.id).await? {
        return Err(RunError::Stale);
    }
    let ids: Vec<String> = unclaimed_page(db.backend(), &run.id, from.as_deref(), limit as u64)
        .select_only()
        .column(payout::Column::Id)
        .into_tuple()
        .all(&*tx)
        .await?;
    let exhausted = ids.len() < limit;
    let last_read = ids.last().cloned();
    if ids.is_empty() {
        return Ok(Claim {
            requests: Vec::new(),
            exhausted,
            from,
            last_read,
        });
    }
    let now = db.clock_now();
    // One narrow statement: the client ids are derived in SQL from id and attempt, and only
    // what a withdrawal needs comes back.
    let mut update = Query::update();
    update
        .table(payout::Entity)
        .value(
            payout::Column::ClientWithdrawalId,
            Expr::cust("id || '-' || CAST(attempt AS TEXT)"),
        )
        .value(payout::Column::InitiatedAt, now)
        .value(payout::Column::UpdatedAt, now)
        .cond_where(
            Condition::all()
                .add(bulk::one_of(db.backend(), payout::Column::Id, ids))
                .add(payout::Column::Status.eq(PayoutStatus::Pending))
                .add(unclaimed(db.backend())),
        )
        .returning(Query::returning().columns([
            payout::Column::ClientWithdrawalId,
            payout::Column::AmountUsdCents,
            payout::Column::FeeUsdCents,
            payout::Column::Network,
            payout::Column::WalletAddress,
        ]));
    let mut requests = Vec::new();
    for row in tx.query_all(&update).await? {
        let client_id: Option<String> = row.try_get("", "client_withdrawal_id")?;
        requests.push(WithdrawalRequest {
            client_id: client_id.ok_or(RunError::Stale)?,
            amount: Cents(row.try_get("", "amount_usd_cents")?),
            fee: Cents(row.try_get("", "fee_usd_cents")?),
            network: row.try_get::<Network>("", "network")?,
            address: row.try_get("", "wallet_address")?,
        });
    }
    tx.commit().await?;
    // In payout id order, as the window was read (a client id begins with its payout's id).
    requests.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    Ok(Claim {
        requests,
        exhausted,
        from,
        last_read,
    })
}

/// At shutdown: payouts whose withdrawals were committed but never left this instance (they
/// were waiting for a token) are handed back, to be claimed afresh under the same ids. Only
/// on runs whose lease this instance still holds: where another instance has taken a run
/// over, it may already have sent such an id again, and the ids are looked up instead.
pub async fn hand_back(
    db: &Db,
    lease: &lease::LeaseSettings,
    client_ids: &[String],
) -> Result<u64, RunError> {
    let mut handed_back = 0;
    for chunk in client_ids.chunks(IDS_PER_STATEMENT) {
        let tx = db.begin_write().await?;
        handed_back += payout::Entity::update_many()
            .col_expr(
                payout::Column::ClientWithdrawalId,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                payout::Column::InitiatedAt,
                Expr::value(Option::<chrono::DateTime<chrono::Utc>>::None),
            )
            .col_expr(payout::Column::UpdatedAt, Expr::value(time::now()))
            .filter(payouts_of_client_ids(db.backend(), chunk))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending))
            .filter(payout::Column::CexWithdrawalId.is_null())
            // Never one that left: every send is counted before it leaves.
            .filter(payout::Column::SendCount.eq(0))
            .filter(payout::Column::PayrollRunId.in_subquery(lease::held_runs(lease)))
            .exec(&*tx)
            .await?
            .rows_affected;
        tx.commit().await?;
    }
    Ok(handed_back)
}

/// `client_withdrawal_id IS NULL`, the guard of the claim's update by id and the window's
/// filter. On SQLite written so it never looks the payouts up in the unique index of client
/// ids: every unclaimed payout sits in that index under NULL, and SQLite's planner, taking a
/// unique index for selective, would read all of a run's unsent payouts and sort them for each
/// window (a run's execution grew with the square of its size). A unary `+` keeps a column out
/// of SQLite's index choice. PostgreSQL has no index of client ids.
fn unclaimed(backend: sea_orm::DatabaseBackend) -> sea_orm::sea_query::SimpleExpr {
    match backend {
        sea_orm::DatabaseBackend::Sqlite => Expr::cust("+client_withdrawal_id IS NULL"),
        _ => Expr::col(payout::Column::ClientWithdrawalId).is_null(),
    }
}

/// The first `limit` PENDING payouts of a run that have no client id yet and whose id comes
/// after `from` (all of them when `None`), by id: the next window to claim. On PostgreSQL read
/// through the run's payouts in byte order of their ids (`idx_payouts_window`, `COLLATE "C"`,
/// the one index in that order, so no plan walks another), passing over those claimed since
/// `from` and not yet answered; no index there names the status, so that a payout's change of
/// status is a heap-only update. On SQLite through the run's PENDING payouts.
pub fn unclaimed_page(
    backend: sea_orm::DatabaseBackend,
    run_id: &str,
    from: Option<&str>,
    limit: u64,
) -> sea_orm::Select<payout::Entity> {
    let find = payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .filter(unclaimed(backend));
    // The order of the window, and of `from`: on PostgreSQL byte order, which only
    // `idx_payouts_window` gives.
    let key = match backend {
        sea_orm::DatabaseBackend::Postgres => Expr::cust(r#"id COLLATE "C""#),
        _ => Expr::col(payout::Column::Id),
    };
    let find = match from {
        Some(from) => find.filter(key.clone().gt(from)),
        None => find,
    };
    find.order_by(key, sea_orm::Order::Asc).limit(limit)
}
