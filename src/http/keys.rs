//! Issuing API keys, and how a key is shown.

use chrono::{DateTime, Utc};
use payroll_actors::views::Timestamp;
use payroll_entities::{ApiKeyStatus, api_key, ids, time};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::auth;

/// An API key as the API shows it. `key` (the plaintext) is present only in the answers of
/// create and rotate, and `null` in their idempotent replays.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApiKeyResource {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub status: ApiKeyStatus,
    pub expires_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub rotated_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Option<String>>,
}

impl ApiKeyResource {
    pub fn from_model(model: &api_key::Model, now: DateTime<Utc>) -> ApiKeyResource {
        let (status, _) = auth::key_status(model, now);
        // A rotated key's effective end is its grace end, if sooner than its own expiry.
        let expires_at = [model.expires_at, model.grace_expires_at]
            .into_iter()
            .flatten()
            .min();
        ApiKeyResource {
            id: model.id.clone(),
            name: model.name.clone(),
            prefix: model.prefix.clone(),
            scopes: auth::parse_scope_list(&model.scopes),
            status,
            expires_at: expires_at.map(Timestamp::from),
            last_used_at: model.last_used_at.map(Timestamp::from),
            created_at: model.created_at.into(),
            rotated_from: model.rotated_from.clone(),
            key: None,
        }
    }

    /// With the plaintext, for the one answer that shows it.
    pub fn with_plaintext(mut self, plaintext: String) -> ApiKeyResource {
        self.key = Some(Some(plaintext));
        self
    }

    /// As stored for idempotent replay: the plaintext is never kept.
    pub fn redacted(&self) -> ApiKeyResource {
        let mut copy = self.clone();
        copy.key = Some(None);
        copy
    }
}

/// A new key row and its plaintext. `predecessor` is the key it rotates.
pub fn new_key(
    pepper: &[u8],
    name: &str,
    scopes: &[String],
    expires_at: Option<DateTime<Utc>>,
    predecessor: Option<&api_key::Model>,
) -> (api_key::Model, String) {
    let plaintext = auth::generate_key();
    let id = ids::new_id(ids::IdKind::ApiKey);
    // A sorted set: one spelling of each set of scopes.
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    let model = api_key::Model {
        lineage_id: predecessor.map_or_else(|| id.clone(), |p| p.lineage_id.clone()),
        rotated_from: predecessor.map(|p| p.id.clone()),
        id,
        name: name.to_owned(),
        prefix: plaintext.chars().take(auth::DISPLAY_PREFIX_LEN).collect(),
        key_hash: auth::hash_key(pepper, &plaintext),
        scopes: scopes.join(","),
        expires_at,
        grace_expires_at: None,
        revoked_at: None,
        last_used_at: None,
        created_at: time::now(),
    };
    (model, plaintext)
}
