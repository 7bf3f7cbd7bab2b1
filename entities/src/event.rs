//! Events: one per run or payout transition, committed with it (CONTRACT §5, §10).

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Canonical kind: `payroll.run.created`, `payout.processing`, …
    pub event_type: String,
    pub resource_id: String,
    pub created_at: DateTime<Utc>,
    /// `{"object": …}`: the run or payout as the API returns it.
    pub data: Json,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
