//! Audit entries (CONTRACT §12): what an operation did, and the entries the service writes for
//! its own work (`SYSTEM`) and for an administrator's commands (`ADMIN`). Entries of API
//! requests are built by the HTTP layer from the same [`AuditRecord`].

use payroll_entities::{ActorType, audit_entry, ids, time};
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, IntoActiveModel};
use serde_json::{Value, json};

/// What an operation did, for its audit entry.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// `PAYROLL_RUN_CREATED`, `EMPLOYEE_UPDATED`, …
    pub action: &'static str,
    pub resource_type: &'static str,
    pub resource_id: String,
    /// Before/after of changed fields; for bulk operations counts and the first 20 ids.
    pub details: Value,
}

impl AuditRecord {
    pub fn new(
        action: &'static str,
        resource_type: &'static str,
        resource_id: impl Into<String>,
    ) -> AuditRecord {
        AuditRecord {
            action,
            resource_type,
            resource_id: resource_id.into(),
            details: json!({}),
        }
    }

    pub fn details(mut self, details: Value) -> AuditRecord {
        self.details = details;
        self
    }
}

/// How many ids of a bulk change its audit details name.
pub const FIRST_IDS: usize = 20;

/// The first ids of a bulk change, as its audit details name them.
pub fn first_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    ids.take(FIRST_IDS).collect()
}

/// A status change, as audit details record it.
pub fn status_change(before: impl serde::Serialize, after: impl serde::Serialize) -> Value {
    json!({"status": {"before": before, "after": after}})
}

/// An entry of the service itself (`SYSTEM`) or an administrator's command (`ADMIN`).
pub fn actor_entry(actor_type: ActorType, record: &AuditRecord) -> audit_entry::Model {
    audit_entry::Model {
        id: ids::new_id(ids::IdKind::Audit),
        occurred_at: time::now(),
        request_id: None,
        actor_type,
        api_key_id: None,
        agent_session_id: None,
        method: None,
        path: None,
        operation: None,
        action: Some(record.action.to_owned()),
        resource_type: Some(record.resource_type.to_owned()),
        resource_id: Some(record.resource_id.clone()),
        status_code: None,
        idempotency_key: None,
        details: record.details.clone(),
    }
}

/// An entry of something the service did on its own (`actor_type` SYSTEM).
pub fn system_entry(
    action: &'static str,
    resource_type: &'static str,
    resource_id: &str,
    details: Value,
) -> audit_entry::Model {
    actor_entry(
        ActorType::System,
        &AuditRecord::new(action, resource_type, resource_id).details(details),
    )
}

pub async fn insert<C: ConnectionTrait>(conn: &C, entry: audit_entry::Model) -> Result<(), DbErr> {
    audit_entry::Entity::insert(entry.into_active_model())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}
