//! Loading a `RunActor`'s snapshot: at start, after a failed step, when another instance
//! changed the run or its lease was taken. A load that fails on the database is tried again
//! (the actor keeps its address and its withdrawals in flight) and requests meanwhile are
//! answered with that fault (503), never 404 for a run that exists.

use std::time::{Duration, Instant};

use actix::prelude::*;
use payroll_entities::RunStatus;
use tracing::Instrument as _;

use super::RunActor;
use crate::{
    run::{lease, messages::RunError, store},
    runtime::InRuntime,
};

impl RunActor {
    /// What a request is answered while the actor holds no snapshot: 404 only for a run the
    /// database does not have; otherwise the fault that keeps it from loading (503).
    pub(super) fn unloaded(&self) -> RunError {
        if self.gone {
            return RunError::NotFound;
        }
        self.load_error
            .clone()
            .unwrap_or_else(|| RunError::Unavailable("the run is being loaded".into()))
    }

    /// Loads the run again after `wait`, and once the database answers again if it is known
    /// to be away (or a while has passed): a run whose load failed is never left unloaded.
    fn reload_after(&mut self, wait: Duration, ctx: &mut Context<Self>) {
        let health = self.deps.db.health().clone();
        ctx.spawn(
            async move {
                tokio::time::sleep(wait).await;
                tokio::time::timeout(Duration::from_secs(5), health.up())
                    .await
                    .ok();
            }
            .into_actor(self)
            .map(|_, act, ctx| {
                if act.snapshot.is_none() && !act.gone && !act.retired {
                    act.load(ctx);
                }
            }),
        );
    }

    /// Loads the snapshot, takes the run's lease if the run has work of its own, and picks up
    /// whatever the run was doing.
    pub(super) fn load(&mut self, ctx: &mut Context<Self>) {
        let deps = self.deps.clone();
        let run_id = self.run_id.clone();
        ctx.wait(
            async move {
                let snapshot = store::load(&deps.db, &run_id).await?;
                let owns = if lease::WORKING.contains(&snapshot.run.status) {
                    lease::acquire(&deps.db, &deps.lease, &run_id).await?
                } else {
                    lease::release(&deps.db, &deps.lease, &run_id).await?;
                    false
                };
                let unsettled = if owns && snapshot.run.status == RunStatus::PayingOut {
                    store::unsettled_client_ids(&deps.db, &run_id).await?
                } else {
                    Vec::new()
                };
                Ok::<_, RunError>((snapshot, owns, unsettled))
            }
            .instrument(self.span())
            .in_runtime()
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok((snapshot, owns, unsettled)) => {
                    act.outage.succeeded();
                    act.load_error = None;
                    act.gone = false;
                    act.snapshot = Some(snapshot);
                    act.exhausted = None;
                    act.claim_from = None;
                    act.owns = owns;
                    act.last_heartbeat = Instant::now();
                    // Outcomes unknown after a restart or a takeover: ask the exchange before
                    // anything else.
                    act.watch_at(Instant::now(), unsettled);
                    act.after_change(ctx);
                }
                Err(RunError::NotFound) => {
                    act.snapshot = None;
                    act.gone = true;
                }
                // Not a fault of the database (a bug): trying again would not help, and the
                // error is logged; the next request starts a new actor (unless withdrawals are
                // in flight, whose answers come to this address: then it tries again).
                Err(err) if err.fault().is_none() && act.in_flight.is_empty() => {
                    tracing::error!(run_id = %act.run_id, error = %err, "run could not be loaded");
                    act.snapshot = None;
                    act.load_error = Some(err);
                    act.retire(ctx);
                }
                Err(err) => {
                    // The run stays this actor's, with its address and its withdrawals in
                    // flight; requests meanwhile are answered 503 with this error.
                    act.snapshot = None;
                    let wait = act.outage.failed(&format!("run {}: {err}", act.run_id));
                    act.load_error = Some(err);
                    act.reload_after(wait, ctx);
                }
            }),
        );
    }
}
