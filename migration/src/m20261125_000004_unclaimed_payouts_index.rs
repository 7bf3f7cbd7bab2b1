use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// On PostgreSQL, an index of exactly the payouts a run still has to claim (PENDING, no client
/// withdrawal id), by run and id: each window of a run is its next entries. Its ids are in
/// byte order (`COLLATE "C"`), and the window is read in that order, so that this is the one
/// index that gives it: with the database's own collation, the primary key and the run's
/// other indexes gave it too, and a planner whose statistics said every payout of the run was unclaimed (taken as the run
/// was created) walked the primary key from the run's first payout past every claimed one,
/// for each window. A claimed payout's new row version is not entered in it. Nothing on
/// SQLite, whose window query keeps the client id out of its index choice.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres::on_postgres(
            manager,
            "CREATE INDEX IF NOT EXISTS idx_payouts_unclaimed ON payouts (payroll_run_id, id COLLATE \"C\") \
             WHERE status = 'PENDING' AND client_withdrawal_id IS NULL",
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::postgres::on_postgres(manager, "DROP INDEX IF EXISTS idx_payouts_unclaimed").await
    }
}
