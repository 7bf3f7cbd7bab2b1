//! API keys and scopes (CONTRACT §2): key format, keyed hashing, scope checks with wildcards,
//! and the status a key has at a given time.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use payroll_entities::{ApiKeyStatus, api_key};
use rand::{Rng, distributions::Alphanumeric};
use sha2::Sha256;

/// Every live key starts with this.
pub const KEY_PREFIX: &str = "mpk_live_";
/// Every agent session's token starts with this (CONTRACT §16).
pub const SESSION_PREFIX: &str = "mps_live_";
/// Random base62 characters after the prefix.
const SECRET_LEN: usize = 40;
/// Characters of the plaintext kept for display.
pub const DISPLAY_PREFIX_LEN: usize = 12;

/// The scopes a key can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    PayrollRead,
    PayrollWrite,
    PayrollExecute,
    EmployeesRead,
    EmployeesWrite,
    TreasuryRead,
    TreasuryWrite,
    AuditRead,
    WebhooksManage,
    KeysManage,
    /// Deciding approvals and lifting wallet holds: a human's, granted only by name.
    PayrollApprove,
}

impl Scope {
    pub const ALL: &'static [Scope] = &[
        Scope::PayrollRead,
        Scope::PayrollWrite,
        Scope::PayrollExecute,
        Scope::EmployeesRead,
        Scope::EmployeesWrite,
        Scope::TreasuryRead,
        Scope::TreasuryWrite,
        Scope::AuditRead,
        Scope::WebhooksManage,
        Scope::KeysManage,
        Scope::PayrollApprove,
    ];

    /// Scopes an agent session never holds: they belong to humans (CONTRACT §16).
    pub const HUMAN_ONLY: &'static [Scope] = &[
        Scope::KeysManage,
        Scope::TreasuryWrite,
        Scope::PayrollApprove,
    ];

    /// Families that a `family:*` wildcard grants whole.
    pub const WILDCARDS: &'static [&'static str] = &["payroll:*", "employees:*", "treasury:*"];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::PayrollRead => "payroll:read",
            Scope::PayrollWrite => "payroll:write",
            Scope::PayrollExecute => "payroll:execute",
            Scope::EmployeesRead => "employees:read",
            Scope::EmployeesWrite => "employees:write",
            Scope::TreasuryRead => "treasury:read",
            Scope::TreasuryWrite => "treasury:write",
            Scope::AuditRead => "audit:read",
            Scope::WebhooksManage => "webhooks:manage",
            Scope::KeysManage => "keys:manage",
            Scope::PayrollApprove => "payroll:approve",
        }
    }

    /// The family a `family:*` wildcard grants this scope with; `payroll:approve` is in
    /// none: it is granted only where it is named.
    fn family(self) -> Option<&'static str> {
        match self {
            Scope::PayrollApprove => None,
            _ => self.as_str().split(':').next(),
        }
    }
}

/// Whether `name` is a scope or a wildcard a key may be given.
pub fn is_known_scope(name: &str) -> bool {
    Scope::ALL.iter().any(|s| s.as_str() == name) || Scope::WILDCARDS.contains(&name)
}

/// Whether the granted scope names (wildcards included) grant `required`.
pub fn grants(granted: &[String], required: Scope) -> bool {
    granted.iter().any(|g| {
        g == required.as_str()
            || (Scope::WILDCARDS.contains(&g.as_str()) && g.strip_suffix(":*") == required.family())
    })
}

/// Whether a caller holding `granted` may hand out `requested` (a scope or a wildcard).
pub fn may_delegate(granted: &[String], requested: &str) -> bool {
    match requested.strip_suffix(":*") {
        Some(family) => Scope::ALL
            .iter()
            .filter(|s| s.family() == Some(family))
            .all(|s| grants(granted, *s)),
        None => Scope::ALL
            .iter()
            .find(|s| s.as_str() == requested)
            .is_some_and(|s| grants(granted, *s)),
    }
}

/// Every scope name, for the bootstrap key.
pub fn all_scope_names() -> Vec<String> {
    Scope::ALL.iter().map(|s| s.as_str().to_owned()).collect()
}

pub fn parse_scope_list(stored: &str) -> Vec<String> {
    stored
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A new plaintext key: the prefix and 40 random base62 characters.
pub fn generate_key() -> String {
    let secret: String = rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(SECRET_LEN)
        .map(char::from)
        .collect();
    format!("{KEY_PREFIX}{secret}")
}

/// Hex HMAC-SHA256 of the plaintext under the server's pepper: what is stored and looked up.
pub fn hash_key(pepper: &[u8], plaintext: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(pepper)
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(plaintext.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Whether a header value looks like one of our keys at all.
pub fn is_well_formed_key(candidate: &str) -> bool {
    candidate
        .strip_prefix(KEY_PREFIX)
        .is_some_and(|s| s.len() >= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A new agent session token: the session prefix and 40 random base62 characters.
pub fn generate_session_token() -> String {
    let key = generate_key();
    format!("{SESSION_PREFIX}{}", &key[KEY_PREFIX.len()..])
}

/// Whether a header value looks like an agent session's token.
pub fn is_well_formed_session_token(candidate: &str) -> bool {
    candidate
        .strip_prefix(SESSION_PREFIX)
        .is_some_and(|s| s.len() >= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Whether a scope name (or wildcard) grants something an agent session may never hold.
pub fn is_human_only(name: &str) -> bool {
    Scope::HUMAN_ONLY.iter().any(|s| {
        s.as_str() == name
            || name
                .strip_suffix(":*")
                .is_some_and(|family| s.family() == Some(family))
    })
}

/// The status of a key at `now`, and when it stopped working if it did.
pub fn key_status(
    key: &api_key::Model,
    now: DateTime<Utc>,
) -> (ApiKeyStatus, Option<DateTime<Utc>>) {
    if let Some(revoked) = key.revoked_at {
        return (ApiKeyStatus::Revoked, Some(revoked));
    }
    let ends = [key.expires_at, key.grace_expires_at]
        .into_iter()
        .flatten()
        .min();
    match ends {
        Some(end) if end <= now => (ApiKeyStatus::Expired, Some(end)),
        _ => (ApiKeyStatus::Active, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn wildcards_grant_their_family_only() {
        let granted = names(&["payroll:*", "treasury:read"]);
        assert!(grants(&granted, Scope::PayrollExecute));
        assert!(grants(&granted, Scope::TreasuryRead));
        assert!(!grants(&granted, Scope::TreasuryWrite));
        assert!(!grants(&granted, Scope::EmployeesRead));
        assert!(!grants(&names(&["payroll:read"]), Scope::PayrollWrite));
    }

    #[test]
    fn delegation_needs_every_scope_of_a_wildcard() {
        let caller = names(&[
            "payroll:read",
            "payroll:write",
            "payroll:execute",
            "audit:read",
        ]);
        assert!(may_delegate(&caller, "payroll:*"));
        assert!(may_delegate(&caller, "audit:read"));
        assert!(!may_delegate(&caller, "employees:*"));
        assert!(!may_delegate(&caller, "keys:manage"));
        assert!(!may_delegate(&caller, "nonsense"));
    }

    #[test]
    fn approve_is_granted_only_by_name() {
        assert!(!grants(&names(&["payroll:*"]), Scope::PayrollApprove));
        assert!(grants(&names(&["payroll:approve"]), Scope::PayrollApprove));
        assert!(!grants(&names(&["payroll:approve"]), Scope::PayrollRead));
        // payroll:* is the family without approve: a key lacking approve may hand it out.
        assert!(may_delegate(
            &names(&["payroll:read", "payroll:write", "payroll:execute"]),
            "payroll:*"
        ));
        assert!(!may_delegate(&names(&["payroll:*"]), "payroll:approve"));
        assert!(is_human_only("treasury:*"));
        assert!(is_human_only("payroll:approve"));
        assert!(!is_human_only("payroll:*"));
        assert!(!is_human_only("treasury:read"));
    }

    #[test]
    fn keys_are_well_formed_and_hash_deterministically() {
        let key = generate_key();
        assert!(is_well_formed_key(&key));
        assert!(!is_well_formed_key("mpk_live_short"));
        assert!(!is_well_formed_key(
            "sk_live_0123456789012345678901234567890123"
        ));
        assert_eq!(hash_key(b"pepper", &key), hash_key(b"pepper", &key));
        assert_ne!(hash_key(b"pepper", &key), hash_key(b"other", &key));
        assert_eq!(hash_key(b"pepper", &key).len(), 64);
    }

    #[test]
    fn status_follows_revocation_expiry_and_grace() {
        let now = payroll_entities::time::now();
        let mut key = api_key::Model {
            id: "key_x".into(),
            name: "n".into(),
            prefix: "mpk_live_abc".into(),
            key_hash: "h".into(),
            scopes: "payroll:read".into(),
            lineage_id: "key_x".into(),
            rotated_from: None,
            expires_at: None,
            grace_expires_at: None,
            revoked_at: None,
            last_used_at: None,
            created_at: now,
        };
        assert_eq!(key_status(&key, now).0, ApiKeyStatus::Active);
        key.grace_expires_at = Some(now - chrono::Duration::seconds(1));
        assert_eq!(key_status(&key, now).0, ApiKeyStatus::Expired);
        key.grace_expires_at = Some(now + chrono::Duration::seconds(60));
        assert_eq!(key_status(&key, now).0, ApiKeyStatus::Active);
        key.expires_at = Some(now);
        assert_eq!(key_status(&key, now), (ApiKeyStatus::Expired, Some(now)));
        key.revoked_at = Some(now);
        assert_eq!(key_status(&key, now).0, ApiKeyStatus::Revoked);
    }
}
