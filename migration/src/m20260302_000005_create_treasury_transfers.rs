use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(TreasuryTransfers::Table)
                    .col(string_len(TreasuryTransfers::Id, 40).primary_key())
                    .col(string_len(TreasuryTransfers::Direction, 32))
                    .col(big_integer(TreasuryTransfers::AmountUsdCents))
                    .col(string_len(TreasuryTransfers::Status, 32))
                    .col(text_null(TreasuryTransfers::Note))
                    .col(timestamp_with_time_zone(TreasuryTransfers::CreatedAt))
                    .col(timestamp_with_time_zone(TreasuryTransfers::SettlesAt))
                    .col(timestamp_with_time_zone_null(
                        TreasuryTransfers::CompletedAt,
                    ))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TreasuryTransfers::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum TreasuryTransfers {
    Table,
    Id,
    Direction,
    AmountUsdCents,
    Status,
    Note,
    CreatedAt,
    SettlesAt,
    CompletedAt,
}
