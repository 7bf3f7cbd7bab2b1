use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Jobs::Table)
                    .col(string_len(Jobs::Id, 40).primary_key())
                    .col(string_len(Jobs::PayrollRunId, 40))
                    .col(string_len(Jobs::Status, 32))
                    .col(big_integer(Jobs::Total))
                    .col(big_integer(Jobs::PendingCount))
                    .col(big_integer(Jobs::ProcessingCount))
                    .col(big_integer(Jobs::CompletedCount))
                    .col(big_integer(Jobs::FailedCount))
                    .col(big_integer(Jobs::CancelledCount))
                    .col(big_integer(Jobs::EstimatedDurationSeconds))
                    .col(text_null(Jobs::FailedReason))
                    .col(timestamp_with_time_zone(Jobs::CreatedAt))
                    .col(timestamp_with_time_zone(Jobs::UpdatedAt))
                    .col(timestamp_with_time_zone_null(Jobs::FinishedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_jobs_run")
                    .table(Jobs::Table)
                    .col(Jobs::PayrollRunId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Jobs::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Id,
    PayrollRunId,
    Status,
    Total,
    PendingCount,
    ProcessingCount,
    CompletedCount,
    FailedCount,
    CancelledCount,
    EstimatedDurationSeconds,
    FailedReason,
    CreatedAt,
    UpdatedAt,
    FinishedAt,
}
