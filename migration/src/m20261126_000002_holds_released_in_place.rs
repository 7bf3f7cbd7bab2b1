use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// A hold's release (`released_at`, `release_reason` written) changes no indexed column: the
/// run's index of holds no longer carries `released_at`. On PostgreSQL the release is then a
/// heap-only update (pages of holds are half filled at insert, to leave the room), where it
/// entered both indexes before. The active holds of one run (a funds check, a cancellation)
/// are read through the run's index and told apart on the row.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name("idx_exchange_holds_run")
                    .table(ExchangeHolds::Table)
                    .col(ExchangeHolds::PayrollRunId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .if_exists()
                    .name("idx_exchange_holds_run_released")
                    .table(ExchangeHolds::Table)
                    .to_owned(),
            )
            .await?;
        crate::postgres::on_postgres(manager, "ALTER TABLE exchange_holds SET (fillfactor = 50)")
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres::on_postgres(manager, "ALTER TABLE exchange_holds RESET (fillfactor)")
            .await?;
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name("idx_exchange_holds_run_released")
                    .table(ExchangeHolds::Table)
                    .col(ExchangeHolds::PayrollRunId)
                    .col(ExchangeHolds::ReleasedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .if_exists()
                    .name("idx_exchange_holds_run")
                    .table(ExchangeHolds::Table)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum ExchangeHolds {
    Table,
    PayrollRunId,
    ReleasedAt,
}
