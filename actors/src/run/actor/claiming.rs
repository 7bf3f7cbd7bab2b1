//! The withdrawal window of a `RunActor`: client ids claimed for the next payouts beside the
//! run's steps, one claim at a time, and sent once committed.

use actix::prelude::*;

use crate::runtime::InRuntime;
use payroll_entities::RunStatus;
use tracing::Instrument as _;

use super::RunActor;
use crate::{
    run::{messages::RunError, window},
    telemetry::{CountedSend, Handling, Observed},
};

impl RunActor {
    /// Commits client ids for as many payouts as the window has room for, then sends them.
    /// Each claim reads the run onward from the last payout id the one before read
    /// (`claim_from`), so a run's execution reads each payout about once; at the run's end it
    /// reads again from the start, and only a claim that read the whole run and came back short
    /// stops the claims (`exhausted`).
    ///
    /// On PostgreSQL the claim runs beside the run's steps, one claim at a time, as a task of
    /// its own, so its transaction goes on while a step waits on the database; its answer
    /// comes back as a message ([`Claimed`]), handled between steps, also by an actor restarted
    /// meanwhile. It changes nothing a step reads or writes: only PENDING payouts without a
    /// client id, which no answer or look-up concerns, and no counter of the run or its job.
    /// Whatever else ends such a payout locks it first (a cancel, a failed job), so either the
    /// claim finds it ended and leaves it, or the other finds it claimed. It is fenced by the
    /// lease in its own transaction, so a takeover waits for it and then sees its ids.
    pub(super) fn fill_window(&mut self, ctx: &mut Context<Self>) {
        if self.claiming || self.exhausted.is_some() || self.paused || !self.owns {
            return;
        }
        let Some(run) = self.snapshot.as_ref().map(|s| s.run.clone()) else {
            return;
        };
        if run.status != RunStatus::PayingOut {
            return;
        }
        let room = self
            .deps
            .exchange_settings
            .window()
            .saturating_sub(self.in_flight.len());
        if room == 0 {
            return;
        }
        self.claiming = true;
        let from = self.claim_from.clone();
        let deps = self.deps.clone();
        let addr = ctx.address();
        let task = actix::spawn(
            async move {
                let result = window::claim_window(&deps.db, &deps.lease, &run, room, from).await;
                // Delivered to a restarted actor too: committed ids are sent, not lost.
                addr.counted_do_send(Claimed { result });
            }
            .instrument(self.span())
            .in_runtime(),
        );
        // SQLite has one writer at a time: there the actor waits for the claim, so that it takes
        // the write lock between steps rather than from under them (measured slower beside
        // them). Its answer is handled all the same, as the message that follows.
        if self.deps.db.backend() == sea_orm::DatabaseBackend::Sqlite {
            ctx.wait(
                async move {
                    task.await.ok();
                }
                .into_actor(self),
            );
        }
    }
}

/// The answer of a claim ([`RunActor::fill_window`]): the withdrawals whose client ids it
/// committed, to send.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Claimed {
    result: Result<window::Claim, RunError>,
}

impl Handler<Claimed> for RunActor {
    type Result = ();

    fn handle(&mut self, msg: Claimed, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Claimed");
        match msg.result {
            // Committed after the actor was told to start nothing more (shutdown): handed
            // back, never sent, before the claim counts as done (`Quiesce` waits for it).
            Ok(claim) if self.paused && !claim.requests.is_empty() => {
                let ids: Vec<String> = claim.requests.into_iter().map(|r| r.client_id).collect();
                let deps = self.deps.clone();
                ctx.wait(
                    async move { window::hand_back(&deps.db, &deps.lease, &ids).await }
                        .instrument(self.span())
                        .in_runtime()
                        .into_actor(self)
                        .map(move |handed, act, _| {
                            if let Err(err) = handed {
                                tracing::warn!(run_id = %act.run_id, error = %err, "a claim made at shutdown was not handed back; it is looked up after the restart");
                            }
                            act.claim_done();
                        }),
                );
            }
            // Sent, unless this actor no longer works the run: then whoever works it next finds
            // them committed and never sent, looks them up and sends them.
            Ok(claim) => {
                self.claim_done();
                let wrapped = claim.exhausted && !claim.run_exhausted();
                if claim.run_exhausted() {
                    self.exhausted = Some(std::time::Instant::now());
                } else if wrapped {
                    // The run's end: read it again from its start, for payouts given back
                    // behind the last claim (a retry, a hand-back).
                    self.claim_from = None;
                } else {
                    self.claim_from = claim.last_read;
                }
                if !claim.requests.is_empty() {
                    self.submit(ctx, claim.requests, false);
                }
                // Answers may have made room meanwhile; read on unless the run has none left.
                self.after_change(ctx);
            }
            Err(err) => {
                self.claim_done();
                self.fail(ctx, err);
            }
        }
    }
}

impl RunActor {
    /// The claim under way is over: the next may start, and `Quiesce` answers.
    fn claim_done(&mut self) {
        self.claiming = false;
        self.claim_over.notify_waiters();
    }
}
