use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Payouts::Table)
                    .add_column(string_len_null(Payouts::JobId, 40))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Payouts::Table)
                    .drop_column(Payouts::JobId)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    JobId,
}
