use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// No query reads the email outbox by payout (the mailer claims by status, due time and id,
/// and writes by id; an outbox id names its payout and attempt), so `idx_email_outbox_payout`
/// only cost writes: an entry for each of the messages an execute queues, a fifth of the
/// time PostgreSQL took to insert a run's 100,000 of them.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .if_exists()
                    .name("idx_email_outbox_payout")
                    .table(EmailOutbox::Table)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name("idx_email_outbox_payout")
                    .table(EmailOutbox::Table)
                    .col(EmailOutbox::PayoutId)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum EmailOutbox {
    Table,
    PayoutId,
}
