use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(AuditEntries::Table)
                    .col(string_len(AuditEntries::Id, 40).primary_key())
                    .col(timestamp_with_time_zone(AuditEntries::OccurredAt))
                    .col(string_len_null(AuditEntries::RequestId, 80))
                    .col(string_len(AuditEntries::ActorType, 32))
                    .col(string_len_null(AuditEntries::ApiKeyId, 40))
                    .col(string_len_null(AuditEntries::Method, 16))
                    .col(text_null(AuditEntries::Path))
                    .col(string_len_null(AuditEntries::Operation, 64))
                    .col(string_len_null(AuditEntries::Action, 64))
                    .col(string_len_null(AuditEntries::ResourceType, 32))
                    .col(string_len_null(AuditEntries::ResourceId, 40))
                    .col(integer_null(AuditEntries::StatusCode))
                    .col(string_len_null(AuditEntries::IdempotencyKey, 64))
                    .col(json(AuditEntries::Details))
                    .to_owned(),
            )
            .await?;
        for (name, col) in [
            ("idx_audit_entries_occurred_at", AuditEntries::OccurredAt),
            ("idx_audit_entries_api_key_id", AuditEntries::ApiKeyId),
            ("idx_audit_entries_resource_id", AuditEntries::ResourceId),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table(AuditEntries::Table)
                        .col(col)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(AuditEntries::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum AuditEntries {
    Table,
    Id,
    OccurredAt,
    RequestId,
    ActorType,
    ApiKeyId,
    Method,
    Path,
    Operation,
    Action,
    ResourceType,
    ResourceId,
    StatusCode,
    IdempotencyKey,
    Details,
}
