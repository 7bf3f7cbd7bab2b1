//! Approvals: a money-moving request held until a human decides (CONTRACT §16). The request is
//! kept whole (operation, method, path, body) with who asked, and carried out as the
//! requester when approved, under `operation_idempotency_key` so it runs at most once.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::{ActorType, ApprovalStatus};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "approvals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub status: ApprovalStatus,
    /// The canonical operationId.
    pub operation: String,
    pub method: String,
    pub path: String,
    /// The request body as sent (JSON text; empty for none).
    pub body: String,
    /// The run, payout or (for a transfer) nothing the request names.
    pub resource_id: Option<String>,
    pub requester_actor_type: ActorType,
    /// The requesting key, or the session's creating key.
    pub requester_key_id: String,
    /// The requesting key's lineage, or the session's creating key's.
    pub requester_lineage_id: String,
    pub requester_session_id: Option<String>,
    /// The requester's scopes when it asked.
    pub requester_scopes: String,
    /// The Idempotency-Key the operation is carried out under (in the requester's space).
    pub operation_idempotency_key: String,
    pub reason: Option<String>,
    pub decided_by_key_id: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// The status and body of the operation once carried out.
    pub result_status: Option<i32>,
    pub result_body: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
