//! The request pipeline and what handlers share: authentication, scopes, rate limits,
//! idempotency, audit, errors, the request, the envelope, bodies, query strings and dates;
//! the drain of requests in flight at shutdown.

pub mod announcements;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod body;
pub mod callers;
pub mod dates;
pub mod drain;
pub mod envelope;
pub mod error;
mod fail_fast;
pub mod idempotency;
mod incoming;
pub mod key_cache;
pub mod keys;
pub mod pipeline;
pub mod query;
pub mod request;
pub mod resource;
pub mod route;
