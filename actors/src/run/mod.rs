//! Payroll runs: the pure transition table, payout planning, and their persistence.

pub mod planning;
pub mod store;
pub mod transitions;
