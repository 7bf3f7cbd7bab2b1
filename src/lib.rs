//! The payroll disbursement service: HTTP API, request gate, configuration and CLI.

pub mod admin;
pub mod api;
pub mod audit;
pub mod auth;
pub mod cli;
pub mod client;
pub mod client_commands;
pub mod config;
pub mod dates;
pub mod error;
pub mod gate;
pub mod idempotency;
pub mod key_cache;
pub mod keys;
pub mod openapi;
pub mod routes;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod wallet;
