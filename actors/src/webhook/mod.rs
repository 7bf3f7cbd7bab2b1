//! Webhooks (CONTRACT §10): subscriptions, delivery rows written with their events, Standard
//! Webhooks signing, secrets sealed at rest, the SSRF guard, the delivery state table, and the
//! supervisor and dispatcher actors.

pub mod dispatcher;
pub mod guard;
pub mod http;
pub mod secret_box;
pub mod settings;
pub mod signing;
pub mod store;
pub mod subscriptions;
pub mod supervisor;
pub mod transitions;
