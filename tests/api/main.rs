//! Integration tests: the real application over HTTP.

mod audit;
mod auth;
mod employees;
mod helpers;
mod idempotency;
mod openapi;
mod pipeline;
mod runs;
