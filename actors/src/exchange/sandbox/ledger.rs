//! The sandbox's books: its balances, the settlement of due withdrawals and transfers, and
//! an operator's adjustment, each in the caller's transaction.

use payroll_entities::{
    Cents, SandboxAccount, SandboxWithdrawalStatus, TransferDirection, TransferStatus, bulk,
    db::{Db, WriteTx},
    sandbox_balance, sandbox_withdrawal, time, treasury_transfer,
};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait,
    IntoActiveModel, QueryFilter, QuerySelect,
};

/// Serialises the sandbox's transactions on PostgreSQL (SQLite's writers are serialised
/// already), so a settlement and its refund are counted once.
pub(super) async fn lock_sandbox(tx: &WriteTx) -> Result<(), DbErr> {
    if tx.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        tx.execute_raw(sea_orm::Statement::from_string(
            sea_orm::DatabaseBackend::Postgres,
            "SELECT pg_advisory_xact_lock(7301003)",
        ))
        .await?;
    }
    Ok(())
}

pub(super) async fn balance_of<C: ConnectionTrait>(
    conn: &C,
    account: SandboxAccount,
) -> Result<Cents, DbErr> {
    Ok(Cents(
        sandbox_balance::Entity::find_by_id(account)
            .one(conn)
            .await?
            .map_or(0, |b| b.balance_usd_cents),
    ))
}

pub(super) async fn add_to<C: ConnectionTrait>(
    conn: &C,
    account: SandboxAccount,
    delta: i64,
) -> Result<(), DbErr> {
    use sea_orm::sea_query::{Expr, ExprTrait};
    sandbox_balance::Entity::update_many()
        .col_expr(
            sandbox_balance::Column::BalanceUsdCents,
            Expr::col(sandbox_balance::Column::BalanceUsdCents).add(delta),
        )
        .col_expr(sandbox_balance::Column::UpdatedAt, Expr::value(time::now()))
        .filter(sandbox_balance::Column::Account.eq(account))
        .exec(conn)
        .await?;
    Ok(())
}

/// Settles the due withdrawals (all of them, or those of `client_ids`): COMPLETED, or FAILED
/// with the amount and fee returned to the exchange balance. One statement for all of them.
pub(super) async fn settle_due(tx: &WriteTx, client_ids: Option<&[String]>) -> Result<(), DbErr> {
    use sea_orm::sea_query::Expr;
    let now = time::now();
    let backend = tx.get_database_backend();
    let due = || {
        let mut cond = sea_orm::Condition::all()
            .add(sandbox_withdrawal::Column::Status.eq(SandboxWithdrawalStatus::Pending))
            .add(sandbox_withdrawal::Column::SettlesAt.lte(now));
        if let Some(ids) = client_ids {
            cond = cond.add(bulk::one_of(
                backend,
                sandbox_withdrawal::Column::ClientId,
                ids.iter().cloned(),
            ));
        }
        cond
    };
    let refund: i64 = sandbox_withdrawal::Entity::find()
        .select_only()
        .column_as(
            Expr::cust("CAST(COALESCE(SUM(amount_usd_cents + fee_usd_cents), 0) AS BIGINT)"),
            "refund",
        )
        .filter(due())
        .filter(sandbox_withdrawal::Column::FailedReason.is_not_null())
        .into_tuple::<i64>()
        .one(&**tx)
        .await?
        .unwrap_or(0);
    sandbox_withdrawal::Entity::update_many()
        .col_expr(
            sandbox_withdrawal::Column::Status,
            Expr::cust("CASE WHEN failed_reason IS NULL THEN 'COMPLETED' ELSE 'FAILED' END"),
        )
        .filter(due())
        .exec(&**tx)
        .await?;
    if refund != 0 {
        add_to(&**tx, SandboxAccount::Exchange, refund).await?;
    }
    Ok(())
}

/// Completes due transfers: the money arrives at the destination.
pub(super) async fn settle_transfers(tx: &WriteTx) -> Result<(), DbErr> {
    let now = time::now();
    let due = treasury_transfer::Entity::find()
        .filter(treasury_transfer::Column::Status.eq(TransferStatus::Pending))
        .filter(treasury_transfer::Column::SettlesAt.lte(now))
        .all(&**tx)
        .await?;
    for t in due {
        let destination = match t.direction {
            TransferDirection::ToExchange => SandboxAccount::Exchange,
            TransferDirection::ToTreasury => SandboxAccount::Treasury,
        };
        add_to(&**tx, destination, t.amount_usd_cents).await?;
        let mut active = t.into_active_model();
        active.status = Set(TransferStatus::Completed);
        active.completed_at = Set(Some(now));
        active.update(&**tx).await?;
    }
    Ok(())
}

/// Changes a sandbox balance from outside, as a movement on the exchange's own website would.
pub async fn adjust(db: &Db, account: SandboxAccount, delta: i64) -> Result<Cents, String> {
    let tx = db.begin_write().await.map_err(|e| e.to_string())?;
    lock_sandbox(&tx).await.map_err(|e| e.to_string())?;
    let current = balance_of(&*tx, account).await.map_err(|e| e.to_string())?;
    let next = current
        .0
        .checked_add(delta)
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            format!(
                "the {account} balance is {} cents; it cannot go below 0",
                current.0
            )
        })?;
    add_to(&*tx, account, delta)
        .await
        .map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    Ok(Cents(next))
}
