//! The payroll disbursement service: the HTTP API (the request pipeline in `http/`, one module
//! per resource in `routes/`), its OpenAPI document, configuration, start-up and the CLI.

pub mod cli;
pub mod config;
pub mod http;
pub mod mcp;
pub mod openapi;
pub mod pepper;
pub mod routes;
pub mod sqlite_lock;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod text_out;
pub mod wallet;
