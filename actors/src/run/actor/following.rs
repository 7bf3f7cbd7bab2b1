//! How a `RunActor` follows its withdrawals once they are out: look-ups run beside the run's
//! steps (batched, `exchange.reconcile_batch` ids a pass) and only their results are applied as
//! a step, so a long reconciliation never holds up the run's other work or another run's sends;
//! unknown ids are sent again, or reported stuck, as the settlement decides; and a job whose
//! exchange refuses our credentials, or cannot be reached for `exchange.unreachable_fail_ms`,
//! is failed.

use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::runtime::InRuntime;
use tracing::Instrument as _;

use super::RunActor;
use crate::{
    exchange::{WithdrawalRequest, actor::Submit},
    run::{completion, settlement, settlement::Recorded},
    telemetry::CountedSend,
};

impl RunActor {
    /// Client ids per look-up.
    pub(super) fn lookup_batch(&self) -> usize {
        self.deps.exchange_settings.reconcile_batch.max(1) as usize
    }

    /// Acts on what a step learned from the exchange: ids to watch, to send, to send again,
    /// whether the exchange could be reached, whether it refused our credentials.
    pub(super) fn follow(&mut self, ctx: &mut Context<Self>, recorded: Recorded) {
        let later = Instant::now() + self.poll_interval();
        self.watch_at(later, recorded.watch);
        self.watch_at(later, recorded.still_pending);
        self.submit(ctx, recorded.send, false);
        self.submit(ctx, recorded.resend, true);
        if recorded.reached {
            self.unreachable_since = None;
        } else if recorded.unreached {
            let since = *self.unreachable_since.get_or_insert_with(Instant::now);
            let limit = Duration::from_millis(self.deps.exchange_settings.unreachable_fail_ms);
            if since.elapsed() >= limit {
                self.unreachable_since = None;
                self.fail_job(
                    ctx,
                    format!(
                        "the exchange could not be reached for {} s",
                        limit.as_secs()
                    ),
                );
            }
        }
        if let Some(reason) = recorded.credentials_refused {
            self.fail_job(
                ctx,
                format!("the exchange refused our credentials: {reason}"),
            );
        }
    }

    /// Hands withdrawals to the exchange actor under their committed client ids; never one
    /// that is already there. Each send is fenced and counted as it leaves.
    pub(super) fn submit(
        &mut self,
        ctx: &mut Context<Self>,
        requests: Vec<WithdrawalRequest>,
        resend: bool,
    ) {
        if !self.owns || self.paused {
            return;
        }
        let requests: Vec<WithdrawalRequest> = requests
            .into_iter()
            .filter(|r| !self.in_flight.contains(&r.client_id))
            .collect();
        if requests.is_empty() {
            return;
        }
        self.in_flight
            .extend(requests.iter().map(|r| r.client_id.clone()));
        self.deps.exchange.counted_do_send(Submit {
            items: requests,
            reply_to: ctx.address().recipient(),
            resend,
        });
    }

    /// Starts a look-up of the ids that are due, unless one is under way: the exchange is asked
    /// beside the run's steps, and what it says is applied as a step.
    pub(super) fn look_up_due(&mut self, ctx: &mut Context<Self>, now: Instant) {
        if self.looking_up {
            return;
        }
        let batch = self.lookup_batch();
        let mut due = Vec::new();
        while let Some((when, _)) = self.watch.front() {
            if *when > now || due.len() >= batch {
                break;
            }
            if let Some((_, ids)) = self.watch.pop_front() {
                for id in &ids {
                    self.watching.remove(id);
                }
                due.extend(ids);
            }
        }
        if due.is_empty() {
            return;
        }
        self.looking_up = true;
        let deps = self.deps.clone();
        let ids = due.clone();
        ctx.spawn(
            async move { settlement::look_up(&deps, ids).await }
                .instrument(self.span())
                .in_runtime().into_actor(self)
                .map(move |found, act, ctx| {
                    act.looking_up = false;
                    let found = match found {
                        Ok(found) => Some(found),
                        // Reached, and asked to wait: looked up again later, never counted as
                        // unreachable (a ban must not fail the job).
                        Err(crate::run::messages::RunError::ExchangePaused(why)) => {
                            tracing::warn!(run_id = %act.run_id, %why, "the exchange asked us to wait; looking up again later");
                            let later = Instant::now() + act.poll_interval();
                            act.watch_at(later, due);
                            return;
                        }
                        Err(err) => {
                            tracing::warn!(run_id = %act.run_id, error = %err, "look-up at the exchange failed; trying again");
                            None
                        }
                    };
                    act.step(ctx, move |deps, snapshot| async move {
                        settlement::apply_lookup(&deps, snapshot, due, found).await
                    });
                    // More may be due already: look them up once this batch is applied, not a
                    // tick later, so following keeps pace with sending.
                    if act.status() == Some(payroll_entities::RunStatus::PayingOut) {
                        act.look_up_due(ctx, Instant::now());
                    }
                }),
        );
    }

    /// Fails the run's current job (CONTRACT §5).
    fn fail_job(&mut self, ctx: &mut Context<Self>, reason: String) {
        self.step(ctx, move |deps, snapshot| async move {
            let snapshot = completion::fail_job(&deps, snapshot, &reason).await?;
            Ok((snapshot, Recorded::default()))
        });
    }
}
