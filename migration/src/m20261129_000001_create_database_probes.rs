use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// One row the health prober writes while the database refuses writes (out of space, I/O
/// errors): the first write that commits again tells that it takes writes.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(DatabaseProbes::Table)
                    .col(integer(DatabaseProbes::Id).primary_key())
                    .col(timestamp_with_time_zone(DatabaseProbes::ProbedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(DatabaseProbes::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum DatabaseProbes {
    Table,
    Id,
    ProbedAt,
}
