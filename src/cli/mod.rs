//! The `payroll` command line: arguments, the API client and its commands, and the
//! administrator's commands that work on the database directly.

pub mod admin;
pub mod args;
pub mod client;
pub mod commands;
mod render;
