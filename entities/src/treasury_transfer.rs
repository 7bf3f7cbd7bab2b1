//! Transfers between the treasury wallet and the exchange account.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{TransferDirection, TransferStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "treasury_transfers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub direction: TransferDirection,
    pub amount_usd_cents: i64,
    pub status: TransferStatus,
    pub note: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it completes; until then it is PENDING.
    pub settles_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
