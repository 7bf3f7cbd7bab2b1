//! One endpoint's webhook dispatcher (CONTRACT §10): it claims the endpoint's due deliveries
//! (pushing `next_attempt_at` out by a lease, so a crash makes them due again), runs at most
//! `webhooks.max_in_flight_per_endpoint` attempts at once, records outcomes in batches, and
//! arms its timer for the next retry only after that retry's time is committed.

use std::{
    collections::{HashSet, VecDeque},
    time::{Duration, Instant},
};

use actix::prelude::*;

use crate::runtime::InRuntime;
use chrono::{DateTime, Utc};
use payroll_entities::time;

use super::{
    http::{Claimed, Outcome, Target, attempt},
    settings::WebhookDeps,
    store,
};
use crate::outage::Outage;
use crate::telemetry::{self, ActorKind, Handling, Observed};

/// Outcomes recorded per transaction at most.
const FLUSH_BATCH: usize = 256;
/// How long outcomes wait to be recorded together.
const FLUSH_DELAY: Duration = Duration::from_millis(20);
/// An idle dispatcher stops after this long.
const IDLE_AFTER: Duration = Duration::from_secs(60);

/// An idle dispatcher leaves; its supervisor forgets it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retire {
    pub endpoint_id: String,
    pub addr: Addr<WebhookDispatcher>,
}

pub struct WebhookDispatcher {
    endpoint_id: String,
    deps: WebhookDeps,
    client: awc::Client,
    supervisor: Recipient<Retire>,
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
    /// Claims and records that failed on the database: logged once an outage.
    outage: Outage,
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
pub struct Wake;

impl Handler<Wake> for WebhookDispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(endpoint_id = %self.endpoint_id))]
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
pub struct Reload;

impl Handler<Reload> for WebhookDispatcher {
    type Result = ();

    #[tracing::instrument(skip_all, fields(endpoint_id = %self.endpoint_id))]
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
    pub fn new(
        endpoint_id: String,
        deps: WebhookDeps,
        client: awc::Client,
        supervisor: Recipient<Retire>,
    ) -> WebhookDispatcher {
        WebhookDispatcher {
            endpoint_id,
            deps,
            client,
            supervisor,
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
            outage: Outage::new("webhook deliveries could not be claimed or recorded"),
        }
    }

    fn retire(&mut self, ctx: &mut Context<Self>) {
        // Counted as `counted_do_send` counts, which a recipient does not offer.
        if self.supervisor.connected() {
            telemetry::enqueued(ActorKind::WebhookSupervisor);
        }
        self.supervisor.do_send(Retire {
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
            async move { store::claim_due(&deps, &endpoint_id, limit, held).await }
                .in_runtime()
                .into_actor(self)
                .map(move |result, act, ctx| {
                    act.claiming = false;
                    match result {
                        Ok(store::Claim::Gone) => {
                            act.gone = true;
                            act.endpoint = None;
                            act.drop_queue();
                        }
                        Ok(store::Claim::Due {
                            target,
                            claimed,
                            next_due,
                        }) => {
                            act.outage.succeeded();
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
                            act.outage
                                .failed(&format!("endpoint {}: claim: {e}", act.endpoint_id));
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
                .in_runtime()
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
                let result = store::record(&deps, &endpoint_id, &outcomes).await;
                (result, outcomes)
            }
            .in_runtime()
            .into_actor(self)
            .map(|(result, outcomes), act, ctx| {
                act.flushing = false;
                match result {
                    Ok(recorded) => {
                        act.outage.succeeded();
                        let succeeded = outcomes.iter().filter(|o| o.succeeded()).count() as u64;
                        telemetry::webhook_deliveries("succeeded", succeeded);
                        telemetry::webhook_deliveries("failed", outcomes.len() as u64 - succeeded);
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
                        act.outage
                            .failed(&format!("endpoint {}: record: {e}", act.endpoint_id));
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
