use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The holds ledger of the exchange account (CONTRACT §7): one hold per funded payout attempt,
/// released when the exchange accepts the attempt or it ends without a withdrawal, and the
/// account's reserved total kept beside it as a counter. Funded attempts of an existing
/// database (PENDING payouts of DEPOSITED and PAYING_OUT runs) get their holds here.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ExchangeHolds::Table)
                    .col(string_len(ExchangeHolds::PayoutId, 40))
                    .col(integer(ExchangeHolds::Attempt))
                    .col(string_len(ExchangeHolds::PayrollRunId, 40))
                    .col(big_integer(ExchangeHolds::AmountUsdCents))
                    .col(timestamp_with_time_zone(ExchangeHolds::CreatedAt))
                    .col(timestamp_with_time_zone_null(ExchangeHolds::ReleasedAt))
                    .col(string_len_null(ExchangeHolds::ReleaseReason, 32))
                    .primary_key(
                        Index::create()
                            .col(ExchangeHolds::PayoutId)
                            .col(ExchangeHolds::Attempt),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_exchange_holds_run_released")
                    .table(ExchangeHolds::Table)
                    .col(ExchangeHolds::PayrollRunId)
                    .col(ExchangeHolds::ReleasedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ExchangeReserves::Table)
                    .col(string_len(ExchangeReserves::Account, 64).primary_key())
                    .col(big_integer(ExchangeReserves::ReservedUsdCents))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(
            "INSERT INTO exchange_holds (payout_id, attempt, payroll_run_id, amount_usd_cents, created_at) \
             SELECT p.id, p.attempt, p.payroll_run_id, p.amount_usd_cents + p.fee_usd_cents, p.updated_at \
             FROM payouts p JOIN payroll_runs r ON r.id = p.payroll_run_id \
             WHERE r.status IN ('DEPOSITED', 'PAYING_OUT') AND p.status = 'PENDING'",
        )
        .await?;
        db.execute_unprepared(
            "INSERT INTO exchange_reserves (account, reserved_usd_cents) \
             SELECT 'exchange', CAST(COALESCE(SUM(amount_usd_cents), 0) AS BIGINT) FROM exchange_holds \
             WHERE released_at IS NULL",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ExchangeReserves::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(ExchangeHolds::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ExchangeHolds {
    Table,
    PayoutId,
    Attempt,
    PayrollRunId,
    AmountUsdCents,
    CreatedAt,
    ReleasedAt,
    ReleaseReason,
}

#[derive(DeriveIden)]
enum ExchangeReserves {
    Table,
    Account,
    ReservedUsdCents,
}
