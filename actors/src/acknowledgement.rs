//! What a client's request commits together with the change it asked for (CONTRACT §3, §12):
//! the idempotency record with the answer, and the audit entry. The HTTP layer hands both over
//! as plain data, plus a function that renders the answer from the outcome, so that the stored
//! answer and the sent one are the same bytes.

use payroll_entities::{
    IdempotencyState, audit_entry, idempotency_record, job, payout, payroll_run,
};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, sea_query::Expr};

use crate::audit::{self, AuditRecord};

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
        return Err(DbErr::Custom(TAKEN_OVER.into()));
    }
    Ok(())
}

/// Why [`complete_idempotency`] fails when the request ran past `idempotency.lock_timeout_ms`
/// and a later request with its key took the claim over. The transaction it was to complete in
/// rolls back: the later request's answer stands, and this one answers 409
/// `IDEMPOTENCY_KEY_IN_USE`.
pub(crate) const TAKEN_OVER: &str = "the idempotency claim was taken over by a later request";

/// Whether `err` is [`complete_idempotency`]'s: a later request took the claim over.
pub fn taken_over(err: &DbErr) -> bool {
    matches!(err, DbErr::Custom(message) if message == TAKEN_OVER)
}

impl Acknowledgement {
    /// Renders the answer, stores it under the idempotency key and writes the audit entry, in
    /// `conn`'s transaction. Returns the answer's body.
    pub async fn commit_in<C: ConnectionTrait>(
        self,
        conn: &C,
        outcome: &Outcome,
        action: AuditRecord,
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
        // What the request's entry noted already (an approval it was carried out under, a
        // path stored cut) stays beside the action's details.
        let noted = std::mem::replace(&mut entry.details, action.details);
        if let (Some(details), serde_json::Value::Object(noted)) =
            (entry.details.as_object_mut(), noted)
        {
            for (key, value) in noted {
                details.entry(key).or_insert(value);
            }
        }
        entry.status_code = Some(i32::from(self.status));
        audit::insert(conn, entry).await?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_taken_over_is_told_apart_from_other_errors() {
        assert!(taken_over(&DbErr::Custom(TAKEN_OVER.into())));
        assert!(!taken_over(&DbErr::Custom("something else".into())));
    }
}
