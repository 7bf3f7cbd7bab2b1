//! Audit entries (CONTRACT §12). Successful writes commit theirs with the write
//! ([`RequestInfo::commit`]); reads and refusals go to the batching `AuditWriter`.

use payroll_entities::{ActorType, audit_entry, ids, time};
use serde_json::Value;

pub use payroll_actors::audit::{AuditRecord, actor_entry, insert};

/// An approved request being carried out (CONTRACT §16): it acts instead of asking again, and
/// its audit entries name the approval and the approver.
#[derive(Debug, Clone)]
pub struct ApprovalGrant {
    pub approval_id: String,
    pub approved_by_key_id: String,
}

/// The facts of one API request an entry records.
#[derive(Debug, Clone, Default)]
pub struct RequestFacts {
    pub request_id: String,
    pub api_key_id: Option<String>,
    /// The agent session the request was made under.
    pub agent_session_id: Option<String>,
    /// The approval an approved request is carried out under.
    pub approval: Option<ApprovalGrant>,
    pub method: String,
    /// The path as stored: cut to `audit.path_max_chars` ([`stored_path`]).
    pub path: String,
    /// The path was longer and is stored cut (`details.path_truncated`).
    pub path_truncated: bool,
    pub operation: Option<&'static str>,
    pub idempotency_key: Option<String>,
    /// The peer's address (not stored): refusals without a key are limited per address.
    pub peer: Option<std::net::IpAddr>,
}

/// A path as an audit entry stores it: at most `max_chars` characters, and whether it was cut
/// (a client cannot fill the disk with one request's path).
/// Whose bucket a refusal without a key counts against: the peer's address, an IPv6 one by
/// its /64 (one host holds a whole /64, and would otherwise get a new bucket per address).
pub fn peer_bucket(peer: std::net::IpAddr) -> std::net::IpAddr {
    match peer {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

pub fn stored_path(path: &str, max_chars: usize) -> (String, bool) {
    match path.char_indices().nth(max_chars) {
        Some((end, _)) => (path[..end].to_owned(), true),
        None => (path.to_owned(), false),
    }
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
        actor_type: match facts.agent_session_id {
            Some(_) => ActorType::AgentSession,
            None => ActorType::ApiKey,
        },
        api_key_id: facts.api_key_id.clone(),
        agent_session_id: facts.agent_session_id.clone(),
        method: Some(facts.method.clone()),
        path: Some(facts.path.clone()),
        operation: facts.operation.map(str::to_owned),
        action: record.map(|r| r.action.to_owned()),
        resource_type: record.map(|r| r.resource_type.to_owned()),
        resource_id: record.map(|r| r.resource_id.clone()),
        status_code: Some(i32::from(status)),
        idempotency_key: facts.idempotency_key.clone(),
        details: {
            let mut details = record.map(|r| r.details.clone()).unwrap_or(details);
            if facts.path_truncated {
                details = noted(details, "path_truncated", Value::Bool(true));
            }
            if let Some(grant) = &facts.approval {
                let approval = serde_json::json!({
                    "id": grant.approval_id,
                    "approved_by_key_id": grant.approved_by_key_id,
                });
                details = noted(details, "approval", approval);
            }
            details
        },
    }
}

/// `details` with `key: value` beside what it holds (wrapped as `details` if not an object):
/// a path stored cut, the approval an approved request was carried out under.
fn noted(mut details: Value, key: &str, value: Value) -> Value {
    match details.as_object_mut() {
        Some(object) => {
            object.insert(key.to_owned(), value);
            details
        }
        None => serde_json::json!({key: value, "details": details}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_peer_counts_by_its_64() {
        let bucket = |ip: &str| peer_bucket(ip.parse().expect("ip")).to_string();
        assert_eq!(bucket("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(bucket("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::");
        assert_ne!(bucket("2001:db8:1:3::1"), "2001:db8:1:2::");
        assert_eq!(bucket("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(bucket("192.0.2.7"), "192.0.2.7");
    }

    #[test]
    fn long_paths_are_stored_cut_and_say_so() {
        assert_eq!(
            stored_path("/api/v1/x", 512),
            ("/api/v1/x".to_owned(), false)
        );
        let long = format!("/api/v1/{}", "é".repeat(600));
        let (cut, truncated) = stored_path(&long, 512);
        assert!(truncated);
        assert_eq!(cut.chars().count(), 512);
        let facts = RequestFacts {
            path: cut,
            path_truncated: true,
            ..RequestFacts::default()
        };
        let entry = request_entry(&facts, 404, None, serde_json::json!({}));
        assert_eq!(entry.details["path_truncated"], true);
    }
}
