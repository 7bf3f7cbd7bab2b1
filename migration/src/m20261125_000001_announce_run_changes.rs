use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// On PostgreSQL, every statement that changes a run or a job announces it, in its own
/// transaction (delivered as it commits, in commit order), so each instance knows when a run
/// view it keeps may have changed, whichever instance wrote. The channel is named after the
/// tables' schema (`payroll_run_changes_` and 16 hex digits of its MD5, a name of fixed
/// length), so services in other schemas of the same database are not told. Nothing on
/// SQLite, which one process writes.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        db.execute_unprepared(
            "CREATE OR REPLACE FUNCTION payroll_announce_run_change() RETURNS trigger \
             LANGUAGE plpgsql AS $$ \
             BEGIN \
             PERFORM pg_notify('payroll_run_changes_' || left(md5(TG_TABLE_SCHEMA), 16), ''); \
             RETURN NULL; END $$",
        )
        .await?;
        for table in ["payroll_runs", "jobs"] {
            db.execute_unprepared(&format!(
                "CREATE TRIGGER {table}_announce_change \
                 AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} \
                 FOR EACH STATEMENT EXECUTE FUNCTION payroll_announce_run_change()"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for table in ["payroll_runs", "jobs"] {
            db.execute_unprepared(&format!(
                "DROP TRIGGER IF EXISTS {table}_announce_change ON {table}"
            ))
            .await?;
        }
        db.execute_unprepared("DROP FUNCTION IF EXISTS payroll_announce_run_change()")
            .await?;
        Ok(())
    }
}
