//! The actors of the payroll service. No HTTP types live here: handlers pass what an actor
//! must persist as plain data.

pub mod audit_writer;
pub mod retention;
pub mod run;
