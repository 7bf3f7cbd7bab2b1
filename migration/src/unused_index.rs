//! An index that no query reads, dropped: it only cost writes. `down` makes it again.

use sea_orm_migration::prelude::*;

/// Drops `index`, an index of `table` on `column` alone; `down` creates it again.
pub struct DropUnusedIndex {
    /// The migration's name, as `seaql_migrations` records it.
    pub name: &'static str,
    pub index: &'static str,
    pub table: &'static str,
    pub column: &'static str,
}

impl MigrationName for DropUnusedIndex {
    fn name(&self) -> &str {
        self.name
    }
}

#[async_trait::async_trait]
impl MigrationTrait for DropUnusedIndex {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .if_exists()
                    .name(self.index)
                    .table(Alias::new(self.table))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .if_not_exists()
                    .name(self.index)
                    .table(Alias::new(self.table))
                    .col(Alias::new(self.column))
                    .to_owned(),
            )
            .await
    }
}
