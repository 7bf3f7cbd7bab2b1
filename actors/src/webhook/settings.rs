//! `webhooks.*` settings (CONTRACT §13) and what the dispatchers share.

use std::sync::Arc;

use payroll_entities::db::Db;
use serde::Deserialize;

use super::{guard, secret_box::SecretBox};

/// `webhooks.*` (CONTRACT §13).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Delays of the retries after a failed first attempt.
    pub retry_schedule_ms: Vec<u64>,
    /// An attempt answered 2xx within this long succeeds.
    pub timeout_ms: u64,
    pub max_in_flight_per_endpoint: u32,
    /// How long the previous secret keeps signing after a rotation.
    pub secret_rotation_grace_seconds: u64,
    pub allow_http: bool,
    pub allow_private_networks: bool,
    /// Endpoints that may exist at once.
    pub max_endpoints: u32,
}

impl WebhookSettings {
    pub fn policy(&self) -> guard::GuardPolicy {
        guard::GuardPolicy {
            allow_http: self.allow_http,
            allow_private_networks: self.allow_private_networks,
        }
    }
}

/// Everything the dispatchers share.
#[derive(Clone)]
pub struct WebhookDeps {
    pub db: Db,
    pub settings: Arc<WebhookSettings>,
    pub secrets: Arc<SecretBox>,
}

impl WebhookDeps {
    /// How far a claim pushes `next_attempt_at`: a claimed delivery waits at most one timeout
    /// for a free slot, then its attempt takes at most another.
    pub fn lease(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(
            i64::try_from(self.settings.timeout_ms.saturating_mul(2)).unwrap_or(i64::MAX / 4)
                + 5_000,
        )
    }

    pub fn max_in_flight(&self) -> usize {
        usize::try_from(self.settings.max_in_flight_per_endpoint.max(1)).unwrap_or(16)
    }
}
