use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// On PostgreSQL, payout pages are filled to half when rows are inserted, so that an update
/// that changes no indexed column (a run's job given to its payouts, a send counted) writes
/// the new row beside the old one and no index entry (a heap-only tuple). Nothing on SQLite,
/// which updates rows in place.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres::on_postgres(manager, "ALTER TABLE payouts SET (fillfactor = 50)").await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres::on_postgres(manager, "ALTER TABLE payouts RESET (fillfactor)").await
    }
}
