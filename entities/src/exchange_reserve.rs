//! The reserved total of an exchange account: Σ of its active holds, kept as a counter that
//! every transaction creating or releasing holds moves by the same amount; and the count of
//! its funding decisions.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "exchange_reserves")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account: String,
    pub reserved_usd_cents: i64,
    /// Funding decisions committed: each decision's transaction adds one, so a decision taken
    /// on figures read before another committed is told (and reads them again).
    pub decisions: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
