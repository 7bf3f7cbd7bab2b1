use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Look-ups that have not found a payout attempt's client id since its last send (CONTRACT §7,
/// "Resends depend on the exchange"): where the exchange does not document refusing a
/// repeated client id, an id is sent again only after at least three such look-ups.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Payouts::Table)
                    .add_column(integer(Payouts::UnfoundLookups).default(0).to_owned())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Payouts::Table)
                    .drop_column(Payouts::UnfoundLookups)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    UnfoundLookups,
}
