//! Builds the application: configuration → database (migrated) → actors → HTTP server. Tests
//! build it on port 0 and read the port back.

use payroll_actors::{
    runtime::{ArbiterGuard, InRuntime as _},
    telemetry::CountedSend,
};
use std::{net::TcpListener, path::Path, sync::Arc, time::Duration};

use actix::Actor;
use actix_web::{App, HttpServer, dev::Server, middleware::from_fn, web};
use anyhow::Context;
use payroll_actors::{
    audit_writer::AuditSink,
    exchange::{
        ExchangeProvider,
        actor::{ExchangeActor, StopSending, effective_limit},
        binance::BinanceProvider,
        desk::FundsDesk,
        okx::OkxProvider,
        rate_limit::SharedRateLimit,
        sandbox::SandboxProvider,
    },
    mailer::{Mailer, TransportHealth},
    retention::RetentionJanitor,
    run::{
        deps::RunDeps,
        lease::{self, LeaseSettings},
        manager::{RunManager, StopRuns},
        window as run_window,
    },
    webhook::{secret_box::SecretBox, settings::WebhookDeps, supervisor::WebhookSupervisor},
};
use payroll_entities::{ActorType, api_key, db::Db, health, time};
use payroll_migration::{Migrator, MigratorTrait};
use sea_orm::{EntityTrait, IntoActiveModel, PaginatorTrait};
use serde_json::json;

pub use crate::pepper::load_pepper;
use crate::{
    config::{Secret, Settings},
    http::{
        audit::{self, AuditRecord},
        auth, keys, pipeline,
    },
    pepper::pepper_fingerprint,
    routes,
    state::{Actors, AppState},
    telemetry,
};

/// How long each shutdown step may take.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long requests in flight may take to finish once the server stops.
const REQUESTS_TIMEOUT: Duration = Duration::from_secs(30);

/// SIGTERM or SIGINT, whichever comes first.
async fn stop_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("cannot listen for Ctrl-C")?;
    Ok(())
}

/// A stop signal after the first: it cuts the shutdown steps short. One that cannot be
/// listened for never comes, and the steps run to their end.
async fn second_signal() {
    if stop_signal().await.is_err() {
        std::future::pending::<()>().await;
    }
}

pub struct Application {
    port: u16,
    server: Server,
    state: web::Data<AppState>,
    /// The webhook dispatchers' thread, stopped with the application.
    _webhook_arbiter: ArbiterGuard,
    /// The mailer's thread, stopped with the application.
    _mailer_arbiter: ArbiterGuard,
    /// The announcement listener's thread (PostgreSQL).
    _listener_arbiter: Option<ArbiterGuard>,
    /// This instance's id: its run leases are given up when it stops.
    lease: LeaseSettings,
    /// SQLite: the lock that keeps a second server off this database file.
    _sqlite_lock: Option<std::fs::File>,
}

/// Connects to the configured database and brings its schema up to date.
pub async fn connect_and_migrate(settings: &Settings) -> anyhow::Result<Db> {
    connect(settings, false).await
}

/// As [`connect_and_migrate`]; with `checkpoints_from_the_side`, the caller checkpoints a
/// SQLite log itself ([`checkpoint_log`]) and no commit does.
async fn connect(settings: &Settings, checkpoints_from_the_side: bool) -> anyhow::Result<Db> {
    let url = settings.database_url();
    let max = settings.database.max_connections;
    let db = Db::connect_checkpointing(&url, max, checkpoints_from_the_side)
        .await
        .context("cannot connect to the database (database.url)")?;
    migrate(&db).await.context("database migration failed")?;
    Ok(db)
}

/// Brings the schema up to date. On PostgreSQL the migrations run in one transaction that
/// first takes a lock of this schema's (`pg_advisory_xact_lock`): instances started together on
/// an empty database wait for each other, and each finds the schema as the first left it,
/// instead of two creating the same table. SQLite has one server per file.
/// Each migration is told at `debug` (sea-orm-migration's own lines, see
/// `telemetry::init`); one `info` line says how many were applied.
async fn migrate(db: &Db) -> Result<(), sea_orm::DbErr> {
    use sea_orm::{ConnectionTrait as _, TransactionTrait as _};
    if db.backend() != sea_orm::DatabaseBackend::Postgres {
        let pending = Migrator::get_pending_migrations(&db.conn).await?.len();
        Migrator::up(&db.conn, None).await?;
        applied(pending);
        return Ok(());
    }
    let tx = db.conn.begin().await?;
    tx.execute_unprepared(
        "SELECT pg_advisory_xact_lock(hashtext('payroll_migrations:' || current_schema()))",
    )
    .await?;
    let pending = Migrator::get_pending_migrations(&tx).await?.len();
    Migrator::up(&tx, None).await?;
    tx.commit().await?;
    applied(pending);
    Ok(())
}

fn applied(count: usize) {
    if count == 0 {
        tracing::info!("database schema up to date");
    } else {
        tracing::info!(count, "database migrations applied");
    }
}

/// Every instance of one database shares the key pepper (CONTRACT §13): the first to start
/// keeps its fingerprint in the database, and one with another pepper refuses to start, saying
/// so, rather than refusing every API key (and, signing nothing right, disabling webhook
/// endpoints for everybody).
pub async fn check_pepper(db: &Db, pepper: &Secret) -> anyhow::Result<()> {
    use sea_orm::{ConnectionTrait as _, Statement};
    const FACT: &str = "key_pepper_fingerprint";
    let ours = pepper_fingerprint(pepper);
    let backend = db.backend();
    let tx = db.begin_write().await?;
    tx.execute_raw(Statement::from_sql_and_values(
        backend,
        match backend {
            sea_orm::DatabaseBackend::Postgres => {
                "INSERT INTO service_facts (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"
            }
            _ => "INSERT INTO service_facts (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
        },
        [FACT.into(), ours.clone().into()],
    ))
    .await?;
    let row = tx
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            match backend {
                sea_orm::DatabaseBackend::Postgres => {
                    "SELECT value FROM service_facts WHERE name = $1"
                }
                _ => "SELECT value FROM service_facts WHERE name = ?",
            },
            [FACT.into()],
        ))
        .await?;
    tx.commit().await?;
    let stored: String = match row {
        Some(row) => row.try_get("", "value")?,
        None => ours.clone(),
    };
    if stored != ours {
        anyhow::bail!(
            "auth.key_pepper: this database was set up with another key pepper (fingerprint {}…; \
             this instance's is {}…). Every instance of one database must use the same pepper \
             (PAYROLL__AUTH__KEY_PEPPER, or the same <data.dir>/key_pepper): with another, every \
             API key would be refused here",
            &stored[..stored.len().min(8)],
            &ours[..8]
        );
    }
    Ok(())
}

/// On first start with no keys, creates the `bootstrap` key with every scope and prints it
/// once on stderr. The keys are counted in the transaction that creates it, under a lock of
/// this schema's keys on PostgreSQL (SQLite's writers are one at a time): instances started
/// together on an empty database create one such key, not one each.
pub async fn bootstrap_key(settings: &Settings, db: &Db, pepper: &Secret) -> anyhow::Result<()> {
    use sea_orm::ConnectionTrait as _;
    if !settings.auth.bootstrap_key {
        return Ok(());
    }
    let tx = db.begin_write().await?;
    if tx.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        tx.execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtext('payroll_bootstrap_key:' || current_schema()))",
        )
        .await?;
    }
    if api_key::Entity::find().count(&*tx).await? > 0 {
        return Ok(());
    }
    let scopes = auth::all_scope_names();
    let (model, plaintext) =
        keys::new_key(pepper.expose().as_bytes(), "bootstrap", &scopes, None, None);
    api_key::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    let record = AuditRecord::new("API_KEY_CREATED", "api_key", &model.id)
        .details(json!({"name": "bootstrap", "scopes": scopes}));
    audit::insert(&*tx, audit::actor_entry(ActorType::System, &record)).await?;
    tx.commit().await?;
    eprintln!(
        "Created the bootstrap API key (every scope); it is shown only this once:\n\n    {plaintext}\n\n\
         Keep it safe, then create narrower keys with POST /api/v1/api-keys or `payroll admin create-key`."
    );
    Ok(())
}

/// Makes the data folder the service's own: the process creates files `0600` and folders
/// `0700` from here on (the database, its journals, the outbox's messages, the pepper), and
/// what an earlier version left readable to others is made so too. Payees' names, emails,
/// wallets and amounts are in those files.
pub fn own_data_dir(dir: &Path) -> anyhow::Result<()> {
    use rustix::fs::Mode;
    rustix::process::umask(Mode::from_raw_mode(0o077));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data.dir {}", dir.display()))?;
    restrict(dir, 0o700)?;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            restrict(&entry.path(), 0o700)?;
            for inner in std::fs::read_dir(entry.path())? {
                let inner = inner?;
                if inner.file_type()?.is_file() {
                    restrict(&inner.path(), 0o600)?;
                }
            }
        } else if kind.is_file() {
            restrict(&entry.path(), 0o600)?;
        }
    }
    Ok(())
}

fn restrict(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(current & mode))
            .with_context(|| format!("cannot restrict the permissions of {}", path.display()))?;
    }
    Ok(())
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        let settings = Arc::new(settings);
        for line in settings.unsafe_settings() {
            tracing::warn!("unsafe setting: {line}");
        }
        own_data_dir(&settings.data.dir)?;
        // Before the actors start, so their first figures are recorded.
        telemetry::metrics_handle();
        let pepper = load_pepper(&settings)?;
        let sqlite_lock = crate::sqlite_lock::lock(&settings.database_url())?;
        // The server checkpoints a SQLite log from the side (`checkpoint_log`, below).
        let db = connect(&settings, true).await?;
        check_pepper(&db, &pepper).await?;
        bootstrap_key(&settings, &db, &pepper).await?;
        // The database's health (and clock) is known before anything reads it, then watched
        // for as long as the process runs.
        let mut prober = health::Prober::default();
        prober.probe(db.health()).await;
        actix_web::rt::spawn(health::watch_with(prober, db.health().clone()).in_runtime());

        let audit = AuditSink::start(
            db.clone(),
            Duration::from_millis(settings.audit.flush_interval_ms),
        );
        RetentionJanitor::new(db.clone(), Duration::from_secs(60)).start();
        let provider = exchange_provider(&settings, &db).await?;
        let exchange_provider = provider.name();
        payroll_actors::telemetry::exchange_provider(exchange_provider);
        let lookups_read_history = provider.lookups_read_history();
        let client_ids_deduped = provider.refuses_repeated_client_id();
        let (per_second, burst) = effective_limit(
            settings.exchange.withdrawals_per_second,
            settings.exchange.burst,
            provider.withdrawal_limit(),
        );
        if (per_second, burst)
            != (
                settings.exchange.withdrawals_per_second,
                settings.exchange.burst,
            )
        {
            tracing::info!(
                per_second,
                burst,
                provider = exchange_provider,
                "withdrawal rate limit lowered to the exchange's own (exchange.withdrawals_per_second, exchange.burst)"
            );
        }
        let limit = SharedRateLimit::new(
            db.clone(),
            format!("exchange:{exchange_provider}"),
            per_second,
            burst,
        );
        let lease = LeaseSettings::new(
            Duration::from_millis(settings.runs.lease_ttl_ms),
            db.health().clone(),
        );
        let exchange = ExchangeActor::new(
            provider,
            limit,
            db.clone(),
            lease.owner.clone(),
            settings.exchange.send_deadline(client_ids_deduped),
        )
        .start();
        let funds = FundsDesk::new(db.clone(), exchange.clone());
        let mail_transport = Arc::new(TransportHealth::default());
        let (mailer, mailer_arbiter) = Mailer::new(
            db.clone(),
            settings.email.clone(),
            &settings.data.dir,
            mail_transport.clone(),
        )
        .context("email settings")?
        .start_on_own_arbiter();
        tracing::info!(instance = %lease.owner, "instance id");
        let runs = RunManager::new(Arc::new(RunDeps {
            db: db.clone(),
            funds: funds.clone(),
            exchange: exchange.clone(),
            mailer: Some(mailer.recipient()),
            runs: settings.runs.clone(),
            exchange_settings: settings.exchange.clone(),
            lookups_read_history,
            client_ids_deduped,
            test_run: settings.test_run.clone(),
            lease: lease.clone(),
        }))
        .start();

        let secrets = Arc::new(
            SecretBox::from_pepper(pepper.expose().as_bytes())
                .context("webhook secrets cannot be sealed")?,
        );
        let (webhooks, webhook_arbiter) = WebhookSupervisor::start_on_own_arbiter(WebhookDeps {
            db: db.clone(),
            settings: Arc::new(settings.webhooks.clone()),
            secrets: secrets.clone(),
        });

        let actors = Actors {
            audit,
            runs,
            exchange,
            exchange_provider,
            funds,
            webhooks,
            secrets,
            instance_id: lease.owner.clone(),
            mail_transport,
        };
        let state = web::Data::new(AppState::new(
            settings.clone(),
            db,
            pepper,
            actors,
            crate::openapi::document_json(),
        ));
        // Keys revoked or rotated and runs changed on any instance are heard as the change
        // commits, on a thread of its own: a read waiting for its barrier to be heard back
        // waits for nothing else this process does (the audit writer's batches, run actors).
        let listener_arbiter = state.run_changes.clone().map(|changes| {
            let pool = state.db.conn.get_postgres_connection_pool().clone();
            let keys = state.verified_keys.clone();
            let arbiter = ArbiterGuard::new(actix::Arbiter::new());
            arbiter
                .spawn_made_there(move || crate::http::announcements::listen(pool, keys, changes));
            arbiter
        });
        if state.db.backend() == sea_orm::DatabaseBackend::Sqlite {
            actix_web::rt::spawn(checkpoint_log(state.db.clone()).in_runtime());
        }
        actix_web::rt::spawn(forget_idle_buckets(state.clone()));
        actix_web::rt::spawn(crate::routes::status::history::sample_every_interval(
            state.clone(),
        ));
        let listener = TcpListener::bind((settings.server.host.as_str(), settings.server.port))
            .with_context(|| {
                format!(
                    "cannot listen on {}:{} (server.host, server.port)",
                    settings.server.host, settings.server.port
                )
            })?;
        let port = listener.local_addr()?.port();
        let app_state = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(app_state.clone())
                .wrap(from_fn(pipeline::gate))
                .wrap(from_fn(telemetry::http_metrics))
                .route("/healthz", web::get().to(routes::health::healthz))
                .route("/metrics", web::get().to(routes::prometheus::metrics))
                .route("/status", web::get().to(routes::status::status_page))
                .route(
                    "/status/runs/{run_id}",
                    web::get().to(routes::status::run::run_page),
                )
                .route("/readyz", web::get().to(routes::health::readyz))
                .configure(routes::configure)
                .default_service(web::to(routes::not_found))
        })
        .listen(listener)?
        // A client gets 5 s to send a request's head and an idle keep-alive connection is
        // closed after 5 s: a slow or silent client holds a connection, never the server.
        .client_request_timeout(Duration::from_secs(5))
        .keep_alive(Duration::from_secs(5))
        .shutdown_timeout(REQUESTS_TIMEOUT.as_secs())
        // Signals are heard by run_until_stopped, which stops the workers last.
        .disable_signals()
        .run();
        tracing::info!(port, "listening");
        Ok(Application {
            port,
            server,
            state,
            _webhook_arbiter: webhook_arbiter,
            _mailer_arbiter: mailer_arbiter,
            _listener_arbiter: listener_arbiter,
            lease,
            _sqlite_lock: sqlite_lock,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serves until SIGTERM/SIGINT, then stops in order: new requests are refused (503) and
    /// those in flight finish (up to 30 s); runs start nothing more; the withdrawal in
    /// progress is answered and recorded, and withdrawals still waiting for a token are handed
    /// back (never sent); this instance's run leases are given up, so another instance takes
    /// its runs over at once; pending audit entries are written; last, the HTTP workers stop
    /// (see [`crate::http::drain`] for why last). Each step is bounded, and a second signal
    /// cuts them short: what is unfinished then is what a `kill -9` would leave.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        // The threads and the SQLite lock are held to the end of this function.
        let Application {
            port: _,
            server,
            state,
            _webhook_arbiter,
            _mailer_arbiter,
            _listener_arbiter,
            lease,
            _sqlite_lock,
        } = self;
        let handle = server.handle();
        let mut serving = actix_web::rt::spawn(server);
        // The server's own failure is returned once the runs are settled, not before.
        let mut failed: Option<anyhow::Error> = None;
        let ended_alone = tokio::select! {
            ended = &mut serving => {
                failed = server_result(ended).context("the HTTP server failed").err();
                true
            }
            signal = stop_signal() => {
                signal?;
                false
            }
        };
        let steps = stop_steps(&state, &lease, ended_alone);
        let drained = if ended_alone {
            // The workers are gone already: a record may fail on a connection one of them
            // opened; what is unfinished is looked up after the restart.
            tracing::warn!("the HTTP server stopped by itself; pausing runs");
            steps.await
        } else {
            tokio::select! {
                drained = steps => drained,
                _ = second_signal() => {
                    tracing::warn!(
                        "stopping now (a second stop signal); what is unfinished is looked up after the restart"
                    );
                    false
                }
            }
        };
        if !ended_alone {
            // Nothing in flight is left to wait for unless the drain ran out of time.
            handle.stop(drained).await;
            if let Err(err) = server_result(serving.await) {
                tracing::warn!(error = %err, "the HTTP server did not stop cleanly");
            }
        }
        tracing::info!(at = %time::format(&time::now()), "stopped");
        match failed {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

/// The HTTP server task's outcome: its own error, or the task's (a panic).
fn server_result(ended: Result<std::io::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    Ok(ended??)
}

/// Every shutdown step before the HTTP workers stop; whether the requests in flight
/// finished.
async fn stop_steps(state: &web::Data<AppState>, lease: &LeaseSettings, ended_alone: bool) -> bool {
    let drained = if ended_alone {
        true
    } else {
        tracing::info!("stopping: new requests are refused; those in flight finish");
        let drained = state.drain.stop(REQUESTS_TIMEOUT).await;
        if drained {
            tracing::info!("stopping: requests are done; pausing runs");
        } else {
            tracing::warn!("stopping: requests still in flight after 30 s; pausing runs");
        }
        drained
    };
    let settle = async {
        state.runs.counted_send(StopRuns::Pause).await.ok();
        let unsent = state
            .exchange
            .counted_send(StopSending)
            .await
            .unwrap_or_default();
        state.runs.counted_send(StopRuns::Quiesce).await.ok();
        match run_window::hand_back(&state.db, lease, &unsent).await {
            Ok(n) if n > 0 => {
                tracing::info!(payouts = n, "withdrawals never sent were handed back")
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "unsent withdrawals not handed back; they are looked up after the restart")
            }
        }
    };
    if tokio::time::timeout(SETTLE_TIMEOUT, settle).await.is_err() {
        tracing::warn!(
            "runs did not settle in time; what is unfinished is looked up after the restart"
        );
    }
    match lease::release_all(&state.db, lease).await {
        Ok(n) if n > 0 => tracing::info!(runs = n, "run leases given up"),
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(error = %err, "run leases not given up; they expire on their own")
        }
    }
    match tokio::time::timeout(SETTLE_TIMEOUT, state.audit.flush()).await {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "audit entries not flushed at shutdown"),
        Err(_) => tracing::warn!("audit entries not flushed in time"),
    }
    drained
}

/// Forgets, every minute, the rate-limit buckets of keys and peer addresses that have been
/// full for a while: a flood from many addresses leaves no lasting memory behind.
async fn forget_idle_buckets(state: web::Data<AppState>) {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        state.limiter.retain_recent();
        state.unauthenticated_audit.retain_recent();
        state.limiter.shrink_to_fit();
        state.unauthenticated_audit.shrink_to_fit();
    }
}

/// How often the SQLite write-ahead log is checkpointed from the side.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(200);

/// Checkpoints the SQLite log from the side for as long as the process runs: no commit does it
/// (`wal_autocheckpoint` is off), so a writer never holds the write lock through a copy of the
/// log, and the log stays small.
async fn checkpoint_log(db: Db) {
    let mut every = tokio::time::interval(CHECKPOINT_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(err) = db.checkpoint().await {
            tracing::debug!(error = %err, "the SQLite log could not be checkpointed now");
        }
    }
}

/// The exchange provider the settings name: the sandbox (kept in `db`), OKX or Binance.
pub async fn exchange_provider(
    settings: &Settings,
    db: &Db,
) -> anyhow::Result<Arc<dyn ExchangeProvider>> {
    if let Some(provider) = remote_exchange_provider(settings)? {
        return Ok(provider);
    }
    Ok(Arc::new(
        SandboxProvider::open(db.clone(), settings.exchange.sandbox.clone())
            .await
            .context("the sandbox exchange could not be opened")?,
    ))
}

/// The provider the settings name when it is a real exchange's (OKX, Binance), which needs no
/// database; `None` for the sandbox.
pub fn remote_exchange_provider(
    settings: &Settings,
) -> anyhow::Result<Option<Arc<dyn ExchangeProvider>>> {
    Ok(match settings.exchange.provider.as_str() {
        "okx" => Some(Arc::new(
            OkxProvider::new(settings.exchange.okx.clone())
                .map_err(|why| anyhow::anyhow!("exchange.okx: {why}"))?,
        )),
        "binance" => Some(Arc::new(
            BinanceProvider::new(settings.exchange.binance.clone())
                .map_err(|why| anyhow::anyhow!("exchange.binance: {why}"))?,
        )),
        _ => None,
    })
}
