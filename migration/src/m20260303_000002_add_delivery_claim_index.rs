use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Claims read an endpoint's PENDING deliveries, retries (attempt_count > 0) apart from first
/// attempts, in due order. This index replaces `idx_webhook_deliveries_due`, which a planner
/// could prefer for its order and then walk every due first attempt looking for retries.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_webhook_deliveries_due")
                    .table(WebhookDeliveries::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_claim")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::EndpointId)
                    .col(WebhookDeliveries::Status)
                    .col(WebhookDeliveries::AttemptCount)
                    .col(WebhookDeliveries::NextAttemptAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_webhook_deliveries_claim")
                    .table(WebhookDeliveries::Table)
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
            .await
    }
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    EndpointId,
    Status,
    AttemptCount,
    NextAttemptAt,
}
