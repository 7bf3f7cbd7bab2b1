use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The stuck payouts (CONTRACT §7), found without reading every payout: an index of only the
/// rows whose `stuck_since` is set, a handful at most, so it costs a write only when a payout
/// becomes stuck or is resolved. `/metrics` counts them at every scrape (`payroll_payouts_stuck`).
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX IF NOT EXISTS idx_payouts_stuck ON payouts (stuck_since) \
                 WHERE stuck_since IS NOT NULL",
            )
            .await
            .map(|_| ())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX IF EXISTS idx_payouts_stuck")
            .await
            .map(|_| ())
    }
}
