use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .col(string_len(ApiKeys::Id, 40).primary_key())
                    .col(text(ApiKeys::Name))
                    .col(string_len(ApiKeys::Prefix, 16))
                    .col(string_len_uniq(ApiKeys::KeyHash, 64))
                    .col(text(ApiKeys::Scopes))
                    .col(string_len(ApiKeys::LineageId, 40))
                    .col(string_len_null(ApiKeys::RotatedFrom, 40))
                    .col(timestamp_with_time_zone_null(ApiKeys::ExpiresAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::GraceExpiresAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::RevokedAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::LastUsedAt))
                    .col(timestamp_with_time_zone(ApiKeys::CreatedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ApiKeys::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    Name,
    Prefix,
    KeyHash,
    Scopes,
    LineageId,
    RotatedFrom,
    ExpiresAt,
    GraceExpiresAt,
    RevokedAt,
    LastUsedAt,
    CreatedAt,
}
