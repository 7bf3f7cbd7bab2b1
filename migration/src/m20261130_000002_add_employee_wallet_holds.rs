use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// When an employee's wallet or network last changed, until when their payouts are held from
/// confirm because of it, and which key lineage made the change (another one may lift the
/// hold): CONTRACT §16.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            timestamp_with_time_zone_null(Employees::WalletChangedAt),
            timestamp_with_time_zone_null(Employees::WalletHoldUntil),
            string_len_null(Employees::WalletChangedByLineageId, 40),
        ] {
            let mut column = column;
            manager
                .alter_table(
                    Table::alter()
                        .table(Employees::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        // The outbox also carries wallet-change notices: self-contained (what changed, to whom),
        // beside the payout notifications it renders from their payout.
        manager
            .alter_table(
                Table::alter()
                    .table(EmailOutbox::Table)
                    .add_column(string_len(EmailOutbox::Kind, 16).default("PAYOUT"))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(EmailOutbox::Table)
                    .add_column(text_null(EmailOutbox::Notice))
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [EmailOutbox::Kind, EmailOutbox::Notice] {
            manager
                .alter_table(
                    Table::alter()
                        .table(EmailOutbox::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        for column in [
            Employees::WalletChangedAt,
            Employees::WalletHoldUntil,
            Employees::WalletChangedByLineageId,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Employees::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Employees {
    Table,
    WalletChangedAt,
    WalletHoldUntil,
    WalletChangedByLineageId,
}

#[derive(DeriveIden)]
enum EmailOutbox {
    Table,
    Kind,
    Notice,
}
