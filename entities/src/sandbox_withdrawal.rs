//! Withdrawals the sandbox exchange accepted, by our client withdrawal id.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{Network, SandboxWithdrawalStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sandbox_withdrawals")]
pub struct Model {
    /// The exchange's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    #[sea_orm(unique)]
    pub client_id: String,
    pub amount_usd_cents: i64,
    pub fee_usd_cents: i64,
    pub network: Network,
    pub address: String,
    pub status: SandboxWithdrawalStatus,
    pub tx_hash: Option<String>,
    pub failed_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it completes (or fails); until then it is PENDING.
    pub settles_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
