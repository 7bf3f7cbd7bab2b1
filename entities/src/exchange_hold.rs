//! The holds ledger of the exchange account: one hold per funded payout attempt, of its amount
//! plus fee, active until the exchange accepts the attempt or it ends without a withdrawal.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "exchange_holds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub payout_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    pub payroll_run_id: String,
    /// Amount + fee of the attempt.
    pub amount_usd_cents: i64,
    pub created_at: DateTime<Utc>,
    /// Null while the hold is active.
    pub released_at: Option<DateTime<Utc>>,
    /// `accepted`, `refused`, `cancelled`, `failed`, …
    pub release_reason: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
