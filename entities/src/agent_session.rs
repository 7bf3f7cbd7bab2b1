//! Agent sessions: a key's delegated, time-boxed authority for an agent (CONTRACT §16). Only a
//! keyed hash of the token is stored, with a display prefix, like keys.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub description: String,
    /// Comma-separated scope names, a subset of the creating key's.
    pub scopes: String,
    /// The first 12 characters of the token, to recognise it.
    pub prefix: String,
    /// Hex HMAC-SHA256 of the token under the server's key pepper.
    #[sea_orm(unique)]
    pub token_hash: String,
    pub created_by_key_id: String,
    /// The creating key's lineage: its rotated successors own the session too.
    pub lineage_id: String,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
