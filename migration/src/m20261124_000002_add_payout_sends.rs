use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Sends of a payout attempt counted on the payout (each stamped under the run's lease before
/// it leaves), and when a payout became stuck (CONTRACT §7).
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters one at a time.
        for column in [
            integer(Payouts::SendCount).default(0).to_owned(),
            timestamp_with_time_zone_null(Payouts::LastSentAt),
            timestamp_with_time_zone_null(Payouts::StuckSince),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Payouts::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        // An attempt handed to the exchange before sends were counted was sent once, when it
        // was initiated.
        manager
            .get_connection()
            .execute_unprepared(
                "UPDATE payouts SET send_count = 1, last_sent_at = initiated_at \
                 WHERE client_withdrawal_id IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Payouts::StuckSince, Payouts::LastSentAt, Payouts::SendCount] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Payouts::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    SendCount,
    LastSentAt,
    StuckSince,
}
