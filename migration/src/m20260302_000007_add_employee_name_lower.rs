use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Employees::Table)
                    .add_column(text(Employees::NameLower).default(""))
                    .to_owned(),
            )
            .await?;
        // The service writes it lower-cased with Unicode rules; rows from before get SQL's.
        manager
            .get_connection()
            .execute_unprepared("UPDATE employees SET name_lower = lower(name)")
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Employees::Table)
                    .drop_column(Employees::NameLower)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Employees {
    Table,
    NameLower,
}
