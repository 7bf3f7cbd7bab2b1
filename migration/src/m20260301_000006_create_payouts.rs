use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Payouts::Table)
                    .col(string_len(Payouts::Id, 40).primary_key())
                    .col(string_len(Payouts::PayrollRunId, 40))
                    .col(string_len(Payouts::EmployeeId, 40))
                    .col(text(Payouts::EmployeeName))
                    .col(text(Payouts::EmployeeEmail))
                    .col(string_len(Payouts::Status, 32))
                    .col(boolean(Payouts::IsTestRun))
                    .col(big_integer(Payouts::AmountUsdCents))
                    .col(big_integer(Payouts::FeeUsdCents))
                    .col(big_integer(Payouts::TestRunDeductionUsdCents))
                    .col(string_len(Payouts::Stablecoin, 32))
                    .col(string_len(Payouts::Network, 32))
                    .col(text(Payouts::WalletAddress))
                    .col(text_null(Payouts::Note))
                    .col(integer(Payouts::Attempt))
                    .col(string_len_null(Payouts::ClientWithdrawalId, 64).unique_key())
                    .col(text_null(Payouts::CexWithdrawalId))
                    .col(text_null(Payouts::OnChainTxHash))
                    .col(text_null(Payouts::BlockExplorerUrl))
                    .col(text_null(Payouts::FailedReason))
                    .col(timestamp_with_time_zone_null(Payouts::InitiatedAt))
                    .col(timestamp_with_time_zone_null(Payouts::CompletedAt))
                    .col(timestamp_with_time_zone(Payouts::CreatedAt))
                    .col(timestamp_with_time_zone(Payouts::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_payouts_run_status")
                    .table(Payouts::Table)
                    .col(Payouts::PayrollRunId)
                    .col(Payouts::Status)
                    .col(Payouts::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_payouts_run_id")
                    .table(Payouts::Table)
                    .col(Payouts::PayrollRunId)
                    .col(Payouts::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_payouts_employee")
                    .table(Payouts::Table)
                    .col(Payouts::EmployeeId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Payouts::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    Id,
    PayrollRunId,
    EmployeeId,
    EmployeeName,
    EmployeeEmail,
    Status,
    IsTestRun,
    AmountUsdCents,
    FeeUsdCents,
    TestRunDeductionUsdCents,
    Stablecoin,
    Network,
    WalletAddress,
    Note,
    Attempt,
    ClientWithdrawalId,
    CexWithdrawalId,
    OnChainTxHash,
    BlockExplorerUrl,
    FailedReason,
    InitiatedAt,
    CompletedAt,
    CreatedAt,
    UpdatedAt,
}
