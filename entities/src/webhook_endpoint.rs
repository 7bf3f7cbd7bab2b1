//! Webhook endpoints (CONTRACT §10). Secrets are stored encrypted; a deleted endpoint keeps its
//! row (and its deliveries) with `deleted_at` set.

use chrono::{DateTime, Utc};
use sea_orm::entity::prelude::*;

use crate::WebhookStatus;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub url: String,
    /// The subscriptions as given: kinds, `run.*` aliases, wildcards.
    pub events: Json,
    pub description: Option<String>,
    pub status: WebhookStatus,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
    /// `whsec_…`, encrypted.
    pub secret: String,
    /// The secret before the last rotation, encrypted; signs beside the new one until
    /// `previous_secret_expires_at`.
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub created_by_key_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookEndpoint")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// The subscriptions as strings.
    pub fn event_patterns(&self) -> Vec<String> {
        self.events
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
