use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// On PostgreSQL, a payout's claim (its client withdrawal id written) changes no indexed
/// column, so that it is a heap-only update: the new row version is written beside the old
/// one (pages are half filled, `m20261125_000003`) and no index gets an entry.
///
/// - The unique index of client ids goes. A client id is its payout's id and attempt
///   (`<payout id>-<attempt>`), which a check constraint now holds every row to, so the
///   primary key makes it unique, and every look-up by client id goes through the primary
///   key (`payout::by_client_ids`).
/// - The index of unclaimed payouts (`m20261125_000004`) names the client id in its
///   predicate; it becomes the index of PENDING payouts, same columns and order. The window
///   reads it and passes over the payouts claimed and not yet answered (at most a window's
///   worth while the exchange answers), as SQLite's window already does.
///
/// Nothing on SQLite, which updates rows in place and keeps its unique index.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for sql in [
            "ALTER TABLE payouts ADD CONSTRAINT payouts_client_withdrawal_id_of_attempt \
             CHECK (client_withdrawal_id IS NULL \
                    OR client_withdrawal_id = id || '-' || CAST(attempt AS TEXT))",
            "ALTER TABLE payouts DROP CONSTRAINT IF EXISTS payouts_client_withdrawal_id_key",
            "CREATE INDEX IF NOT EXISTS idx_payouts_pending ON payouts (payroll_run_id, id COLLATE \"C\") \
             WHERE status = 'PENDING'",
            "DROP INDEX IF EXISTS idx_payouts_unclaimed",
        ] {
            crate::postgres::on_postgres(manager, sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for sql in [
            "CREATE INDEX IF NOT EXISTS idx_payouts_unclaimed ON payouts (payroll_run_id, id COLLATE \"C\") \
             WHERE status = 'PENDING' AND client_withdrawal_id IS NULL",
            "DROP INDEX IF EXISTS idx_payouts_pending",
            "ALTER TABLE payouts ADD CONSTRAINT payouts_client_withdrawal_id_key UNIQUE (client_withdrawal_id)",
            "ALTER TABLE payouts DROP CONSTRAINT IF EXISTS payouts_client_withdrawal_id_of_attempt",
        ] {
            crate::postgres::on_postgres(manager, sql).await?;
        }
        Ok(())
    }
}
