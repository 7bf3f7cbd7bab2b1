//! Payroll runs. The payout summary is kept as counters, updated with every payout change.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{PayoutStatus, RunStatus, RunType, Stablecoin};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payroll_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub status: RunStatus,
    pub run_type: RunType,
    pub is_test_run: bool,
    pub is_archived: bool,
    pub label: Option<String>,
    pub note: Option<String>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub pay_date: Option<DateTime<Utc>>,
    pub employee_count: i64,
    pub total_amount_usd_cents: i64,
    pub total_fees_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub pending_count: i64,
    pub processing_count: i64,
    pub completed_count: i64,
    pub failed_count: i64,
    pub cancelled_count: i64,
    /// The latest execution job, if any.
    pub current_job_id: Option<String>,
    pub created_by_key_id: Option<String>,
    /// Optimistic version: every write of the run increments it and checks the old value.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub deposited_at: Option<DateTime<Utc>>,
    pub executed_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub cancel_reason: Option<String>,
}

impl Model {
    pub fn counter_mut(&mut self, status: PayoutStatus) -> &mut i64 {
        match status {
            PayoutStatus::Pending => &mut self.pending_count,
            PayoutStatus::Processing => &mut self.processing_count,
            PayoutStatus::Completed => &mut self.completed_count,
            PayoutStatus::Failed => &mut self.failed_count,
            PayoutStatus::Cancelled => &mut self.cancelled_count,
        }
    }

    /// The counter column of the summary for payouts in `status`.
    pub fn count_of(&self, status: PayoutStatus) -> i64 {
        match status {
            PayoutStatus::Pending => self.pending_count,
            PayoutStatus::Processing => self.processing_count,
            PayoutStatus::Completed => self.completed_count,
            PayoutStatus::Failed => self.failed_count,
            PayoutStatus::Cancelled => self.cancelled_count,
        }
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
