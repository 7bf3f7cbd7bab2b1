use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(PayrollRuns::Table)
                    .col(string_len(PayrollRuns::Id, 40).primary_key())
                    .col(string_len(PayrollRuns::Status, 32))
                    .col(string_len(PayrollRuns::RunType, 32))
                    .col(boolean(PayrollRuns::IsTestRun))
                    .col(boolean(PayrollRuns::IsArchived))
                    .col(text_null(PayrollRuns::Label))
                    .col(text_null(PayrollRuns::Note))
                    .col(timestamp_with_time_zone(PayrollRuns::PeriodStart))
                    .col(timestamp_with_time_zone(PayrollRuns::PeriodEnd))
                    .col(timestamp_with_time_zone_null(PayrollRuns::PayDate))
                    .col(big_integer(PayrollRuns::EmployeeCount))
                    .col(big_integer(PayrollRuns::TotalAmountUsdCents))
                    .col(big_integer(PayrollRuns::TotalFeesUsdCents))
                    .col(string_len(PayrollRuns::Stablecoin, 32))
                    .col(big_integer(PayrollRuns::PendingCount))
                    .col(big_integer(PayrollRuns::ProcessingCount))
                    .col(big_integer(PayrollRuns::CompletedCount))
                    .col(big_integer(PayrollRuns::FailedCount))
                    .col(big_integer(PayrollRuns::CancelledCount))
                    .col(string_len_null(PayrollRuns::CurrentJobId, 40))
                    .col(string_len_null(PayrollRuns::CreatedByKeyId, 40))
                    .col(big_integer(PayrollRuns::Version))
                    .col(timestamp_with_time_zone(PayrollRuns::CreatedAt))
                    .col(timestamp_with_time_zone(PayrollRuns::UpdatedAt))
                    .col(timestamp_with_time_zone_null(PayrollRuns::ConfirmedAt))
                    .col(timestamp_with_time_zone_null(PayrollRuns::DepositedAt))
                    .col(timestamp_with_time_zone_null(PayrollRuns::ExecutedAt))
                    .col(timestamp_with_time_zone_null(PayrollRuns::CompletedAt))
                    .col(timestamp_with_time_zone_null(PayrollRuns::CancelledAt))
                    .col(text_null(PayrollRuns::CancelReason))
                    .to_owned(),
            )
            .await?;
        for (name, cols) in [
            ("idx_payroll_runs_created_at", vec![PayrollRuns::CreatedAt]),
            (
                "idx_payroll_runs_overlap",
                vec![
                    PayrollRuns::RunType,
                    PayrollRuns::IsTestRun,
                    PayrollRuns::PeriodStart,
                ],
            ),
            ("idx_payroll_runs_status", vec![PayrollRuns::Status]),
        ] {
            let mut index = Index::create();
            index.name(name).table(PayrollRuns::Table);
            for col in cols {
                index.col(col);
            }
            manager.create_index(index.to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(PayrollRuns::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum PayrollRuns {
    Table,
    Id,
    Status,
    RunType,
    IsTestRun,
    IsArchived,
    Label,
    Note,
    PeriodStart,
    PeriodEnd,
    PayDate,
    EmployeeCount,
    TotalAmountUsdCents,
    TotalFeesUsdCents,
    Stablecoin,
    PendingCount,
    ProcessingCount,
    CompletedCount,
    FailedCount,
    CancelledCount,
    CurrentJobId,
    CreatedByKeyId,
    Version,
    CreatedAt,
    UpdatedAt,
    ConfirmedAt,
    DepositedAt,
    ExecutedAt,
    CompletedAt,
    CancelledAt,
    CancelReason,
}
