//! The settings of agent sessions, approvals and wallet-change holds (CONTRACT §16).

use serde::Deserialize;

/// Wallet-change holds (CONTRACT §16).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmployeeSettings {
    /// After a wallet or network change, the employee's payouts are held from confirm this
    /// long (0: no hold).
    pub wallet_change_hold_hours: u64,
}

/// Approvals of money-moving operations (CONTRACT §16).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Every money-moving operation needs a human's approval, not only an agent session's.
    pub required: bool,
    /// A PENDING approval expires this long after it was requested.
    pub ttl_hours: u64,
}

/// Agent sessions (CONTRACT §16).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSessionSettings {
    /// The longest a session may last.
    pub max_hours: u64,
}
