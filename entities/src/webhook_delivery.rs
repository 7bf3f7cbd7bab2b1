//! One event's delivery to one endpoint, written in the event's transaction. While an attempt
//! runs, `next_attempt_at` holds the claim's expiry: a crashed attempt is due again then.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::DeliveryStatus;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempt_count: i32,
    /// Retries of `webhooks.retry_schedule_ms` used so far.
    pub retries_used: i32,
    /// A manual retry: one attempt, no scheduled retries after it.
    pub manual: bool,
    /// When PENDING: when the next attempt is due. Null once the delivery is final.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
