//! Audit entries (CONTRACT §12). Successful writes commit theirs with the write
//! ([`RequestInfo::commit`]); reads and refusals go to the batching `AuditWriter`.

use payroll_entities::{ActorType, audit_entry, ids, time};
use serde_json::Value;

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

pub use payroll_actors::audit::{AuditRecord, actor_entry, insert};
