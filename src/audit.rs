//! Audit entries (CONTRACT §12). Successful writes commit theirs with the write
//! ([`RequestInfo::commit`]); reads and refusals go to the batching `AuditWriter`.

use payroll_entities::{ActorType, audit_entry, ids, time};
use serde_json::{Value, json};

/// What a write did, for its audit entry.
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

/// The facts of one API request an entry records.
#[derive(Debug, Clone, Default)]
pub struct RequestFacts {
    pub request_id: String,
    pub api_key_id: Option<String>,
    pub method: String,
    pub path: String,
    pub operation: Option<&'static str>,
    pub idempotency_key: Option<String>,
}

/// An entry of an API request.
pub fn request_entry(
    facts: &RequestFacts,
    status: u16,
    record: Option<&AuditRecord>,
    details: Value,
) -> audit_entry::Model {
    audit_entry::Model {
        id: ids::new_id(ids::IdKind::Audit),
        occurred_at: time::now(),
        request_id: Some(facts.request_id.clone()),
        actor_type: ActorType::ApiKey,
        api_key_id: facts.api_key_id.clone(),
        method: Some(facts.method.clone()),
        path: Some(facts.path.clone()),
        operation: facts.operation.map(str::to_owned),
        action: record.map(|r| r.action.to_owned()),
        resource_type: record.map(|r| r.resource_type.to_owned()),
        resource_id: record.map(|r| r.resource_id.clone()),
        status_code: Some(i32::from(status)),
        idempotency_key: facts.idempotency_key.clone(),
        details: record.map(|r| r.details.clone()).unwrap_or(details),
    }
}

/// An entry of the service itself (`SYSTEM`) or an administrator's command (`ADMIN`).
pub fn actor_entry(actor_type: ActorType, record: &AuditRecord) -> audit_entry::Model {
    audit_entry::Model {
        id: ids::new_id(ids::IdKind::Audit),
        occurred_at: time::now(),
        request_id: None,
        actor_type,
        api_key_id: None,
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

pub use payroll_actors::ack::insert_audit as insert;
