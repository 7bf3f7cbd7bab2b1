//! Payroll runs: the `RunManager` (creates runs, starts and stops their actors, holds leases)
//! and one `RunActor` per live run, which alone changes its run and payouts after creation.
//! Client commands are in `commands` (cancelling in `cancellation`, retrying in `retry`, what
//! each commits with its answer in `answer`, fees and wallet holds in `pricing`, a job's start
//! in `jobs`), the exchange's answers in `settlement`, funding in `funds`, all SQL in `store`,
//! and the pure lifecycle tables in `transitions`.

pub mod actor;
mod answer;
mod cancellation;
pub mod commands;
pub mod completion;
pub mod creation;
pub mod deductions;
pub mod deps;
pub mod funds;
mod jobs;
pub mod lease;
pub mod manager;
pub mod messages;
pub mod planning;
mod pricing;
mod resolution;
mod retry;
pub mod settlement;
pub mod store;
pub mod transitions;
pub mod window;
