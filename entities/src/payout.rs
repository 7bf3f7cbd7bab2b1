//! Payouts: one per paid employee of a run, carrying a snapshot of the payee.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{Network, PayoutStatus, Stablecoin};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payouts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub payroll_run_id: String,
    pub employee_id: String,
    pub employee_name: String,
    pub employee_email: String,
    pub status: PayoutStatus,
    pub is_test_run: bool,
    /// Net amount: what is withdrawn.
    pub amount_usd_cents: i64,
    pub fee_usd_cents: i64,
    pub test_run_deduction_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    pub note: Option<String>,
    /// 1 + number of retries.
    pub attempt: i32,
    /// The job of the latest execute or retry that covers this payout.
    pub job_id: Option<String>,
    /// Ours (`<payout id>-<attempt>`), committed before the exchange is called; unique as
    /// its payout's id is (PostgreSQL holds each row to that form with a check constraint,
    /// SQLite with a unique index).
    pub client_withdrawal_id: Option<String>,
    pub cex_withdrawal_id: Option<String>,
    pub on_chain_tx_hash: Option<String>,
    pub block_explorer_url: Option<String>,
    pub failed_reason: Option<String>,
    /// First send of this attempt.
    pub initiated_at: Option<DateTime<Utc>>,
    /// Sends of this attempt's client id, each counted (under the run's lease) as it leaves.
    pub send_count: i32,
    /// The last send of this attempt: the resend grace counts from it.
    pub last_sent_at: Option<DateTime<Utc>>,
    /// Look-ups since the last send that did not find this attempt's client id at the
    /// exchange (counted where the exchange does not document refusing a repeated id).
    pub unfound_lookups: i32,
    /// Set while the payout is stuck (CONTRACT §7): never sent again on its own.
    pub stuck_since: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
