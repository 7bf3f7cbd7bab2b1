use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SandboxBalances::Table)
                    .col(string_len(SandboxBalances::Account, 32).primary_key())
                    .col(big_integer(SandboxBalances::BalanceUsdCents))
                    .col(timestamp_with_time_zone(SandboxBalances::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SandboxWithdrawals::Table)
                    .col(string_len(SandboxWithdrawals::Id, 40).primary_key())
                    .col(string_len_uniq(SandboxWithdrawals::ClientId, 64))
                    .col(big_integer(SandboxWithdrawals::AmountUsdCents))
                    .col(big_integer(SandboxWithdrawals::FeeUsdCents))
                    .col(string_len(SandboxWithdrawals::Network, 32))
                    .col(text(SandboxWithdrawals::Address))
                    .col(string_len(SandboxWithdrawals::Status, 32))
                    .col(text_null(SandboxWithdrawals::TxHash))
                    .col(text_null(SandboxWithdrawals::FailedReason))
                    .col(timestamp_with_time_zone(SandboxWithdrawals::CreatedAt))
                    .col(timestamp_with_time_zone(SandboxWithdrawals::SettlesAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_sandbox_withdrawals_due")
                    .table(SandboxWithdrawals::Table)
                    .col(SandboxWithdrawals::Status)
                    .col(SandboxWithdrawals::SettlesAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(SandboxWithdrawals::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(SandboxBalances::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SandboxBalances {
    Table,
    Account,
    BalanceUsdCents,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SandboxWithdrawals {
    Table,
    Id,
    ClientId,
    AmountUsdCents,
    FeeUsdCents,
    Network,
    Address,
    Status,
    TxHash,
    FailedReason,
    CreatedAt,
    SettlesAt,
}
