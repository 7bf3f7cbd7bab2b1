use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(EmailOutbox::Table)
                    .col(string_len(EmailOutbox::Id, 40).primary_key())
                    .col(string_len(EmailOutbox::PayoutId, 40))
                    .col(integer(EmailOutbox::PayoutAttempt))
                    .col(text(EmailOutbox::MessageId))
                    .col(string_len(EmailOutbox::Status, 32))
                    .col(integer(EmailOutbox::Attempts))
                    .col(timestamp_with_time_zone(EmailOutbox::NextAttemptAt))
                    .col(text_null(EmailOutbox::LastError))
                    .col(timestamp_with_time_zone(EmailOutbox::CreatedAt))
                    .col(timestamp_with_time_zone_null(EmailOutbox::SentAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_email_outbox_due")
                    .table(EmailOutbox::Table)
                    .col(EmailOutbox::Status)
                    .col(EmailOutbox::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_email_outbox_payout")
                    .table(EmailOutbox::Table)
                    .col(EmailOutbox::PayoutId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(EmailOutbox::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum EmailOutbox {
    Table,
    Id,
    PayoutId,
    PayoutAttempt,
    MessageId,
    Status,
    Attempts,
    NextAttemptAt,
    LastError,
    CreatedAt,
    SentAt,
}
