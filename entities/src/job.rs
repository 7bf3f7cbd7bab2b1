//! Execution jobs: one per execute or retry, tracking the payouts it covers.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{JobStatus, PayoutStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub payroll_run_id: String,
    pub status: JobStatus,
    pub total: i64,
    pub pending_count: i64,
    pub processing_count: i64,
    pub completed_count: i64,
    pub failed_count: i64,
    pub cancelled_count: i64,
    pub estimated_duration_seconds: i64,
    pub failed_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
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
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
