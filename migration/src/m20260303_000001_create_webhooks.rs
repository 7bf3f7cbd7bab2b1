use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookEndpoints::Table)
                    .col(string_len(WebhookEndpoints::Id, 40).primary_key())
                    .col(text(WebhookEndpoints::Url))
                    .col(json(WebhookEndpoints::Events))
                    .col(text_null(WebhookEndpoints::Description))
                    .col(string_len(WebhookEndpoints::Status, 16))
                    .col(text_null(WebhookEndpoints::DisabledReason))
                    .col(timestamp_with_time_zone_null(WebhookEndpoints::DisabledAt))
                    .col(text(WebhookEndpoints::Secret))
                    .col(text_null(WebhookEndpoints::PreviousSecret))
                    .col(timestamp_with_time_zone_null(
                        WebhookEndpoints::PreviousSecretExpiresAt,
                    ))
                    .col(string_len_null(WebhookEndpoints::CreatedByKeyId, 40))
                    .col(timestamp_with_time_zone(WebhookEndpoints::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookEndpoints::UpdatedAt))
                    .col(timestamp_with_time_zone_null(WebhookEndpoints::DeletedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(string_len(WebhookDeliveries::Id, 40).primary_key())
                    .col(string_len(WebhookDeliveries::EndpointId, 40))
                    .col(string_len(WebhookDeliveries::EventId, 40))
                    .col(string_len(WebhookDeliveries::EventType, 64))
                    .col(string_len(WebhookDeliveries::Status, 16))
                    .col(integer(WebhookDeliveries::AttemptCount))
                    .col(integer(WebhookDeliveries::RetriesUsed))
                    .col(boolean(WebhookDeliveries::Manual))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::NextAttemptAt,
                    ))
                    .col(text_null(WebhookDeliveries::LastError))
                    .col(timestamp_with_time_zone(WebhookDeliveries::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookDeliveries::UpdatedAt))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::CompletedAt,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_due")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::Status)
                    .col(WebhookDeliveries::EndpointId)
                    .col(WebhookDeliveries::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_endpoint")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::EndpointId)
                    .col(WebhookDeliveries::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .col(string_len(WebhookAttempts::DeliveryId, 40))
                    .col(integer(WebhookAttempts::Attempt))
                    .col(timestamp_with_time_zone(WebhookAttempts::StartedAt))
                    .col(integer_null(WebhookAttempts::ResponseStatus))
                    .col(big_integer(WebhookAttempts::DurationMs))
                    .col(text_null(WebhookAttempts::Error))
                    .primary_key(
                        Index::create()
                            .col(WebhookAttempts::DeliveryId)
                            .col(WebhookAttempts::Attempt),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            WebhookAttempts::Table.into_iden(),
            WebhookDeliveries::Table.into_iden(),
            WebhookEndpoints::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    Url,
    Events,
    Description,
    Status,
    DisabledReason,
    DisabledAt,
    Secret,
    PreviousSecret,
    PreviousSecretExpiresAt,
    CreatedByKeyId,
    CreatedAt,
    UpdatedAt,
    DeletedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    EndpointId,
    EventId,
    EventType,
    Status,
    AttemptCount,
    RetriesUsed,
    Manual,
    NextAttemptAt,
    LastError,
    CreatedAt,
    UpdatedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum WebhookAttempts {
    Table,
    DeliveryId,
    Attempt,
    StartedAt,
    ResponseStatus,
    DurationMs,
    Error,
}
