//! Every attempt of a delivery: when it started, what the receiver answered, how long it took.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub delivery_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    /// The HTTP status, or null when no answer came (timeout, refused, reset, blocked).
    pub response_status: Option<i32>,
    pub duration_ms: i64,
    pub error: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
