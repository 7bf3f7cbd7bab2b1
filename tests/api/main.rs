//! Integration tests: the real application over HTTP.

mod audit;
mod auth;
mod cli;
mod crash;
mod email;
mod employees;
mod execution;
mod faulty_exchange;
mod funds;
mod funds_property;
mod helpers;
mod idempotency;
mod instances;
mod layout;
mod metrics;
mod okx;
mod okx_standin;
mod openapi;
mod pipeline;
mod process;
mod receiver;
mod reconciliation;
mod runs;
mod security;
mod status;
mod webhooks;
