use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Employees::Table)
                    .col(string_len(Employees::Id, 40).primary_key())
                    .col(text(Employees::Name))
                    .col(text(Employees::Email))
                    .col(text_uniq(Employees::EmailLower))
                    .col(string_len(Employees::Status, 32))
                    .col(string_len(Employees::EmploymentType, 32))
                    .col(big_integer(Employees::SalaryUsdCents))
                    .col(string_len(Employees::Stablecoin, 32))
                    .col(string_len(Employees::Network, 32))
                    .col(text(Employees::WalletAddress))
                    .col(date_null(Employees::ContractStartDate))
                    .col(date_null(Employees::ContractEndDate))
                    .col(big_integer(Employees::TestDeductionBalanceUsdCents).default(0))
                    .col(timestamp_with_time_zone(Employees::CreatedAt))
                    .col(timestamp_with_time_zone(Employees::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_employees_status")
                    .table(Employees::Table)
                    .col(Employees::Status)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Employees::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Employees {
    Table,
    Id,
    Name,
    Email,
    EmailLower,
    Status,
    EmploymentType,
    SalaryUsdCents,
    Stablecoin,
    Network,
    WalletAddress,
    ContractStartDate,
    ContractEndDate,
    TestDeductionBalanceUsdCents,
    CreatedAt,
    UpdatedAt,
}
