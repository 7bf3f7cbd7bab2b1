use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// On PostgreSQL, a payout's change of status (accepted, completed, failed) changes no indexed
/// column, so that, like its claim and its send stamp, it is a heap-only update: no index of
/// payouts names its status any more, in its keys or its predicate.
///
/// - `idx_payouts_run_status` goes. What read a run's payouts of one status reads the run's
///   payouts by id (`idx_payouts_run_id`) and keeps those of that status: the commands that
///   walk a run (confirm, cancel, retry), the look-ups at a restart, the listing filtered by
///   status.
/// - The index of PENDING payouts (`m20261126_000001`) becomes the run's payouts in byte order
///   of their ids (`idx_payouts_window`), with no predicate. The run actor reads each window
///   onward from the last id it read (`window::unclaimed_page`), so it passes over no payout
///   twice until it reaches the run's end, and reads the run from its start again before it
///   counts the run as having none left to claim.
/// - Payout pages are filled to 30 % rather than 50 % (`m20261125_000003`), for new pages:
///   a payout is written five times on its way to COMPLETED and grows by a third at the last
///   (the transaction hash and its link); at half-filled pages one in ten of these writes found
///   no room beside the old row version and was not heap-only, at 30 % one in a thousand.
///
/// Nothing on SQLite, which has no heap-only updates and keeps its index of run and status.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for sql in [
            "CREATE INDEX IF NOT EXISTS idx_payouts_window ON payouts (payroll_run_id, id COLLATE \"C\")",
            "DROP INDEX IF EXISTS idx_payouts_pending",
            "DROP INDEX IF EXISTS idx_payouts_run_status",
            "ALTER TABLE payouts SET (fillfactor = 30)",
        ] {
            crate::postgres::on_postgres(manager, sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for sql in [
            "ALTER TABLE payouts SET (fillfactor = 50)",
            "CREATE INDEX IF NOT EXISTS idx_payouts_run_status ON payouts (payroll_run_id, status, id)",
            "CREATE INDEX IF NOT EXISTS idx_payouts_pending ON payouts (payroll_run_id, id COLLATE \"C\") \
             WHERE status = 'PENDING'",
            "DROP INDEX IF EXISTS idx_payouts_window",
        ] {
            crate::postgres::on_postgres(manager, sql).await?;
        }
        Ok(())
    }
}
