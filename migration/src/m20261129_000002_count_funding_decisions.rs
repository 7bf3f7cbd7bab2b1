use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// How many funding decisions have reserved money on the exchange account. A decision reads
/// the account at a consistent point with no lock held (the exchange may be slow to answer),
/// then, under the decision lock, checks that no other decision reserved money since that
/// point; creating holds counts here.
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ExchangeReserves::Table)
                    .add_column(big_integer(ExchangeReserves::Decisions).default(0))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ExchangeReserves::Table)
                    .drop_column(ExchangeReserves::Decisions)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum ExchangeReserves {
    Table,
    Decisions,
}
