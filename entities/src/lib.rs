//! SeaORM entities of the payroll service, the string enums stored in them, and the id and
//! money newtypes every layer shares.

pub mod agent_session;
pub mod api_key;
pub mod approval;
pub mod audit_entry;
pub mod bulk;
pub mod db;
pub mod email_outbox;
pub mod employee;
pub mod enums;
pub mod event;
pub mod exchange_hold;
pub mod exchange_reserve;
pub mod health;
pub mod idempotency_record;
pub mod ids;
pub mod job;
pub mod listening;
pub mod money;
pub mod payout;
pub mod payroll_run;
pub mod rate_limit;
pub mod run_lease;
pub mod sandbox_balance;
pub mod sandbox_withdrawal;
pub mod time;
pub mod treasury_transfer;
pub mod webhook_attempt;
pub mod webhook_delivery;
pub mod webhook_endpoint;

pub use enums::*;
pub use money::{Cents, MAX_MONEY_CENTS};
