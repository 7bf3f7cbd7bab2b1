use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Facts every instance of one database must agree on, by name: the fingerprint of the key
/// pepper (an instance with another refuses to start).
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ServiceFacts::Table)
                    .col(string_len(ServiceFacts::Name, 64).primary_key())
                    .col(string_len(ServiceFacts::Value, 256))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ServiceFacts::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ServiceFacts {
    Table,
    Name,
    Value,
}
