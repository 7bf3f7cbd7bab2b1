//! The `RunManager` creates runs and routes commands to run actors, starting them on demand
//! from their snapshot. Each run with work of its own (CONFIRMED runs watch for funds, PAYING_OUT runs
//! reconcile and continue) is worked by the instance holding its lease: at start and every
//! heartbeat the manager renews the leases of its runs and starts actors for runs nobody
//! holds (never started, or their instance stopped), which take them over. Idle actors
//! retire, so only live runs are in memory.

use std::{collections::HashMap, sync::Arc};

use actix::prelude::*;

use crate::runtime::InRuntime;

use super::{
    actor::{Pause, Quiesce, Reload, Retire, RunActor},
    creation,
    deps::RunDeps,
    lease,
    messages::{CreateRun, RunError, RunReply, RunRequest},
};
use crate::outage::Outage;
use crate::telemetry::{self, ActorKind, CountedSend, Handling, Observed};

pub struct RunManager {
    deps: Arc<RunDeps>,
    actors: HashMap<String, Addr<RunActor>>,
    /// Shutting down: no run is taken over any more.
    stopping: bool,
    /// Renewals of leases that failed (the database away): logged once an outage.
    renewals: Outage,
    /// Reads of runs nobody works that failed: logged once an outage.
    orphans: Outage,
}

impl RunManager {
    pub fn new(deps: Arc<RunDeps>) -> RunManager {
        RunManager {
            deps,
            actors: HashMap::new(),
            stopping: false,
            renewals: Outage::new("run leases could not be renewed"),
            orphans: Outage::new("runs without a live lease could not be read"),
        }
    }

    /// The run's actor, started if it has none. An actor leaves the registry only when it
    /// retires: one that is restarting (its supervisor reloads it) keeps its address, so a run
    /// never has two writers.
    fn actor_for(&mut self, run_id: &str, ctx: &mut Context<Self>) -> Addr<RunActor> {
        // An address whose actor is gone (its arbiter stopped) is never handed out: a new
        // actor takes the run.
        if let Some(addr) = self.actors.get(run_id).filter(|a| a.connected()) {
            return addr.clone();
        }
        let deps = self.deps.clone();
        let manager = ctx.address();
        let id = run_id.to_owned();
        let addr = Supervisor::start(move |_| RunActor::new(id, deps, manager.recipient()));
        self.actors.insert(run_id.to_owned(), addr.clone());
        addr
    }
}

impl Observed for RunManager {
    const KIND: ActorKind = ActorKind::RunManager;
}

impl Actor for RunManager {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.deps.lease.heartbeat(), |act, ctx| {
            act.adopt_orphans(ctx)
        });
        telemetry::actor_started(Self::KIND);
        // At start every run with work and no live lease is resumed; runs whose leases an
        // earlier incarnation of this instance still holds follow once those expire.
        self.adopt_orphans(ctx);
    }
}

impl RunManager {
    /// Starts actors for runs nobody works (their lease expired or was given up).
    fn adopt_orphans(&mut self, ctx: &mut Context<Self>) {
        // Renew the leases of runs with an actor here, beside the actors (a run actor busy
        // with a long step still keeps its lease).
        let deps = self.deps.clone();
        let live: Vec<String> = self.actors.keys().cloned().collect();
        ctx.spawn(
            async move { lease::renew(&deps.db, &deps.lease, &live).await }
                .in_runtime()
                .into_actor(self)
                .map(|renewed, act, _| match renewed {
                    Ok(()) => act.renewals.succeeded(),
                    Err(err) => {
                        act.renewals.failed(&err);
                    }
                }),
        );
        if self.stopping {
            return;
        }
        let deps = self.deps.clone();
        ctx.spawn(
            async move { lease::orphaned(&deps.db.conn, &deps.lease).await }
                .in_runtime().into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(ids) => {
                        act.orphans.succeeded();
                        for id in ids {
                            match act.actors.get(&id) {
                                // An actor here whose copy of the run may be out of date (it
                                // saw no work to do): it reloads, and takes the lease if so.
                                Some(addr) => addr.do_send(Reload),
                                None => {
                                    tracing::info!(run_id = %id, "run without a live lease; taking it over");
                                    act.actor_for(&id, ctx);
                                }
                            }
                        }
                    }
                    Err(err) => {
                        act.orphans.failed(&err);
                    }
                }),
        );
    }
}

impl Handler<RunRequest> for RunManager {
    type Result = ResponseFuture<Result<RunReply, RunError>>;

    fn handle(&mut self, msg: RunRequest, ctx: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "RunRequest");
        let addr = self.actor_for(&msg.run_id, ctx);
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            addr.counted_send(msg)
                .await
                .map_err(|e| RunError::Unavailable(format!("run actor: {e}")))?
        }))
    }
}

/// A new run is created here, beside the actors: it has no actor until something is asked of
/// it. Creations run concurrently with routing (the database serialises them).
impl Handler<CreateRun> for RunManager {
    type Result = ResponseFuture<Result<RunReply, RunError>>;

    fn handle(&mut self, msg: CreateRun, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "CreateRun");
        let deps = self.deps.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            creation::create_run(&deps, msg).await
        }))
    }
}

impl Handler<Retire> for RunManager {
    type Result = ();

    fn handle(&mut self, msg: Retire, _: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Retire");
        // Only the actor that retires: a newer one for the same run stays.
        if self.actors.get(&msg.run_id) == Some(&msg.addr) {
            self.actors.remove(&msg.run_id);
        }
    }
}

/// The ids of runs with a live actor.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct LiveRuns;

impl Handler<LiveRuns> for RunManager {
    type Result = MessageResult<LiveRuns>;

    fn handle(&mut self, _: LiveRuns, _: &mut Context<Self>) -> Self::Result {
        let _handling = Handling::new(Self::KIND, "LiveRuns");
        MessageResult(
            self.actors
                .iter()
                .filter(|(_, a)| a.connected())
                .map(|(id, _)| id.clone())
                .collect(),
        )
    }
}

/// Shutdown: pauses every run actor (`Pause`), or waits until each has committed what it was
/// doing (`Quiesce`).
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub enum StopRuns {
    Pause,
    Quiesce,
}

impl Handler<StopRuns> for RunManager {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopRuns, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let actors: Vec<Addr<RunActor>> = self.actors.values().cloned().collect();
        Box::pin(InRuntime::in_runtime(async move {
            let waits = actors.into_iter().map(|addr| async move {
                let result = match msg {
                    StopRuns::Pause => addr.send(Pause).await,
                    StopRuns::Quiesce => addr.send(Quiesce).await,
                };
                // An actor that is gone has nothing to wait for.
                result.ok();
            });
            futures_util::future::join_all(waits).await;
        }))
    }
}
