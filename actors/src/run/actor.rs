//! The `RunActor`: one per live run, supervised. It alone changes its run and payouts. Every
//! step (a client's command, the exchange's answers, a poll, the funds watch) runs to its
//! commit before the next starts, and acts on the outside world only after its commit. Beside
//! the steps run what changes no counter of the run: look-ups at the exchange (their results
//! are applied as steps) and the claim of the next window of client ids (`claiming`). After an
//! error it stops; its supervisor restarts it from the database snapshot, which resumes the run:
//! withdrawals whose outcome is unknown are looked up by client id before anything is re-sent.

use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;

use crate::runtime::InRuntime;
use payroll_entities::RunStatus;
use tracing::Instrument as _;

use super::{
    commands, completion,
    deps::RunDeps,
    funds, lease,
    messages::{RunCommand, RunError, RunReply, RunRequest},
    settlement::{self, Recorded},
    store::{self, Snapshot},
};
use crate::{
    exchange::actor::WithdrawalResults,
    outage::Outage,
    telemetry::{self, ActorKind, Handling, Observed},
};

mod claiming;
mod following;
mod loading;

/// Tells the manager that an actor is going away; the manager forgets that actor (and only
/// that one) before it stops, so its supervisor does not bring it back.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retire {
    pub run_id: String,
    pub addr: Addr<RunActor>,
}

pub struct RunActor {
    run_id: String,
    deps: Arc<RunDeps>,
    manager: Recipient<Retire>,
    snapshot: Option<Snapshot>,
    /// Client ids handed to the exchange actor and not yet answered.
    in_flight: HashSet<String>,
    /// Client ids to look up at the exchange, by when; each id at most once.
    watch: VecDeque<(Instant, Vec<String>)>,
    watching: HashSet<String>,
    /// A look-up at the exchange is under way (beside the run's steps, never blocking them).
    looking_up: bool,
    /// A claim of the next window is under way (beside the run's steps); it stays so across a
    /// restart until its answer comes.
    claiming: bool,
    /// Told when the claim under way is over.
    claim_over: Arc<tokio::sync::Notify>,
    /// Since when none is left to claim: the last claim read the run from its start and found
    /// fewer payouts than it had room for. None is looked for until something gives the run
    /// new ones: a command, a reload (also when another instance changed the run, which the
    /// heartbeat watches for meanwhile), or [`RESCAN_EVERY`] passing.
    exhausted: Option<Instant>,
    /// The last payout id the last claim read: the next claim reads onward from it, and from
    /// the run's start once a claim comes back short (`window::Claim::run_exhausted`).
    /// Forgotten on whatever may give the run payouts to claim before it (a command, a reload).
    claim_from: Option<String>,
    /// Since when the exchange has given no clear answer to this run's sends and look-ups.
    unreachable_since: Option<Instant>,
    last_used: Instant,
    last_funds_watch: Instant,
    last_stuck_check: Instant,
    /// Whether this instance holds the run's lease: only then does the actor work the run on
    /// its own (withdrawals, lookups, the funds watch). Client commands work either way.
    owns: bool,
    last_heartbeat: Instant,
    /// Shutting down: record what comes back, start nothing.
    paused: bool,
    /// Retired: if its supervisor restarts it (an address was still held), it stays inert;
    /// the manager starts a new actor for the run when one is needed.
    retired: bool,
    /// The run is not in the database (loaded and not found): requests answer 404.
    gone: bool,
    /// Why the last load failed (the database away): requests answer it (503) while the
    /// actor tries again, never 404 for a run that exists.
    load_error: Option<RunError>,
    /// Loads, steps and heartbeats that failed on the database: logged once an outage.
    outage: Outage,
}

/// How long a paying run with nothing left to claim goes before its payouts are read again
/// from the start all the same (what gives a run payouts to claim also reloads it, or changes
/// its version, which the heartbeat watches).
const RESCAN_EVERY: Duration = Duration::from_secs(60);

impl RunActor {
    pub fn new(run_id: String, deps: Arc<RunDeps>, manager: Recipient<Retire>) -> RunActor {
        let now = Instant::now();
        RunActor {
            run_id,
            deps,
            manager,
            snapshot: None,
            in_flight: HashSet::new(),
            watch: VecDeque::new(),
            watching: HashSet::new(),
            looking_up: false,
            claiming: false,
            claim_over: Default::default(),
            exhausted: None,
            claim_from: None,
            unreachable_since: None,
            last_used: now,
            last_funds_watch: now,
            last_stuck_check: now,
            owns: false,
            last_heartbeat: now,
            paused: false,
            retired: false,
            gone: false,
            load_error: None,
            outage: Outage::new("the run's work failed on the database"),
        }
    }

    /// The span of this run's work: whatever it logs carries the run id.
    fn span(&self) -> tracing::Span {
        tracing::info_span!("run", run_id = %self.run_id)
    }

    fn status(&self) -> Option<RunStatus> {
        self.snapshot.as_ref().map(|s| s.run.status)
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.deps.runs.poll_interval_ms.max(10))
    }

    fn watch_at(&mut self, due: Instant, ids: Vec<String>) {
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|id| self.watching.insert(id.clone()))
            .collect();
        if ids.is_empty() {
            return;
        }
        let batch = self.lookup_batch();
        for chunk in ids.chunks(batch) {
            self.watch.push_back((due, chunk.to_vec()));
        }
    }

    /// After every committed step: finish the run if every payout is terminal, else keep the
    /// withdrawal window full.
    fn after_change(&mut self, ctx: &mut Context<Self>) {
        if !self.owns || self.paused {
            return;
        }
        let Some(snapshot) = &self.snapshot else {
            return;
        };
        if snapshot.run.status != RunStatus::PayingOut {
            return;
        }
        if snapshot.run.pending_count == 0 && snapshot.run.processing_count == 0 {
            // Nothing left to send or follow (after a restart, or the last payout cancelled).
            self.step(ctx, |_, snapshot| async move {
                Ok((snapshot, Recorded::default()))
            });
        } else {
            self.fill_window(ctx);
        }
    }

    /// Runs one internal step on the snapshot as it stands when the step starts, then finishes
    /// the run if every payout is terminal.
    fn step<F, Fut>(&mut self, ctx: &mut Context<Self>, work: F)
    where
        F: FnOnce(Arc<RunDeps>, Snapshot) -> Fut + 'static,
        Fut: std::future::Future<Output = Result<(Snapshot, Recorded), RunError>> + 'static,
    {
        if self.snapshot.is_none() {
            return;
        }
        let deps = self.deps.clone();
        ctx.wait(
            actix::fut::ready(())
                .then(move |_, act: &mut Self, _| {
                    let snapshot = act.snapshot.clone();
                    async move {
                        let snapshot = snapshot.ok_or(RunError::NotFound)?;
                        let (snapshot, recorded) = work(deps.clone(), snapshot).await?;
                        let (snapshot, finished) =
                            completion::finish_if_done(&deps, snapshot).await?;
                        Ok::<_, RunError>((snapshot, recorded, finished))
                    }
                    .instrument(act.span())
                    .in_runtime().into_actor(act)
                })
                .map(|result, act, ctx| match result {
                    Ok((snapshot, recorded, finished)) => {
                        act.snapshot = Some(snapshot);
                        act.follow(ctx, recorded);
                        if finished {
                            act.watch.clear();
                            act.watching.clear();
                            tracing::info!(run_id = %act.run_id, status = ?act.status(), "run finished");
                        }
                        act.after_change(ctx);
                    }
                    Err(err) => act.fail(ctx, err),
                }),
        );
    }

    /// Every tick of a run with work of its own: the holder of a CONFIRMED run, or of a paying
    /// run with nothing left to claim, checks that nobody else changed it (another instance
    /// may carry out a client's command on it, a retry), and
    /// every holder checks it still holds its lease
    /// three times per lease; any other instance tries to take the lease. Taking a run over,
    /// or finding it changed, reloads it; a run without work of its own gives its lease up.
    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let Some(snapshot) = &self.snapshot else {
            return;
        };
        let working = lease::WORKING.contains(&snapshot.run.status);
        if !working && !self.owns {
            return;
        }
        let version = snapshot.run.version;
        let now = Instant::now();
        // The holder checks its lease three times per lease (the manager renews it); any other
        // instance tries to take it every tick.
        let check = self.owns
            && working
            && now.duration_since(self.last_heartbeat) >= self.deps.lease.heartbeat();
        if check {
            self.last_heartbeat = now;
        }
        let owned = self.owns;
        // A CONFIRMED run's holder may write nothing for a while (until its funds watch), and
        // so may a paying run's with nothing left to claim, so each looks for changes made
        // elsewhere (a retry there gives the run payouts to claim); a paying run's next write
        // finds them otherwise (a stale version fails, and the actor reloads).
        let watch_version = self.owns
            && (snapshot.run.status == RunStatus::Confirmed
                || (snapshot.run.status == RunStatus::PayingOut && self.exhausted.is_some()));
        if owned && working && !check && !watch_version {
            return;
        }
        let deps = self.deps.clone();
        let run_id = self.run_id.clone();
        ctx.wait(
            async move {
                let changed = watch_version
                    && store::stored_version(&deps.db, &run_id).await? != Some(version);
                let held = if !working {
                    lease::release(&deps.db, &deps.lease, &run_id).await?;
                    false
                } else if !owned {
                    lease::acquire(&deps.db, &deps.lease, &run_id).await?
                } else if check {
                    lease::holds(&deps.db.conn, &deps.lease, &run_id).await?
                } else {
                    true
                };
                Ok::<_, sea_orm::DbErr>((held, changed))
            }
            .instrument(self.span())
            .in_runtime().into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok((held, changed)) => {
                    if !held && act.owns && working {
                        tracing::warn!(run_id = %act.run_id, "the run's lease was lost; another instance works it");
                        act.watch.clear();
                        act.watching.clear();
                    }
                    let took = held && !act.owns;
                    act.owns = held;
                    if took || changed {
                        tracing::info!(run_id = %act.run_id, took, changed, "reloading the run");
                        act.load(ctx);
                    }
                }
                // The database may be away for a moment: keep the lease as it stands (it
                // expires on its own if this lasts).
                Err(err) => {
                    act.outage.failed(&format!("run {}: lease heartbeat: {err}", act.run_id));
                }
            }),
        );
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.paused {
            return;
        }
        self.heartbeat(ctx);
        let now = Instant::now();
        if !self.owns {
            // Another instance works this run (or nobody needs to): stay only while clients
            // use it.
            let idle = Duration::from_millis(self.deps.runs.idle_actor_timeout_ms);
            if now.duration_since(self.last_used) >= idle {
                self.retire(ctx);
            }
            return;
        }
        match self.status() {
            Some(RunStatus::PayingOut) => {
                if self
                    .exhausted
                    .is_some_and(|since| now.duration_since(since) >= RESCAN_EVERY)
                {
                    self.exhausted = None;
                    self.claim_from = None;
                }
                self.look_up_due(ctx, now);
                self.after_change(ctx);
                if now.duration_since(self.last_stuck_check) >= Duration::from_secs(60) {
                    self.last_stuck_check = now;
                    self.step(ctx, |deps, snapshot| async move {
                        settlement::mark_processing_stuck(&deps, snapshot).await
                    });
                }
            }
            Some(RunStatus::Confirmed) => {
                let every = Duration::from_millis(self.deps.runs.funds_watch_interval_ms.max(10));
                if now.duration_since(self.last_funds_watch) >= every {
                    self.last_funds_watch = now;
                    self.watch_funds(ctx);
                }
            }
            _ => {
                let idle = Duration::from_millis(self.deps.runs.idle_actor_timeout_ms);
                if now.duration_since(self.last_used) >= idle {
                    self.retire(ctx);
                }
            }
        }
    }

    fn watch_funds(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        ctx.wait(
            actix::fut::ready(())
                .then(move |_, act: &mut Self, _| {
                    let snapshot = act.snapshot.clone();
                    async move {
                        match snapshot {
                            Some(s) => funds::watch_funds(&deps, s).await.map(Some),
                            None => Ok(None),
                        }
                    }
                    .instrument(act.span())
                    .in_runtime()
                    .into_actor(act)
                })
                .map(|result, act, _| match result {
                    Ok(Some(snapshot)) => act.snapshot = Some(snapshot),
                    Ok(None) => {}
                    // The exchange may be away for a while; the next tick tries again.
                    Err(err) => {
                        tracing::warn!(run_id = %act.run_id, error = %err, "funds watch failed")
                    }
                }),
        );
    }

    /// An error mid-step: stop, so the supervisor restarts the actor from the database. What
    /// a step committed is there; what it did not (a commit whose outcome is unknown counts as
    /// not known) is found again: unknown withdrawals are looked up before anything is sent.
    fn fail(&mut self, ctx: &mut Context<Self>, err: RunError) {
        if err.fault().is_some() {
            self.outage.failed(&format!(
                "run {}: step failed, reloading: {err}",
                self.run_id
            ));
        } else {
            tracing::warn!(run_id = %self.run_id, error = %err, "run step failed; reloading from the database");
        }
        ctx.stop();
    }

    fn retire(&mut self, ctx: &mut Context<Self>) {
        // Never with withdrawals out: their answers come to this address.
        if !self.in_flight.is_empty() || self.retired {
            return;
        }
        self.retired = true;
        let retire = Retire {
            run_id: self.run_id.clone(),
            addr: ctx.address(),
        };
        // Counted as `counted_send` counts, which a recipient does not offer.
        if self.manager.connected() {
            telemetry::enqueued(ActorKind::RunManager);
        }
        ctx.wait(
            self.manager
                .send(retire)
                .in_runtime()
                .into_actor(self)
                .map(|_, _, ctx| ctx.stop()),
        );
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::actor_started(Self::KIND);
        if self.retired {
            return;
        }
        self.load(ctx);
        ctx.run_interval(self.poll_interval(), |act, ctx| act.tick(ctx));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for RunActor {
    const KIND: ActorKind = ActorKind::RunActor;
}

impl Supervised for RunActor {
    /// Reloads from the database. Withdrawals already handed to the exchange actor stay in
    /// flight: their answers still come to this address.
    fn restarting(&mut self, _: &mut Context<Self>) {
        telemetry::actor_restarted(Self::KIND);
        self.snapshot = None;
        self.owns = false;
        self.watch.clear();
        self.watching.clear();
        // A look-up under way was dropped with the actor's futures. A claim under way is a
        // task of its own and still answers (`Claimed`, to this address): it stays the claim
        // under way, so no second one starts beside it and `Quiesce` waits for it.
        self.looking_up = false;
        self.exhausted = None;
        self.claim_from = None;
    }
}

impl Handler<RunRequest> for RunActor {
    type Result = AtomicResponse<Self, Result<RunReply, RunError>>;

    fn handle(&mut self, msg: RunRequest, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "RunRequest");
        self.last_used = Instant::now();
        let request_id = msg.ack.audit.request_id.clone();
        let deps = self.deps.clone();
        AtomicResponse::new(Box::pin(
            actix::fut::ready(())
                .then(move |_, act: &mut Self, _| {
                    let snapshot = act.snapshot.clone();
                    let owned = act.owns;
                    let paused = act.paused;
                    let unloaded = act.unloaded();
                    async move {
                        let mut snapshot = snapshot.ok_or(unloaded)?;
                        let mut recorded = Recorded::default();
                        // Only the lease holder follows the run's withdrawals; elsewhere a sync
                        // answers the run as stored.
                        if matches!(msg.command, RunCommand::Sync)
                            && owned
                            && snapshot.run.status == RunStatus::PayingOut
                        {
                            // Sync: one reconciliation pass with the exchange, then the run
                            // as it stands.
                            let ids = store::unsettled_client_ids(&deps.db, &snapshot.run.id)
                                .await?;
                            let (next, rec) = settlement::reconcile(&deps, snapshot, ids).await?;
                            let (next, _) = completion::finish_if_done(&deps, next).await?;
                            snapshot = next;
                            recorded = rec;
                        }
                        let done = commands::handle(&deps, snapshot, msg).await?;
                        // The instance that gives a run work of its own (confirm, execute)
                        // takes its lease and works it, unless another instance holds it.
                        let took = !owned
                            && !paused
                            && lease::WORKING.contains(&done.snapshot.run.status)
                            && lease::acquire(&deps.db, &deps.lease, &done.snapshot.run.id)
                                .await
                                .unwrap_or(false);
                        Ok::<_, RunError>((done, recorded, took))
                    }
                    .instrument(tracing::info_span!("run", run_id = %act.run_id, request_id = request_id.as_deref().unwrap_or("")))
                    .in_runtime().into_actor(act)
                })
                .map(move |result, act, ctx| {
                    let _handling = handling;
                    match result {
                        Ok((done, recorded, took)) => {
                            act.snapshot = Some(done.snapshot);
                            // A command may give the run payouts to claim (a retry).
                            act.exhausted = None;
                            act.claim_from = None;
                            if took {
                                // Reload as the holder: whatever another instance left
                                // unsettled is looked up before anything is sent.
                                act.load(ctx);
                            }
                            if done.mail {
                                act.deps.nudge_mailer();
                            }
                            // Only the lease holder sends or follows withdrawals.
                            if act.owns {
                                act.follow(ctx, recorded);
                            }
                            act.after_change(ctx);
                            Ok(done.reply)
                        }
                        Err(RunError::Superseded(answer)) => {
                            // Judged against the run as stored: this actor's copy is old.
                            act.load(ctx);
                            Err(RunError::Superseded(answer))
                        }
                        Err(err) => {
                            // A refusal changes nothing; a failure part-way (a sync reconciles
                            // before it answers) may have committed something, so reload.
                            if act.snapshot.is_some()
                                && matches!(
                                    err,
                                    RunError::Stale
                                        | RunError::Db(_)
                                        | RunError::Database(..)
                                        | RunError::Unavailable(_)
                                        | RunError::Exchange(_)
                                        | RunError::ExchangePaused(_)
                                )
                            {
                                act.fail(ctx, err.clone());
                            }
                            Err(err)
                        }
                    }
                }),
        ))
    }
}

impl Handler<WithdrawalResults> for RunActor {
    type Result = ();

    fn handle(&mut self, msg: WithdrawalResults, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "WithdrawalResults");
        for answered in &msg.results {
            self.in_flight.remove(&answered.request.client_id);
        }
        // The answers made room in the window: on PostgreSQL the next claim starts now, beside
        // the step that records them, rather than after it, so the next batch is committed
        // (and sent as soon as this step is over) while this one is recorded. On SQLite the
        // claim waits its turn after the step (`fill_window`).
        if self.deps.db.backend() == sea_orm::DatabaseBackend::Postgres {
            self.fill_window(ctx);
        }
        self.step(ctx, move |deps, snapshot| async move {
            settlement::record_results(&deps, snapshot, msg.results).await
        });
    }
}

/// Shutdown, first step: start nothing more (no withdrawals, lookups or timers); answers of
/// withdrawals already sent are still recorded.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Pause;

impl Handler<Pause> for RunActor {
    type Result = ();

    fn handle(&mut self, _: Pause, _: &mut Context<Self>) {
        self.paused = true;
    }
}

/// Answered once every step queued before it has committed, and the claim under way (if any)
/// is over: sent, or handed back if it committed after `Pause`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Quiesce;

impl Handler<Quiesce> for RunActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Quiesce, _: &mut Context<Self>) -> Self::Result {
        // Created now, so it is told even if the claim ends before it is first polled.
        let waiting = self
            .claiming
            .then(|| self.claim_over.clone().notified_owned());
        Box::pin(
            async move {
                if let Some(waiting) = waiting {
                    waiting.await;
                }
            }
            .into_actor(self),
        )
    }
}

/// Reload the run from the database (and take its lease if it has work and nobody holds it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reload;

impl Handler<Reload> for RunActor {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Context<Self>) {
        if !self.owns && !self.paused && !self.retired {
            self.load(ctx);
        }
    }
}
