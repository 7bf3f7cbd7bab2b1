//! One audit entry per API request, system action or admin command.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::ActorType;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_entries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub occurred_at: DateTime<Utc>,
    pub request_id: Option<String>,
    pub actor_type: ActorType,
    pub api_key_id: Option<String>,
    /// The agent session the request was made under (`api_key_id` is its creating key).
    pub agent_session_id: Option<String>,
    pub method: Option<String>,
    pub path: Option<String>,
    pub operation: Option<String>,
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub status_code: Option<i32>,
    pub idempotency_key: Option<String>,
    pub details: Json,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
