use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Several instances on one database: a run is worked by the instance holding its lease row
/// (renewed by heartbeat, taken over once it expires), and the withdrawal rate limit of an
/// exchange account is one row every instance takes its tokens from.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RunLeases::Table)
                    .col(string_len(RunLeases::RunId, 40).primary_key())
                    .col(string_len(RunLeases::Owner, 64))
                    .col(timestamp_with_time_zone(RunLeases::AcquiredAt))
                    .col(timestamp_with_time_zone(RunLeases::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RateLimits::Table)
                    .col(string_len(RateLimits::Name, 64).primary_key())
                    .col(big_integer(RateLimits::TatUs))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RateLimits::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(RunLeases::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum RunLeases {
    Table,
    RunId,
    Owner,
    AcquiredAt,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum RateLimits {
    Table,
    Name,
    TatUs,
}
