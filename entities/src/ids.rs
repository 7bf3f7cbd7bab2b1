//! Resource identifiers: a fixed prefix plus a ULID, so ids sort by creation time.

use std::sync::Mutex;

/// The prefixes of every resource kind (CONTRACT §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Employee,
    Run,
    Payout,
    Job,
    Webhook,
    Delivery,
    Event,
    ApiKey,
    Audit,
    Transfer,
    Request,
    Email,
    AgentSession,
    Approval,
}

impl IdKind {
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Employee => "emp_",
            IdKind::Run => "run_",
            IdKind::Payout => "pay_",
            IdKind::Job => "job_",
            IdKind::Webhook => "wh_",
            IdKind::Delivery => "whd_",
            IdKind::Event => "evt_",
            IdKind::ApiKey => "key_",
            IdKind::Audit => "aud_",
            IdKind::Transfer => "trf_",
            IdKind::Request => "req_",
            IdKind::Email => "eml_",
            IdKind::AgentSession => "ses_",
            IdKind::Approval => "apr_",
        }
    }
}

/// One monotonic generator per process, so ids made in the same millisecond still sort in the
/// order they were made (payouts of a run, audit entries of a request).
static GENERATOR: Mutex<Option<ulid::Generator>> = Mutex::new(None);

fn next_ulid() -> ulid::Ulid {
    let mut guard = match GENERATOR.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let generator = guard.get_or_insert_with(ulid::Generator::new);
    // The monotonic increment only overflows after 2^80 ids in one millisecond.
    generator.generate().unwrap_or_else(|_| ulid::Ulid::new())
}

/// A new id of the given kind.
pub fn new_id(kind: IdKind) -> String {
    let mut buf = [0u8; ulid::ULID_LEN];
    let ulid = next_ulid();
    let mut id = String::with_capacity(kind.prefix().len() + ulid::ULID_LEN);
    id.push_str(kind.prefix());
    id.push_str(ulid.array_to_str(&mut buf));
    id
}

/// Whether `id` has the kind's prefix followed by a well-formed ULID. Anything else can never
/// name a stored resource, so callers answer "not found" without a query.
pub fn is_well_formed(kind: IdKind, id: &str) -> bool {
    id.strip_prefix(kind.prefix())
        .is_some_and(|rest| rest.len() == 26 && ulid::Ulid::from_string(rest).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_well_formed_prefixed_and_ordered() {
        let a = new_id(IdKind::Run);
        let b = new_id(IdKind::Run);
        assert!(a.starts_with("run_"));
        assert!(is_well_formed(IdKind::Run, &a));
        assert!(!is_well_formed(IdKind::Payout, &a));
        assert!(a < b);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        assert!(!is_well_formed(IdKind::Run, "run_"));
        assert!(!is_well_formed(IdKind::Run, "run_123"));
        assert!(!is_well_formed(
            IdKind::Run,
            "run_01ARZ3NDEKTSV4RRFFQ69G5FA!"
        ));
        assert!(is_well_formed(
            IdKind::Run,
            "run_01ARZ3NDEKTSV4RRFFQ69G5FAV"
        ));
    }
}
