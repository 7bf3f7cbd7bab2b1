//! What only PostgreSQL needs in a migration (its planner or its storage).

use sea_orm_migration::prelude::*;

/// Runs `sql` on PostgreSQL; nothing on SQLite (for what only PostgreSQL's planner or storage
/// needs).
pub async fn on_postgres(manager: &SchemaManager<'_>, sql: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        manager.get_connection().execute_unprepared(sql).await?;
    }
    Ok(())
}
