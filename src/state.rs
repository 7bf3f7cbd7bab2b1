//! The application state handed to handlers and the request gate.

use std::{num::NonZeroU32, sync::Arc};

use actix::Addr;
use governor::{DefaultKeyedRateLimiter, Quota};
use payroll_actors::{
    audit_writer::AuditSink,
    exchange::{actor::ExchangeActor, desk::FundsDesk},
    mailer::TransportHealth,
    run::manager::RunManager,
    webhook::{secret_box::SecretBox, supervisor::WebhookSupervisor},
};
use payroll_entities::db::Db;

use crate::{
    config::{Secret, Settings},
    http::{
        announcements::RunChanges,
        drain::Drain,
        key_cache::{KEY_CACHE_TTL, VerifiedKeys},
    },
    routes::runs::views::Changes,
};

pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: Db,
    /// The key pepper: API keys are stored as HMACs under it.
    pub pepper: Secret,
    pub audit: AuditSink,
    pub runs: Addr<RunManager>,
    pub exchange: Addr<ExchangeActor>,
    /// The exchange provider's name, for error details.
    pub exchange_provider: &'static str,
    /// Where funding decisions (money moved out to the treasury) are taken.
    pub funds: FundsDesk,
    /// Per-API-key token buckets.
    pub limiter: DefaultKeyedRateLimiter<String>,
    /// Per-peer token buckets of the audit entries of refusals without a key.
    pub unauthenticated_audit: DefaultKeyedRateLimiter<std::net::IpAddr>,
    /// API keys read recently, by keyed hash.
    pub verified_keys: Arc<VerifiedKeys>,
    pub webhooks: Addr<WebhookSupervisor>,
    /// Seals webhook secrets at rest.
    pub secrets: Arc<SecretBox>,
    /// This process's instance id (the owner of its run leases).
    pub instance_id: String,
    /// The OpenAPI document as served, built once at start-up.
    pub openapi_json: &'static str,
    /// Runs as last shown, while no write has committed since.
    pub run_views: crate::routes::runs::views::RunViews,
    /// Run changes announced by every instance (PostgreSQL).
    pub run_changes: Option<Arc<RunChanges>>,
    /// Requests in flight; new ones are refused once the server stops.
    pub drain: Arc<Drain>,
    /// Whether the mailer can reach its mail server (or write its outbox folder).
    pub mail_transport: Arc<TransportHealth>,
    /// Imports running now, at most `api.max_concurrent_imports`.
    pub imports: Arc<tokio::sync::Semaphore>,
}

/// The actors handlers talk to.
pub struct Actors {
    pub audit: AuditSink,
    pub runs: Addr<RunManager>,
    pub exchange: Addr<ExchangeActor>,
    pub exchange_provider: &'static str,
    pub funds: FundsDesk,
    pub webhooks: Addr<WebhookSupervisor>,
    pub secrets: Arc<SecretBox>,
    pub instance_id: String,
    pub mail_transport: Arc<TransportHealth>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

impl AppState {
    pub fn new(
        settings: Arc<Settings>,
        db: Db,
        pepper: Secret,
        actors: Actors,
        openapi_json: &'static str,
    ) -> AppState {
        let per_second =
            NonZeroU32::new(settings.api.rate_limit_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(settings.api.rate_limit_burst).unwrap_or(NonZeroU32::MIN);
        let limiter =
            governor::RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst));
        let audited =
            NonZeroU32::new(settings.audit.unauthenticated_per_second).unwrap_or(NonZeroU32::MIN);
        let unauthenticated_audit = governor::RateLimiter::keyed(Quota::per_second(audited));
        let run_changes = (db.backend() == sea_orm::DatabaseBackend::Postgres)
            .then(|| Arc::new(RunChanges::new(&actors.instance_id)));
        let changes = match &run_changes {
            Some(changes) => Changes::Announced(changes.clone()),
            // The service locks a SQLite file: this process is its one writer.
            None => Changes::Local(db.clone()),
        };
        let imports = settings.api.max_concurrent_imports;
        AppState {
            settings,
            db,
            pepper,
            audit: actors.audit,
            runs: actors.runs,
            exchange: actors.exchange,
            exchange_provider: actors.exchange_provider,
            funds: actors.funds,
            limiter,
            unauthenticated_audit,
            verified_keys: Arc::new(VerifiedKeys::new(KEY_CACHE_TTL)),
            webhooks: actors.webhooks,
            secrets: actors.secrets,
            instance_id: actors.instance_id,
            openapi_json,
            run_views: crate::routes::runs::views::RunViews::new(changes),
            run_changes,
            drain: Arc::default(),
            mail_transport: actors.mail_transport,
            imports: Arc::new(tokio::sync::Semaphore::new(imports)),
        }
    }
}
