//! What a client's request commits together with the change it asked for (CONTRACT §3, §12):
//! the idempotency record with the answer, and the audit entry. The HTTP layer hands both over
//! as plain data, plus a function that renders the answer from the outcome, so that the stored
//! answer and the sent one are the same bytes.

use payroll_entities::{
    ActorType, IdempotencyState, audit_entry, idempotency_record, ids, job, payout, payroll_run,
    time,
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter, sea_query::Expr,
};
use serde_json::Value;

/// The figures of a balance check (CONTRACT §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceCheck {
    pub sufficient: bool,
    pub required: i64,
    pub available: i64,
    pub deficit: i64,
    pub run: payroll_run::Model,
    pub checked_at: chrono::DateTime<chrono::Utc>,
}

/// What an operation on a run produced, for the answer.
#[derive(Debug, Clone)]
pub enum Outcome {
    Run {
        run: payroll_run::Model,
        job: Option<job::Model>,
    },
    BalanceCheck(BalanceCheck),
    Payout(payout::Model),
}

pub type Render = Box<dyn FnOnce(&Outcome) -> Result<Vec<u8>, String> + Send>;

/// The idempotency key a request holds.
#[derive(Debug, Clone)]
pub struct IdempotencyTarget {
    pub lineage_id: String,
    pub key: String,
    /// The claim's token: only the request holding this claim completes the record.
    pub locked_until: Option<chrono::DateTime<chrono::Utc>>,
}

pub struct Acknowledgement {
    pub idempotency: Option<IdempotencyTarget>,
    /// The status code of the answer.
    pub status: u16,
    /// The request's audit entry; the actor fills in action, resource and details.
    pub audit: audit_entry::Model,
    pub render: Render,
}

impl std::fmt::Debug for Acknowledgement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acknowledgement")
            .field("idempotency", &self.idempotency)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// What the audit entry of an operation says it did.
#[derive(Debug, Clone)]
pub struct AuditAction {
    pub action: &'static str,
    pub resource_type: &'static str,
    pub resource_id: String,
    pub details: Value,
}

/// The first ids of a bulk change, as its audit details name them.
pub fn first_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    ids.take(20).collect()
}

/// A status change, as audit details record it.
pub fn status_change(before: impl serde::Serialize, after: impl serde::Serialize) -> Value {
    serde_json::json!({"status": {"before": before, "after": after}})
}

/// Stores an answer in the operation's transaction. Fails (so the operation rolls back) when
/// the claim is no longer this request's: another request took it over after the lock timeout
/// and is running the operation itself.
pub async fn complete_idempotency<C: ConnectionTrait>(
    conn: &C,
    target: &IdempotencyTarget,
    status: u16,
    body: String,
) -> Result<(), DbErr> {
    let mut update = idempotency_record::Entity::update_many()
        .col_expr(
            idempotency_record::Column::State,
            Expr::value(IdempotencyState::Completed.as_str()),
        )
        .col_expr(
            idempotency_record::Column::ResponseStatus,
            Expr::value(i32::from(status)),
        )
        .col_expr(idempotency_record::Column::ResponseBody, Expr::value(body))
        .filter(idempotency_record::Column::LineageId.eq(target.lineage_id.as_str()))
        .filter(idempotency_record::Column::IdempotencyKey.eq(target.key.as_str()))
        .filter(idempotency_record::Column::State.eq(IdempotencyState::InFlight));
    if let Some(token) = target.locked_until {
        update = update.filter(idempotency_record::Column::LockedUntil.eq(token));
    }
    if update.exec(conn).await?.rows_affected != 1 {
        return Err(DbErr::Custom(
            "the idempotency claim was taken over by a later request".into(),
        ));
    }
    Ok(())
}

pub async fn insert_audit<C: ConnectionTrait>(
    conn: &C,
    entry: audit_entry::Model,
) -> Result<(), DbErr> {
    audit_entry::Entity::insert(entry.into_active_model())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

impl Acknowledgement {
    /// Renders the answer, stores it under the idempotency key and writes the audit entry, in
    /// `conn`'s transaction. Returns the answer's body.
    pub async fn commit_in<C: ConnectionTrait>(
        self,
        conn: &C,
        outcome: &Outcome,
        action: AuditAction,
    ) -> Result<Vec<u8>, DbErr> {
        let body = (self.render)(outcome).map_err(DbErr::Custom)?;
        if let Some(target) = &self.idempotency {
            let text = String::from_utf8(body.clone()).map_err(|e| DbErr::Custom(e.to_string()))?;
            complete_idempotency(conn, target, self.status, text).await?;
        }
        let mut entry = self.audit;
        entry.action = Some(action.action.to_owned());
        entry.resource_type = Some(action.resource_type.to_owned());
        entry.resource_id = Some(action.resource_id);
        entry.details = action.details;
        entry.status_code = Some(i32::from(self.status));
        insert_audit(conn, entry).await?;
        Ok(body)
    }
}

/// An audit entry of something the service did on its own (`actor_type` SYSTEM).
pub fn system_entry(
    action: &str,
    resource_type: &str,
    resource_id: &str,
    details: Value,
) -> audit_entry::Model {
    audit_entry::Model {
        id: ids::new_id(ids::IdKind::Audit),
        occurred_at: time::now(),
        request_id: None,
        actor_type: ActorType::System,
        api_key_id: None,
        method: None,
        path: None,
        operation: None,
        action: Some(action.to_owned()),
        resource_type: Some(resource_type.to_owned()),
        resource_id: Some(resource_id.to_owned()),
        status_code: None,
        idempotency_key: None,
        details,
    }
}
