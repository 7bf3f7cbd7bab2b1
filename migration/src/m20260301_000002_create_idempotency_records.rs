use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(IdempotencyRecords::Table)
                    .col(string_len(IdempotencyRecords::LineageId, 40))
                    .col(string_len(IdempotencyRecords::IdempotencyKey, 64))
                    .col(text(IdempotencyRecords::Fingerprint))
                    .col(string_len(IdempotencyRecords::State, 32))
                    .col(timestamp_with_time_zone(IdempotencyRecords::LockedUntil))
                    .col(integer_null(IdempotencyRecords::ResponseStatus))
                    .col(text_null(IdempotencyRecords::ResponseBody))
                    .col(timestamp_with_time_zone(IdempotencyRecords::CreatedAt))
                    .col(timestamp_with_time_zone(IdempotencyRecords::ExpiresAt))
                    .primary_key(
                        Index::create()
                            .col(IdempotencyRecords::LineageId)
                            .col(IdempotencyRecords::IdempotencyKey),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_idempotency_records_expires_at")
                    .table(IdempotencyRecords::Table)
                    .col(IdempotencyRecords::ExpiresAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(IdempotencyRecords::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum IdempotencyRecords {
    Table,
    LineageId,
    IdempotencyKey,
    Fingerprint,
    State,
    LockedUntil,
    ResponseStatus,
    ResponseBody,
    CreatedAt,
    ExpiresAt,
}
