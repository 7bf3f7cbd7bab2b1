//! Idempotency records: a claim while the first request runs, then its stored answer.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::IdempotencyState;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_records")]
pub struct Model {
    /// The API key lineage the key belongs to.
    #[sea_orm(primary_key, auto_increment = false)]
    pub lineage_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub idempotency_key: String,
    /// operationId + path parameters + SHA-256 of the body.
    pub fingerprint: String,
    pub state: IdempotencyState,
    /// A claim older than this may be taken over (the first request crashed).
    pub locked_until: DateTime<Utc>,
    pub response_status: Option<i32>,
    #[sea_orm(column_type = "Text", nullable)]
    pub response_body: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
