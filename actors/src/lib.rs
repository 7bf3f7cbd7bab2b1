//! The actors of the payroll service. No HTTP types live here: handlers pass what an actor
//! must persist as plain data.

pub mod acknowledgement;
pub mod approvals;
pub mod audit;
pub mod audit_writer;
pub mod event_kinds;
pub mod events;
pub mod exchange;
pub mod mailer;
pub mod outage;
pub mod retention;
pub mod run;
pub mod runtime;
pub mod settings;
pub mod telemetry;
pub mod tls;
pub mod views;
pub mod webhook;
