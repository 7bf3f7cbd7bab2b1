//! Payroll runs: the pure transition table, payout planning, funding figures, and the
//! `RunActor`s (with their `RunManager`) that own every change of a run after its creation.

pub mod actor;
pub mod funds;
pub mod lease;
pub mod manager;
pub mod messages;
pub mod operations;
pub mod planning;
pub mod store;
pub mod transitions;
