//! The reserved total of an exchange account: Σ of its active holds, kept as a counter that
//! every transaction creating or releasing holds moves by the same amount; and the count of
//! the funding decisions that reserved money on it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "exchange_reserves")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account: String,
    pub reserved_usd_cents: i64,
    /// Funding decisions that reserved money: each transaction creating holds adds one, so a
    /// decision taken on figures read before another reserved money is told (and reads them
    /// again).
    pub decisions: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
