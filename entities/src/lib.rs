//! SeaORM entities of the payroll service, the string enums stored in them, and the id and
//! money newtypes every layer shares.

pub mod api_key;
pub mod audit_entry;
pub mod db;
pub mod employee;
pub mod enums;
pub mod idempotency_record;
pub mod ids;
pub mod money;
pub mod payout;
pub mod payroll_run;
pub mod time;

pub use enums::*;
pub use money::Cents;
