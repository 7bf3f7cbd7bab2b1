//! The sandbox exchange's balances: the exchange account and the treasury wallet.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::SandboxAccount;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sandbox_balances")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub account: SandboxAccount,
    pub balance_usd_cents: i64,
    pub updated_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
