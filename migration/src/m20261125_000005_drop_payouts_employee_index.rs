use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// No query reads payouts by employee, and employees are never deleted (only made INACTIVE),
/// so `idx_payouts_employee` only cost writes: an entry for every payout inserted, and on
/// PostgreSQL one more for every payout update that is not heap-only (a run's execution
/// makes three per payout).
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_payouts_employee")
                    .table(Payouts::Table)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("idx_payouts_employee")
                    .table(Payouts::Table)
                    .col(Payouts::EmployeeId)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    EmployeeId,
}
