//! The event kinds (CONTRACT §10) and their `run.` aliases.

/// Every event kind (CONTRACT §10).
pub const EVENT_KINDS: &[&str] = &[
    "payroll.run.created",
    "payroll.run.confirmed",
    "payroll.run.deposited",
    "payroll.run.executing",
    "payroll.run.completed",
    "payroll.run.failed",
    "payroll.run.cancelled",
    "payout.processing",
    "payout.completed",
    "payout.failed",
    "payout.cancelled",
    "payout.stuck",
    "approval.requested",
    "approval.approved",
    "approval.rejected",
    "approval.expired",
    "approval.failed",
    "employee.wallet_changed",
    "webhook.test",
];

/// The canonical name of an event kind or subscription: `run.X` is an alias of `payroll.run.X`.
pub fn canonical_name(name: &str) -> String {
    match name.strip_prefix("run.") {
        Some(rest) => format!("payroll.run.{rest}"),
        None => name.to_owned(),
    }
}

/// Every kind and every `run.X` alias: the names [`known_kind`] takes.
pub fn kinds_and_aliases() -> Vec<String> {
    let mut all: Vec<String> = EVENT_KINDS.iter().map(|k| (*k).to_owned()).collect();
    all.extend(
        EVENT_KINDS
            .iter()
            .filter_map(|k| k.strip_prefix("payroll.run."))
            .map(|rest| format!("run.{rest}")),
    );
    all
}

/// The canonical kind `name` stands for, if it is a known kind or alias.
pub fn known_kind(name: &str) -> Option<String> {
    let canonical = canonical_name(name);
    EVENT_KINDS
        .contains(&canonical.as_str())
        .then_some(canonical)
}
