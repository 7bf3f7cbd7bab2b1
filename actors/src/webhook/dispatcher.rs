//! The actors that deliver webhooks. One `WebhookSupervisor` finds endpoints with due
//! deliveries (after every commit that wrote some, and by a periodic scan) and keeps one
//! `WebhookDispatcher` per such endpoint. A dispatcher claims its endpoint's due deliveries
//! (pushing `next_attempt_at` out by a lease, so a crash makes them due again), runs at most
//! `webhooks.max_in_flight_per_endpoint` attempts at once, records outcomes in batches, and
//! arms its timer for the next retry only after that retry's time is committed. A slow or dead
//! endpoint only fills its own dispatcher; all of them run on their own arbiter, apart from the
//! run actors.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use chrono::{DateTime, Utc};
use payroll_entities::{
    DeliveryStatus, WebhookStatus,
    db::{Db, WriteTx},
    event, time, webhook_attempt, webhook_delivery, webhook_endpoint,
};
use sea_orm::{
    ColumnTrait, Condition, DatabaseBackend, DbErr, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
    sea_query::{Expr, LockBehavior, LockType, OnConflict},
};
use serde_json::json;

use super::{
    WebhookSettings, fail_deliveries, fail_pending,
    guard::{GuardPolicy, GuardedResolver, literal_ip},
    schedule::{AfterFailure, after_failure},
    sealing::SecretBox,
    signing::{secret_key, signature_header},
};
use crate::{
    audit::{self, system_entry},
    telemetry::{self, ActorKind, CountedSend, Handling, Observed},
    views::EventResource,
};

/// How often the supervisor looks for due deliveries on its own.
const SCAN_INTERVAL: Duration = Duration::from_secs(2);
/// Outcomes recorded per transaction at most.
const FLUSH_BATCH: usize = 256;
/// How long outcomes wait to be recorded together.
const FLUSH_DELAY: Duration = Duration::from_millis(20);
/// An idle dispatcher stops after this long.
const IDLE_AFTER: Duration = Duration::from_secs(60);
/// Bytes of a receiver's answer read (and dropped) so the connection can be reused.
const ANSWER_LIMIT: usize = 64 * 1024;

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
    fn lease(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(
            i64::try_from(self.settings.timeout_ms.saturating_mul(2)).unwrap_or(i64::MAX / 4)
                + 5_000,
        )
    }

    fn max_in_flight(&self) -> usize {
        usize::try_from(self.settings.max_in_flight_per_endpoint.max(1)).unwrap_or(16)
    }
}

// ---------------------------------------------------------------------------------------------
// Supervisor

/// Stops the webhook arbiter (and with it every dispatcher) when dropped.
pub struct ArbiterGuard(Option<Arbiter>);

impl Drop for ArbiterGuard {
    fn drop(&mut self) {
        if let Some(arbiter) = self.0.take() {
            arbiter.stop();
        }
    }
}

pub struct WebhookSupervisor {
    deps: WebhookDeps,
    client: Option<awc::Client>,
    dispatchers: HashMap<String, Addr<WebhookDispatcher>>,
    scanning: bool,
    again: bool,
}

impl WebhookSupervisor {
    pub fn new(deps: WebhookDeps) -> WebhookSupervisor {
        WebhookSupervisor {
            deps,
            client: None,
            dispatchers: HashMap::new(),
            scanning: false,
            again: false,
        }
    }

    /// Starts the supervisor on an arbiter (thread) of its own and has every commit that writes
    /// deliveries tell it. The arbiter stops when the returned guard is dropped.
    pub fn start_on_own_arbiter(deps: WebhookDeps) -> (Addr<WebhookSupervisor>, ArbiterGuard) {
        let db = deps.db.clone();
        let arbiter = Arbiter::new();
        let addr = WebhookSupervisor::start_in_arbiter(&arbiter.handle(), move |_| {
            WebhookSupervisor::new(deps)
        });
        let notify = addr.downgrade();
        db.on_deliveries_committed(move |endpoint_ids| {
            if let Some(addr) = notify.upgrade() {
                addr.counted_do_send(DeliveriesCommitted { endpoint_ids });
            }
        });
        (addr, ArbiterGuard(Some(arbiter)))
    }

    fn dispatcher(
        &mut self,
        endpoint_id: &str,
        ctx: &mut Context<Self>,
    ) -> Addr<WebhookDispatcher> {
        if let Some(addr) = self.dispatchers.get(endpoint_id)
            && addr.connected()
        {
            return addr.clone();
        }
        let client = self
            .client
            .get_or_insert_with(|| build_client(&self.deps.settings))
            .clone();
        let addr = WebhookDispatcher {
            endpoint_id: endpoint_id.to_owned(),
            deps: self.deps.clone(),
            client,
            supervisor: ctx.address(),
            endpoint: None,
            queue: VecDeque::new(),
            held: HashSet::new(),
            in_flight: 0,
            claiming: false,
            wake_again: false,
            drained: false,
            results: Vec::new(),
            flushing: false,
            flush_scheduled: false,
            timer: None,
            last_active: Instant::now(),
            gone: false,
        }
        .start();
        self.dispatchers
            .insert(endpoint_id.to_owned(), addr.clone());
        addr
    }

    /// Wakes the dispatcher of every endpoint with a due delivery (with `all`, every endpoint
    /// with a pending one, so their timers are armed after a restart).
    fn scan(&mut self, all: bool, ctx: &mut Context<Self>) {
        if self.scanning {
            self.again = true;
            return;
        }
        self.scanning = true;
        let db = self.deps.db.clone();
        let fut = async move {
            let mut select = webhook_delivery::Entity::find()
                .select_only()
                .column(webhook_delivery::Column::EndpointId)
                .distinct()
                .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending));
            if !all {
                select = select.filter(webhook_delivery::Column::NextAttemptAt.lte(time::now()));
            }
            select.into_tuple::<String>().all(&db.conn).await
        };
        ctx.spawn(fut.into_actor(self).map(|found, act, ctx| {
            act.scanning = false;
            match found {
                Ok(endpoints) => {
                    for endpoint_id in endpoints {
                        act.dispatcher(&endpoint_id, ctx).counted_do_send(Wake);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "webhook scan failed"),
            }
            if std::mem::take(&mut act.again) {
                act.scan(false, ctx);
            }
        }));
    }
}

impl Actor for WebhookSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        self.client = Some(build_client(&self.deps.settings));
        self.scan(true, ctx);
        ctx.run_interval(SCAN_INTERVAL, |act, ctx| act.scan(false, ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for WebhookSupervisor {
    const KIND: ActorKind = ActorKind::WebhookSupervisor;
}

/// New deliveries for these endpoints were committed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DeliveriesCommitted {
    pub endpoint_ids: Vec<String>,
}

impl Handler<DeliveriesCommitted> for WebhookSupervisor {
    type Result = ();

    fn handle(&mut self, msg: DeliveriesCommitted, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "DeliveriesCommitted");
        for endpoint_id in msg.endpoint_ids {
            self.dispatcher(&endpoint_id, ctx).counted_do_send(Wake);
        }
    }
}

/// Something changed for one endpoint (a delivery to retry now, a new secret, deletion).
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndpointChanged {
    pub endpoint_id: String,
}

impl Handler<EndpointChanged> for WebhookSupervisor {
    type Result = ();

    fn handle(&mut self, msg: EndpointChanged, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "EndpointChanged");
        self.dispatcher(&msg.endpoint_id, ctx)
            .counted_do_send(Reload);
    }
}

/// An idle dispatcher leaves.
#[derive(Message)]
#[rtype(result = "()")]
struct Retire {
    endpoint_id: String,
    addr: Addr<WebhookDispatcher>,
}

impl Handler<Retire> for WebhookSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Retire, _: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Retire");
        if self.dispatchers.get(&msg.endpoint_id) == Some(&msg.addr) {
            self.dispatchers.remove(&msg.endpoint_id);
        }
    }
}

/// The delivery client: no redirects, the attempt timeout, names resolved through the guard,
/// TLS by rustls with the webpki roots.
pub fn build_client(settings: &WebhookSettings) -> awc::Client {
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    let tcp = actix_tls::connect::Connector::new(actix_tls::connect::Resolver::custom(
        GuardedResolver(settings.policy()),
    ))
    .service();
    let mut connector = awc::Connector::new()
        .connector(tcp)
        .timeout(timeout)
        .limit(4096);
    if let Some(tls) = tls_config() {
        connector = connector.rustls_0_23(Arc::new(tls));
    }
    awc::Client::builder()
        .connector(connector)
        .disable_redirects()
        .timeout(timeout)
        .add_default_header((
            "user-agent",
            concat!("payroll-webhooks/", env!("CARGO_PKG_VERSION")),
        ))
        .finish()
}

/// rustls with the webpki roots, for webhooks and the exchange.
pub(crate) fn tls_config() -> Option<rustls::ClientConfig> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tracing::error!(error = %e, "TLS for webhooks is unavailable"))
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(config)
}

// ---------------------------------------------------------------------------------------------
// Dispatcher

/// One claimed delivery, ready to send.
struct Claimed {
    delivery_id: String,
    event_id: String,
    /// The number of this attempt (1-based).
    attempt: i32,
    retries_used: i32,
    manual: bool,
    body: Vec<u8>,
}

/// What an attempt came to.
struct Outcome {
    delivery_id: String,
    attempt: i32,
    retries_used: i32,
    manual: bool,
    started_at: DateTime<Utc>,
    duration_ms: i64,
    response_status: Option<u16>,
    error: Option<String>,
}

impl Outcome {
    fn succeeded(&self) -> bool {
        self.error.is_none()
            && self
                .response_status
                .is_some_and(|s| (200..300).contains(&s))
    }

    /// Whether recording this outcome disables the endpoint: a 410, or the last retry of a
    /// scheduled delivery failing.
    fn disables(&self, schedule: &[u64]) -> bool {
        !self.succeeded()
            && (self.response_status == Some(410)
                || (!self.manual
                    && usize::try_from(self.retries_used).is_ok_and(|used| used >= schedule.len())))
    }
}

/// The endpoint as the dispatcher sends to it.
#[derive(Clone)]
struct Target {
    url: Arc<str>,
    keys: Arc<Vec<Vec<u8>>>,
}

pub struct WebhookDispatcher {
    endpoint_id: String,
    deps: WebhookDeps,
    client: awc::Client,
    supervisor: Addr<WebhookSupervisor>,
    /// The endpoint as last loaded; `None` until a claim (re)loads it.
    endpoint: Option<Target>,
    queue: VecDeque<Claimed>,
    /// Deliveries this dispatcher holds (queued, in flight or not yet recorded): never
    /// claimed again while held, whatever their lease says.
    held: HashSet<String>,
    in_flight: usize,
    claiming: bool,
    /// A wake arrived while claiming: claim again after.
    wake_again: bool,
    /// The last claim found fewer due deliveries than it asked for: wait for a wake or timer.
    drained: bool,
    results: Vec<Outcome>,
    flushing: bool,
    flush_scheduled: bool,
    timer: Option<(SpawnHandle, DateTime<Utc>)>,
    last_active: Instant,
    /// The endpoint was deleted or disabled: nothing more is sent until a reload says otherwise.
    gone: bool,
}

impl Actor for WebhookDispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        ctx.run_interval(IDLE_AFTER / 2, |act, ctx| {
            let idle = act.in_flight == 0
                && act.queue.is_empty()
                && act.held.is_empty()
                && act.results.is_empty()
                && !act.claiming
                && !act.flushing
                && act.timer.is_none();
            if idle && (act.gone || act.last_active.elapsed() >= IDLE_AFTER) {
                act.retire(ctx);
            }
        });
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for WebhookDispatcher {
    const KIND: ActorKind = ActorKind::WebhookDispatcher;
}

/// Look for due deliveries now.
#[derive(Message)]
#[rtype(result = "()")]
struct Wake;

impl Handler<Wake> for WebhookDispatcher {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Wake");
        if self.claiming {
            self.wake_again = true;
        }
        self.drained = false;
        self.fill(ctx);
    }
}

/// The endpoint changed (deleted, disabled, enabled, new secret): reload it before sending
/// anything more.
#[derive(Message)]
#[rtype(result = "()")]
struct Reload;

impl Handler<Reload> for WebhookDispatcher {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Reload");
        self.endpoint = None;
        self.gone = false;
        self.drained = false;
        if self.claiming {
            self.wake_again = true;
        }
        self.fill(ctx);
    }
}

impl WebhookDispatcher {
    fn retire(&mut self, ctx: &mut Context<Self>) {
        self.supervisor.counted_do_send(Retire {
            endpoint_id: self.endpoint_id.clone(),
            addr: ctx.address(),
        });
        ctx.stop();
    }

    /// Drops what is queued: those deliveries stay claimed until their lease ends, and are then
    /// failed or sent by whoever claims them next.
    fn drop_queue(&mut self) {
        for claimed in self.queue.drain(..) {
            self.held.remove(&claimed.delivery_id);
        }
    }

    /// Starts queued attempts up to the limit, and claims more when the queue runs low.
    fn fill(&mut self, ctx: &mut Context<Self>) {
        if self.gone {
            return;
        }
        let max = self.deps.max_in_flight();
        if self.endpoint.is_some() {
            while self.in_flight < max {
                let Some(claimed) = self.queue.pop_front() else {
                    break;
                };
                self.start_attempt(claimed, ctx);
            }
        }
        if self.claiming {
            return;
        }
        if self.endpoint.is_none() {
            // Load the endpoint (and claim what room allows) before sending anything.
            let limit = (2 * max).saturating_sub(self.queue.len() + self.in_flight);
            self.claim(limit, ctx);
        } else if !self.drained && self.queue.len() <= max / 2 {
            let limit = (2 * max).saturating_sub(self.queue.len() + self.in_flight);
            if limit > 0 {
                self.claim(limit, ctx);
            }
        }
    }

    fn claim(&mut self, limit: usize, ctx: &mut Context<Self>) {
        self.claiming = true;
        self.wake_again = false;
        self.last_active = Instant::now();
        let deps = self.deps.clone();
        let endpoint_id = self.endpoint_id.clone();
        let held: Vec<String> = self.held.iter().cloned().collect();
        ctx.spawn(
            async move { claim_due(&deps, &endpoint_id, limit, held).await }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    act.claiming = false;
                    match result {
                        Ok(Claim::Gone) => {
                            act.gone = true;
                            act.endpoint = None;
                            act.drop_queue();
                        }
                        Ok(Claim::Due {
                            target,
                            claimed,
                            next_due,
                        }) => {
                            act.endpoint = Some(target);
                            act.drained =
                                claimed.len() < limit && !std::mem::take(&mut act.wake_again);
                            for c in &claimed {
                                act.held.insert(c.delivery_id.clone());
                            }
                            act.queue.extend(claimed);
                            if let Some(at) = next_due {
                                act.arm(at, ctx);
                            }
                            act.fill(ctx);
                        }
                        Err(e) => {
                            tracing::warn!(endpoint = %act.endpoint_id, error = %e, "claiming webhook deliveries failed");
                            act.drained = true;
                            act.arm(time::now() + chrono::Duration::seconds(5), ctx);
                        }
                    }
                }),
        );
    }

    /// Arms the timer for `at` unless it already fires earlier.
    fn arm(&mut self, at: DateTime<Utc>, ctx: &mut Context<Self>) {
        if let Some((handle, when)) = self.timer {
            if when <= at {
                return;
            }
            ctx.cancel_future(handle);
        }
        let delay = (at - time::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_secs(300))
            + Duration::from_millis(1);
        let handle = ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            act.drained = false;
            act.fill(ctx);
        });
        self.timer = Some((handle, at));
    }

    fn start_attempt(&mut self, claimed: Claimed, ctx: &mut Context<Self>) {
        let Some(target) = self.endpoint.clone() else {
            self.queue.push_front(claimed);
            return;
        };
        self.in_flight += 1;
        self.last_active = Instant::now();
        let client = self.client.clone();
        let policy = self.deps.settings.policy();
        let timeout = Duration::from_millis(self.deps.settings.timeout_ms.max(1));
        ctx.spawn(
            attempt(client, target, policy, timeout, claimed)
                .into_actor(self)
                .map(|outcome, act, ctx| {
                    act.in_flight = act.in_flight.saturating_sub(1);
                    let disables = outcome.disables(&act.deps.settings.retry_schedule_ms);
                    act.results.push(outcome);
                    if disables {
                        // The endpoint is about to be disabled: send nothing more to it.
                        act.gone = true;
                        act.drop_queue();
                        act.flush(ctx);
                    } else {
                        act.schedule_flush(ctx);
                    }
                    act.fill(ctx);
                }),
        );
    }

    fn schedule_flush(&mut self, ctx: &mut Context<Self>) {
        if self.results.len() >= FLUSH_BATCH {
            self.flush(ctx);
        } else if !self.flush_scheduled {
            self.flush_scheduled = true;
            ctx.run_later(FLUSH_DELAY, |act, ctx| {
                act.flush_scheduled = false;
                act.flush(ctx);
            });
        }
    }

    /// Records the outcomes gathered so far in one transaction.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.flushing || self.results.is_empty() {
            return;
        }
        self.flushing = true;
        let outcomes = std::mem::take(&mut self.results);
        let deps = self.deps.clone();
        let endpoint_id = self.endpoint_id.clone();
        ctx.spawn(
            async move {
                let result = record(&deps, &endpoint_id, &outcomes).await;
                (result, outcomes)
            }
            .into_actor(self)
            .map(|(result, outcomes), act, ctx| {
                act.flushing = false;
                match result {
                    Ok(recorded) => {
                        let succeeded = outcomes.iter().filter(|o| o.succeeded()).count() as u64;
                        telemetry::webhook_deliveries("succeeded", succeeded);
                        telemetry::webhook_deliveries(
                            "failed",
                            outcomes.len() as u64 - succeeded,
                        );
                        for o in &outcomes {
                            act.held.remove(&o.delivery_id);
                        }
                        if recorded.disabled {
                            telemetry::webhook_endpoint_disabled();
                            act.gone = true;
                            act.drop_queue();
                        }
                        if let Some(at) = recorded.next_retry {
                            act.arm(at, ctx);
                        }
                    }
                    // Kept and recorded again shortly; the deliveries stay held meanwhile.
                    Err(e) => {
                        tracing::error!(endpoint = %act.endpoint_id, error = %e, "recording webhook attempts failed; retrying");
                        let mut kept = outcomes;
                        kept.append(&mut act.results);
                        act.results = kept;
                        act.flush_scheduled = true;
                        ctx.run_later(Duration::from_secs(1), |act, ctx| {
                            act.flush_scheduled = false;
                            act.flush(ctx);
                        });
                        return;
                    }
                }
                if !act.results.is_empty() {
                    act.schedule_flush(ctx);
                }
                act.fill(ctx);
            }),
        );
    }
}

enum Claim {
    Gone,
    Due {
        target: Target,
        claimed: Vec<Claimed>,
        next_due: Option<DateTime<Utc>>,
    },
}

/// Disables an endpoint (if still ACTIVE), fails its pending deliveries and audits it, in `tx`.
async fn disable_endpoint(tx: &WriteTx, endpoint_id: &str, reason: &str) -> Result<bool, DbErr> {
    let now = time::now();
    let changed = webhook_endpoint::Entity::update_many()
        .col_expr(
            webhook_endpoint::Column::Status,
            Expr::value(WebhookStatus::Disabled.as_str()),
        )
        .col_expr(
            webhook_endpoint::Column::DisabledReason,
            Expr::value(reason),
        )
        .col_expr(webhook_endpoint::Column::DisabledAt, Expr::value(now))
        .col_expr(webhook_endpoint::Column::UpdatedAt, Expr::value(now))
        .filter(webhook_endpoint::Column::Id.eq(endpoint_id))
        .filter(webhook_endpoint::Column::Status.eq(WebhookStatus::Active))
        .exec(&**tx)
        .await?
        .rows_affected;
    if changed != 1 {
        return Ok(false);
    }
    let failed = fail_pending(&**tx, endpoint_id, &format!("endpoint disabled: {reason}")).await?;
    audit::insert(
        &**tx,
        system_entry(
            "WEBHOOK_DISABLED",
            "webhook_endpoint",
            endpoint_id,
            json!({"before": {"status": "ACTIVE"}, "after": {"status": "DISABLED"}, "disabled_reason": reason, "pending_deliveries_failed": failed}),
        ),
    )
    .await?;
    tracing::warn!(endpoint = %endpoint_id, %reason, "webhook endpoint disabled");
    Ok(true)
}

/// Loads the endpoint and claims up to `limit` due deliveries of it, none of `held`.
async fn claim_due(
    deps: &WebhookDeps,
    endpoint_id: &str,
    limit: usize,
    held: Vec<String>,
) -> Result<Claim, DbErr> {
    let db = &deps.db;
    let endpoint = webhook_endpoint::Entity::find_by_id(endpoint_id)
        .one(&db.conn)
        .await?;
    let endpoint = match endpoint {
        Some(e) if e.deleted_at.is_none() && e.status == WebhookStatus::Active => e,
        other => {
            let reason = match other {
                Some(e) if e.deleted_at.is_none() => format!(
                    "endpoint disabled: {}",
                    e.disabled_reason.as_deref().unwrap_or("disabled")
                ),
                _ => "endpoint deleted".to_owned(),
            };
            let tx = db.begin_write().await?;
            fail_pending(&*tx, endpoint_id, &reason).await?;
            tx.commit().await?;
            return Ok(Claim::Gone);
        }
    };
    let target = match target_of(deps, &endpoint) {
        Ok(target) => target,
        Err(e) => {
            tracing::error!(endpoint = %endpoint_id, error = %e, "webhook secret cannot be opened");
            let tx = db.begin_write().await?;
            disable_endpoint(
                &tx,
                endpoint_id,
                "its signing secret cannot be opened (was auth.key_pepper changed?); rotate the secret, then enable the endpoint",
            )
            .await?;
            tx.commit().await?;
            return Ok(Claim::Gone);
        }
    };
    let due = |now: DateTime<Utc>| {
        let mut select = webhook_delivery::Entity::find()
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending))
            .filter(webhook_delivery::Column::NextAttemptAt.lte(now));
        if !held.is_empty() {
            select = select.filter(webhook_delivery::Column::Id.is_not_in(held.clone()));
        }
        select
    };
    // A read first, so an endpoint with nothing due never takes the write lock.
    let any_due = limit > 0
        && due(time::now())
            .select_only()
            .column(webhook_delivery::Column::Id)
            .limit(1)
            .into_tuple::<String>()
            .one(&db.conn)
            .await?
            .is_some();
    let mut claimed = Vec::new();
    if any_due {
        let tx = db.begin_write().await?;
        // The clock is read once the lock is held, so waiting for it never eats the lease.
        let now = time::now();
        // Retries first, so a backlog of first attempts never pushes a retry past its time;
        // each query walks the claim index in due order.
        let postgres = db.backend() == DatabaseBackend::Postgres;
        let mut rows = Vec::new();
        for retries in [true, false] {
            let room = limit.saturating_sub(rows.len());
            if room == 0 {
                break;
            }
            let mut select = due(now);
            select = if retries {
                select.filter(webhook_delivery::Column::AttemptCount.gt(0))
            } else {
                select.filter(webhook_delivery::Column::AttemptCount.eq(0))
            };
            let mut select = select
                .order_by_asc(webhook_delivery::Column::NextAttemptAt)
                .order_by_asc(webhook_delivery::Column::Id)
                .limit(u64::try_from(room).unwrap_or(64));
            if postgres {
                select = select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
            }
            rows.extend(select.all(&*tx).await?);
        }
        if !rows.is_empty() {
            let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
            webhook_delivery::Entity::update_many()
                .col_expr(
                    webhook_delivery::Column::NextAttemptAt,
                    Expr::value(now + deps.lease()),
                )
                .filter(webhook_delivery::Column::Id.is_in(ids))
                .exec(&*tx)
                .await?;
            let event_ids: Vec<String> = rows.iter().map(|r| r.event_id.clone()).collect();
            let events: HashMap<String, event::Model> = event::Entity::find()
                .filter(event::Column::Id.is_in(event_ids))
                .all(&*tx)
                .await?
                .into_iter()
                .map(|e| (e.id.clone(), e))
                .collect();
            for row in rows {
                let body = match events.get(&row.event_id) {
                    Some(e) => serde_json::to_vec(&EventResource::from(e.clone()))
                        .map_err(|e| DbErr::Custom(e.to_string()))?,
                    None => {
                        // An event row never goes away; a delivery without one cannot be sent.
                        fail_deliveries(
                            &*tx,
                            Condition::all().add(webhook_delivery::Column::Id.eq(row.id.as_str())),
                            "the event no longer exists",
                        )
                        .await?;
                        continue;
                    }
                };
                claimed.push(Claimed {
                    delivery_id: row.id,
                    event_id: row.event_id,
                    attempt: row.attempt_count + 1,
                    retries_used: row.retries_used,
                    manual: row.manual,
                    body,
                });
            }
        }
        tx.commit().await?;
    }
    // The earliest due time, asked of first attempts and retries apart so each walks the
    // claim index instead of every pending row.
    let mut next_due: Option<DateTime<Utc>> = None;
    for retries in [true, false] {
        let select = webhook_delivery::Entity::find()
            .select_only()
            .column_as(webhook_delivery::Column::NextAttemptAt.min(), "next")
            .filter(webhook_delivery::Column::EndpointId.eq(endpoint_id))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending));
        let select = if retries {
            select.filter(webhook_delivery::Column::AttemptCount.gt(0))
        } else {
            select.filter(webhook_delivery::Column::AttemptCount.eq(0))
        };
        let at = select
            .into_tuple::<Option<DateTime<Utc>>>()
            .one(&db.conn)
            .await?
            .flatten();
        next_due = match (next_due, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(Claim::Due {
        target,
        claimed,
        next_due,
    })
}

/// The keys that sign now: the current secret, and the previous one within its grace (skipped
/// with a warning if it cannot be opened).
fn target_of(deps: &WebhookDeps, endpoint: &webhook_endpoint::Model) -> Result<Target, DbErr> {
    let open = |sealed: &str| -> Result<Vec<u8>, DbErr> {
        let secret = deps
            .secrets
            .open(sealed)
            .map_err(|e| DbErr::Custom(e.to_string()))?;
        secret_key(&secret)
            .ok_or_else(|| DbErr::Custom("a stored webhook secret is malformed".into()))
    };
    let mut keys = vec![open(&endpoint.secret)?];
    if let (Some(previous), Some(until)) = (
        &endpoint.previous_secret,
        endpoint.previous_secret_expires_at,
    ) && until > time::now()
    {
        match open(previous) {
            Ok(key) => keys.push(key),
            Err(e) => {
                tracing::warn!(endpoint = %endpoint.id, error = %e, "the previous webhook secret cannot be opened; signing with the current one only")
            }
        }
    }
    Ok(Target {
        url: Arc::from(endpoint.url.as_str()),
        keys: Arc::new(keys),
    })
}

/// One attempt: guard, sign, POST, read the answer, all within the timeout.
async fn attempt(
    client: awc::Client,
    target: Target,
    policy: GuardPolicy,
    timeout: Duration,
    claimed: Claimed,
) -> Outcome {
    let started_at = time::now();
    let clock = Instant::now();
    let (response_status, error) = send(&client, &target, policy, timeout, &claimed).await;
    Outcome {
        delivery_id: claimed.delivery_id,
        attempt: claimed.attempt,
        retries_used: claimed.retries_used,
        manual: claimed.manual,
        started_at,
        duration_ms: i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX),
        response_status,
        error,
    }
}

async fn send(
    client: &awc::Client,
    target: &Target,
    policy: GuardPolicy,
    timeout: Duration,
    claimed: &Claimed,
) -> (Option<u16>, Option<String>) {
    let url = match policy.check_url(&target.url) {
        Ok(url) => url,
        Err(refused) => return (None, Some(format!("refused: {refused}"))),
    };
    if let Some(ip) = literal_ip(&url)
        && let Err(refused) = policy.check_ip(ip)
    {
        return (None, Some(format!("refused: {refused}")));
    }
    let timestamp = time::now().timestamp();
    let signature = signature_header(&target.keys, &claimed.event_id, timestamp, &claimed.body);
    let request = client
        .post(url.as_str())
        .insert_header(("content-type", "application/json"))
        .insert_header(("webhook-id", claimed.event_id.as_str()))
        .insert_header(("webhook-timestamp", timestamp.to_string()))
        .insert_header(("webhook-signature", signature.as_str()))
        .insert_header(("x-webhook-signature", signature.as_str()));
    let body = claimed.body.clone();
    let exchange = async move {
        let mut response = request.send_body(body).await.map_err(|e| match e {
            awc::error::SendRequestError::Timeout => timed_out(timeout),
            other => other.to_string(),
        })?;
        let status = response.status().as_u16();
        // The answer's body is read only so the connection can be reused.
        let _ = response.body().limit(ANSWER_LIMIT).await;
        Ok::<u16, String>(status)
    };
    match actix_rt::time::timeout(timeout, exchange).await {
        Err(_) => (None, Some(timed_out(timeout))),
        Ok(Err(e)) => (None, Some(e)),
        Ok(Ok(status)) if (200..300).contains(&status) => (Some(status), None),
        Ok(Ok(status)) if (300..400).contains(&status) => (
            Some(status),
            Some(format!("HTTP {status}: redirects are not followed")),
        ),
        Ok(Ok(status)) => (Some(status), Some(format!("HTTP {status}"))),
    }
}

fn timed_out(timeout: Duration) -> String {
    format!("no answer within {} ms", timeout.as_millis())
}

struct Recorded {
    disabled: bool,
    next_retry: Option<DateTime<Utc>>,
}

/// Records outcomes: attempts, successes, failures with their next retry or their end, and
/// the endpoint disabled when a delivery ran out of retries or got a 410. Each delivery update
/// holds only if the delivery is still at the attempt this outcome belongs to, so a stale or
/// repeated outcome changes nothing.
async fn record(
    deps: &WebhookDeps,
    endpoint_id: &str,
    outcomes: &[Outcome],
) -> Result<Recorded, DbErr> {
    let schedule = &deps.settings.retry_schedule_ms;
    let tx = deps.db.begin_write().await?;
    let now = time::now();
    if deps.db.backend() == DatabaseBackend::Postgres
        && outcomes.iter().any(|o| o.disables(schedule))
    {
        // The endpoint row first, as every disabling transaction takes it: no lock cycle with
        // another instance disabling the same endpoint.
        webhook_endpoint::Entity::find_by_id(endpoint_id)
            .lock_exclusive()
            .one(&*tx)
            .await?;
    }
    for chunk in outcomes.chunks(500) {
        let rows: Vec<webhook_attempt::ActiveModel> = chunk
            .iter()
            .map(|o| {
                webhook_attempt::Model {
                    delivery_id: o.delivery_id.clone(),
                    attempt: o.attempt,
                    started_at: o.started_at,
                    response_status: o.response_status.map(i32::from),
                    duration_ms: o.duration_ms,
                    error: o.error.clone(),
                }
                .into_active_model()
            })
            .collect();
        webhook_attempt::Entity::insert_many(rows)
            .on_conflict(
                OnConflict::columns([
                    webhook_attempt::Column::DeliveryId,
                    webhook_attempt::Column::Attempt,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(&*tx)
            .await?;
    }
    // Successes, one statement per attempt number (nearly always just 1).
    let mut succeeded: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.succeeded()) {
        succeeded
            .entry(o.attempt)
            .or_default()
            .push(o.delivery_id.clone());
    }
    for (attempt, ids) in succeeded {
        for chunk in ids.chunks(500) {
            webhook_delivery::Entity::update_many()
                .col_expr(
                    webhook_delivery::Column::Status,
                    Expr::value(DeliveryStatus::Succeeded.as_str()),
                )
                .col_expr(webhook_delivery::Column::AttemptCount, Expr::value(attempt))
                .col_expr(
                    webhook_delivery::Column::NextAttemptAt,
                    Expr::value(Option::<DateTime<Utc>>::None),
                )
                .col_expr(
                    webhook_delivery::Column::LastError,
                    Expr::value(Option::<String>::None),
                )
                .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now))
                .col_expr(webhook_delivery::Column::CompletedAt, Expr::value(now))
                .filter(webhook_delivery::Column::Id.is_in(chunk.to_vec()))
                .filter(webhook_delivery::Column::AttemptCount.eq(attempt - 1))
                .exec(&*tx)
                .await?;
        }
    }
    let mut disable: Option<String> = None;
    let mut next_retry: Option<DateTime<Utc>> = None;
    for o in outcomes.iter().filter(|o| !o.succeeded()) {
        let error = o.error.clone().unwrap_or_else(|| "failed".to_owned());
        let gone = o.response_status == Some(410);
        let decision = if gone {
            AfterFailure::GiveUp
        } else {
            after_failure(schedule, o.retries_used, o.manual)
        };
        let mut update = webhook_delivery::Entity::update_many()
            .col_expr(
                webhook_delivery::Column::AttemptCount,
                Expr::value(o.attempt),
            )
            .col_expr(
                webhook_delivery::Column::LastError,
                Expr::value(error.clone()),
            )
            .col_expr(webhook_delivery::Column::UpdatedAt, Expr::value(now));
        let mut retry_at = None;
        match decision {
            AfterFailure::RetryIn { delay_ms, retry } => {
                let at = now
                    + chrono::Duration::milliseconds(
                        i64::try_from(delay_ms).unwrap_or(i64::MAX / 4),
                    );
                retry_at = Some(at);
                update = update
                    .col_expr(webhook_delivery::Column::RetriesUsed, Expr::value(retry))
                    .col_expr(webhook_delivery::Column::NextAttemptAt, Expr::value(at));
            }
            AfterFailure::GiveUp => {
                update = update
                    .col_expr(
                        webhook_delivery::Column::Status,
                        Expr::value(DeliveryStatus::Failed.as_str()),
                    )
                    .col_expr(
                        webhook_delivery::Column::NextAttemptAt,
                        Expr::value(Option::<DateTime<Utc>>::None),
                    )
                    .col_expr(webhook_delivery::Column::CompletedAt, Expr::value(now));
            }
        }
        let changed = update
            .filter(webhook_delivery::Column::Id.eq(o.delivery_id.as_str()))
            .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending))
            .filter(webhook_delivery::Column::AttemptCount.eq(o.attempt - 1))
            .exec(&*tx)
            .await?
            .rows_affected;
        if changed != 1 {
            // Stale: this delivery moved on (failed with its endpoint, or retried by hand).
            continue;
        }
        if let Some(at) = retry_at {
            next_retry = Some(next_retry.map_or(at, |n| n.min(at)));
        } else if gone {
            disable = Some(format!(
                "the receiver answered 410 Gone to delivery {}",
                o.delivery_id
            ));
        } else if !o.manual && disable.is_none() {
            disable = Some(format!(
                "delivery {} failed {} attempts; last error: {error}",
                o.delivery_id, o.attempt
            ));
        }
    }
    let disabled = match disable {
        Some(reason) => disable_endpoint(&tx, endpoint_id, &reason).await?,
        None => false,
    };
    tx.commit().await?;
    Ok(Recorded {
        disabled,
        next_retry,
    })
}
