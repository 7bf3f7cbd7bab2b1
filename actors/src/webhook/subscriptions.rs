//! Subscriptions: which event kinds an endpoint's patterns receive (CONTRACT §10).

use crate::event_kinds::{EVENT_KINDS, canonical_name as canonical};

/// The wildcards an endpoint may subscribe to, beside every kind and its `run.` alias.
pub const WILDCARDS: &[&str] = &["*", "payroll.run.*", "run.*", "payout.*"];

/// Whether `pattern` is a known kind, alias or wildcard.
pub fn is_valid_pattern(pattern: &str) -> bool {
    let c = canonical(pattern);
    WILDCARDS.contains(&c.as_str()) || EVENT_KINDS.contains(&c.as_str())
}

/// Every accepted subscription, `run.X` aliases included: what the OpenAPI document lists.
pub fn all_patterns() -> Vec<String> {
    let mut all: Vec<String> = WILDCARDS.iter().map(|w| (*w).to_owned()).collect();
    all.extend(crate::event_kinds::kinds_and_aliases());
    all
}

/// Every accepted subscription, for error messages.
pub fn valid_patterns_hint() -> String {
    let mut all: Vec<String> = WILDCARDS.iter().map(|w| (*w).to_owned()).collect();
    all.extend(EVENT_KINDS.iter().map(|k| (*k).to_owned()));
    format!("{} (and run.X for every payroll.run.X)", all.join(", "))
}

/// The read scope the object of an event kind needs (CONTRACT §10): runs, payouts, jobs and
/// approvals `payroll:read`, employees `employees:read`; `webhook.test` none.
pub fn read_scope_of(kind: &str) -> Option<&'static str> {
    if ["payroll.run.", "payout.", "job.", "approval."]
        .iter()
        .any(|p| kind.starts_with(p))
    {
        Some("payroll:read")
    } else if kind.starts_with("employee.") {
        Some("employees:read")
    } else {
        None
    }
}

/// The read scopes a key needs to subscribe to `patterns`: those of every kind they receive
/// (an endpoint sees only what the key registering it could read).
pub fn read_scopes_for(patterns: &[String]) -> Vec<&'static str> {
    let mut scopes: Vec<&'static str> = EVENT_KINDS
        .iter()
        .filter(|kind| subscribes(patterns, kind))
        .filter_map(|kind| read_scope_of(kind))
        .collect();
    scopes.sort_unstable();
    scopes.dedup();
    scopes
}

/// Whether an endpoint subscribed to `patterns` receives events of `kind`. `webhook.test`
/// goes only to the endpoint it tests, never through subscriptions.
pub fn subscribes(patterns: &[String], kind: &str) -> bool {
    if kind == "webhook.test" {
        return false;
    }
    patterns.iter().any(|p| {
        let c = canonical(p);
        c == "*"
            || c == kind
            || c.strip_suffix('*')
                .is_some_and(|prefix| prefix.ends_with('.') && kind.starts_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_pattern_is_accepted() {
        let all = all_patterns();
        assert!(all.contains(&"run.completed".to_owned()));
        assert!(all.iter().all(|p| is_valid_pattern(p)), "{all:?}");
    }

    fn p(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn subscriptions_need_the_read_scopes_of_what_they_receive() {
        assert_eq!(
            read_scopes_for(&p(&["*"])),
            vec!["employees:read", "payroll:read"]
        );
        assert_eq!(read_scopes_for(&p(&["payout.*"])), vec!["payroll:read"]);
        assert_eq!(
            read_scopes_for(&p(&["payout.completed"])),
            vec!["payroll:read"]
        );
        assert_eq!(
            read_scope_of("employee.wallet_changed"),
            Some("employees:read")
        );
        assert_eq!(read_scope_of("webhook.test"), None);
    }

    #[test]
    fn subscriptions_match_kinds_aliases_and_wildcards() {
        assert!(subscribes(&p(&["*"]), "payout.completed"));
        assert!(!subscribes(&p(&["*"]), "webhook.test"));
        assert!(subscribes(&p(&["run.*"]), "payroll.run.created"));
        assert!(subscribes(&p(&["payroll.run.*"]), "payroll.run.failed"));
        assert!(!subscribes(&p(&["payroll.run.*"]), "payout.failed"));
        assert!(subscribes(&p(&["payout.*"]), "payout.processing"));
        assert!(subscribes(&p(&["run.completed"]), "payroll.run.completed"));
        assert!(!subscribes(&p(&["run.completed"]), "payroll.run.created"));
        assert!(subscribes(
            &p(&["payout.failed", "payroll.run.created"]),
            "payroll.run.created"
        ));
    }

    #[test]
    fn patterns_are_validated() {
        for ok in [
            "*",
            "run.*",
            "payroll.run.*",
            "payout.*",
            "run.created",
            "payout.failed",
        ] {
            assert!(is_valid_pattern(ok), "{ok}");
        }
        for bad in [
            "",
            "payout",
            "payroll.*",
            "run.nope",
            "webhook.*",
            "PAYOUT.FAILED",
        ] {
            assert!(!is_valid_pattern(bad), "{bad}");
        }
    }
}
