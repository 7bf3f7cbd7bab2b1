//! Approvals as the API shows them, their events, and their expiry (CONTRACT §16): a PENDING
//! approval past `expires_at` is EXPIRED, with an `approval.expired` event and a SYSTEM audit
//! entry, by the retention janitor (and shown so on any read before it runs).

use chrono::{DateTime, Utc};
use payroll_entities::{ActorType, ApprovalStatus, approval, db::Db, db::WriteTx, ids, time};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::Expr,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::{
    audit,
    events::{self, NewEvent},
    views::Timestamp,
};

/// Who asked for an approval.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Requester {
    pub actor_type: ActorType,
    /// The requesting key, or the session's creating key.
    pub api_key_id: String,
    pub agent_session_id: Option<String>,
}

/// What the operation answered once carried out.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApprovalResult {
    /// The HTTP status the operation answered.
    pub status: u16,
    /// Its body: the success envelope, or the error envelope of a refusal.
    #[schema(value_type = Object)]
    pub body: Value,
}

/// An approval as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApprovalResource {
    pub id: String,
    pub status: ApprovalStatus,
    /// The canonical operationId of the request.
    pub operation: String,
    pub method: String,
    pub path: String,
    /// The request body as sent (`{}` for none).
    #[schema(value_type = Object)]
    pub body: Value,
    /// The run or payout the request names; null for a treasury transfer.
    pub resource_id: Option<String>,
    pub requested_by: Requester,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// The key that approved or rejected it.
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
    /// The operation's answer once carried out (APPROVED or FAILED).
    pub result: Option<ApprovalResult>,
}

/// The status an approval has at `now`: a PENDING one past its expiry is EXPIRED.
pub fn status_at(model: &approval::Model, now: DateTime<Utc>) -> ApprovalStatus {
    match model.status {
        ApprovalStatus::Pending if model.expires_at <= now => ApprovalStatus::Expired,
        status => status,
    }
}

impl ApprovalResource {
    pub fn new(model: &approval::Model, now: DateTime<Utc>) -> ApprovalResource {
        let json = |text: &str| -> Value {
            if text.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
            }
        };
        ApprovalResource {
            id: model.id.clone(),
            status: status_at(model, now),
            operation: model.operation.clone(),
            method: model.method.clone(),
            path: model.path.clone(),
            body: json(&model.body),
            resource_id: model.resource_id.clone(),
            requested_by: Requester {
                actor_type: model.requester_actor_type,
                api_key_id: model.requester_key_id.clone(),
                agent_session_id: model.requester_session_id.clone(),
            },
            reason: model.reason.clone(),
            decided_by: model.decided_by_key_id.clone(),
            decided_at: model.decided_at.map(Timestamp::from),
            expires_at: model.expires_at.into(),
            created_at: model.created_at.into(),
            result: model.result_status.map(|status| ApprovalResult {
                status: u16::try_from(status).unwrap_or(500),
                body: json(model.result_body.as_deref().unwrap_or_default()),
            }),
        }
    }
}

/// The event `kind` (`approval.requested`, …) of an approval as it is now.
pub fn approval_event(kind: &str, model: &approval::Model) -> NewEvent {
    events::new_event(kind, &model.id, &ApprovalResource::new(model, time::now()))
}

/// Approvals expired at most per pass.
const EXPIRY_BATCH: u64 = 500;

/// Marks PENDING approvals past their expiry EXPIRED, each with its event and a SYSTEM audit
/// entry; returns how many.
pub async fn expire_due(db: &Db) -> Result<usize, DbErr> {
    let now = time::now();
    let due: Vec<approval::Model> = approval::Entity::find()
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
        .filter(approval::Column::ExpiresAt.lte(now))
        .order_by_asc(approval::Column::ExpiresAt)
        .limit(EXPIRY_BATCH)
        .all(&db.conn)
        .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let tx = db.begin_write().await?;
    let mut expired = 0;
    for model in due {
        if expire(&tx, &model.id, now).await?.is_some() {
            expired += 1;
        }
    }
    tx.commit().await?;
    Ok(expired)
}

/// Expires approval `id` in `tx` if it is still PENDING and past its expiry: its event and
/// SYSTEM audit entry are written; returns it as expired.
pub async fn expire(
    tx: &WriteTx,
    id: &str,
    now: DateTime<Utc>,
) -> Result<Option<approval::Model>, DbErr> {
    let changed = approval::Entity::update_many()
        .col_expr(
            approval::Column::Status,
            Expr::value(ApprovalStatus::Expired.as_str()),
        )
        .filter(approval::Column::Id.eq(id))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
        .filter(approval::Column::ExpiresAt.lte(now))
        .exec(&**tx)
        .await?
        .rows_affected;
    if changed == 0 {
        return Ok(None);
    }
    let Some(model) = approval::Entity::find_by_id(id).one(&**tx).await? else {
        return Ok(None);
    };
    events::insert_events(tx, vec![approval_event("approval.expired", &model)]).await?;
    audit::insert(
        &**tx,
        audit::system_entry(
            "APPROVAL_EXPIRED",
            "approval",
            &model.id,
            serde_json::json!({"operation": model.operation, "resource_id": model.resource_id}),
        ),
    )
    .await?;
    Ok(Some(model))
}

/// How many approvals are PENDING (not yet expired) now: for `/status` and `/metrics`.
pub async fn pending_count<C: ConnectionTrait>(conn: &C) -> Result<u64, DbErr> {
    use sea_orm::PaginatorTrait;
    approval::Entity::find()
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
        .filter(approval::Column::ExpiresAt.gt(time::now()))
        .count(conn)
        .await
}

/// A new id for an approval.
pub fn new_approval_id() -> String {
    ids::new_id(ids::IdKind::Approval)
}

/// Whose PENDING approvals [`reject_pending_of`] rejects.
#[derive(Debug, Clone, Copy)]
pub enum Revoked<'a> {
    /// A revoked key's: its own requests and its sessions'.
    Key(&'a str),
    /// A revoked session's.
    Session(&'a str),
}

/// Rejects, in `tx`, the PENDING approvals of a revoked requester with `reason`, each with its
/// `approval.rejected` event and a SYSTEM audit entry: a revoked credential's requests do not
/// wait for an approval. Returns how many.
pub async fn reject_pending_of(
    tx: &WriteTx,
    revoked: Revoked<'_>,
    reason: &str,
) -> Result<usize, DbErr> {
    let mut select =
        approval::Entity::find().filter(approval::Column::Status.eq(ApprovalStatus::Pending));
    select = match revoked {
        Revoked::Key(id) => select.filter(approval::Column::RequesterKeyId.eq(id)),
        Revoked::Session(id) => select.filter(approval::Column::RequesterSessionId.eq(id)),
    };
    let pending = select.all(&**tx).await?;
    let now = time::now();
    let mut rejected = Vec::new();
    for model in pending {
        let changed = approval::Entity::update_many()
            .col_expr(
                approval::Column::Status,
                Expr::value(ApprovalStatus::Rejected.as_str()),
            )
            .col_expr(approval::Column::Reason, Expr::value(reason.to_owned()))
            .col_expr(approval::Column::DecidedAt, Expr::value(now))
            .filter(approval::Column::Id.eq(model.id.as_str()))
            .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
            .exec(&**tx)
            .await?
            .rows_affected;
        if changed == 1
            && let Some(model) = approval::Entity::find_by_id(model.id.as_str())
                .one(&**tx)
                .await?
        {
            rejected.push(model);
        }
    }
    if rejected.is_empty() {
        return Ok(0);
    }
    events::insert_events(
        tx,
        rejected
            .iter()
            .map(|m| approval_event("approval.rejected", m))
            .collect(),
    )
    .await?;
    for model in &rejected {
        audit::insert(
            &**tx,
            audit::system_entry(
                "APPROVAL_REJECTED",
                "approval",
                &model.id,
                serde_json::json!({"operation": model.operation, "resource_id": model.resource_id, "reason": reason}),
            ),
        )
        .await?;
    }
    Ok(rejected.len())
}
