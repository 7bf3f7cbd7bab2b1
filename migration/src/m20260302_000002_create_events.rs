use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Events::Table)
                    .col(string_len(Events::Id, 40).primary_key())
                    .col(string_len(Events::EventType, 64))
                    .col(string_len(Events::ResourceId, 40))
                    .col(timestamp_with_time_zone(Events::CreatedAt))
                    .col(json(Events::Data))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_events_type")
                    .table(Events::Table)
                    .col(Events::EventType)
                    .col(Events::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_events_resource")
                    .table(Events::Table)
                    .col(Events::ResourceId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Events::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Events {
    Table,
    Id,
    EventType,
    ResourceId,
    CreatedAt,
    Data,
}
