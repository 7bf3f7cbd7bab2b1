//! API keys: only a keyed hash of the secret is stored, with a display prefix.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub name: String,
    /// The first 12 characters of the plaintext, to recognise a key.
    pub prefix: String,
    /// Hex HMAC-SHA256 of the plaintext under the server's key pepper.
    #[sea_orm(unique)]
    pub key_hash: String,
    /// Comma-separated scope names.
    pub scopes: String,
    /// The first key of a rotation chain; idempotency keys are scoped to it.
    pub lineage_id: String,
    pub rotated_from: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Set on the old key when it is rotated: it stops working at this time.
    pub grace_expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
