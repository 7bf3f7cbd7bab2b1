//! The `ExchangeActor`: one per exchange account and instance. It sends withdrawals in arrival
//! order, never faster than the account's rate limit allows (in any t seconds at most
//! `burst + rate·t`, counted across every instance through the database), batches them where
//! several tokens are free, backs off when the exchange says "rate limited" (no
//! withdrawal is made then, so none is counted twice), and reports every outcome to the run
//! that asked. Reads (balances, lookups, fees) do not wait behind withdrawals.
//!
//! It also answers for the account's funds (CONTRACT §7): when the exchange accepts a
//! withdrawal (or definitely refuses its first send) the actor releases the attempt's hold
//! before it lets anything else happen, and [`FundsPoint`] is answered only where none of its
//! sends has an answer still to come: new sends wait, the one in flight answers and has its
//! holds released, then the reserved total and the exchange balance are read, every queued
//! check is answered from that one reading, and sending resumes.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;

use crate::runtime::InRuntime;
use payroll_entities::{Cents, Network, TransferDirection, db::Db, treasury_transfer};

pub use super::point::{FundsPoint, PointFigures};
use super::{
    Balances, ExchangeError, ExchangeProvider, Quote, RemoteStatus, WithdrawalOutcome,
    WithdrawalRequest,
    outcome::Sent,
    point::{read_point, send_fenced},
    rate_limit::SharedRateLimit,
};
use crate::outage::Outage;
use crate::telemetry::{self, ActorKind, Handling, Observed};

/// Most withdrawals sent in one call to the provider.
const MAX_BATCH: usize = crate::settings::UNPACED_BATCH;

/// A withdrawal with the exchange's answer to it, and which send of its client id it was.
#[derive(Debug, Clone)]
pub struct Answered {
    pub request: WithdrawalRequest,
    pub outcome: WithdrawalOutcome,
    pub sent: Sent,
    /// The attempt's hold was released as the answer came (an acceptance): the run need not.
    pub hold_released: bool,
}

/// Outcomes of withdrawals a run handed over, reported back to it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct WithdrawalResults {
    pub results: Vec<Answered>,
}

/// Send these withdrawals; outcomes go to `reply_to`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Submit {
    pub items: Vec<WithdrawalRequest>,
    pub reply_to: Recipient<WithdrawalResults>,
    /// Sent once already under these ids (unknown at the exchange past the grace period).
    pub resend: bool,
}

struct Queued {
    request: WithdrawalRequest,
    reply_to: Recipient<WithdrawalResults>,
    resend: bool,
}

/// A funds check waiting for the next consistent point.
struct PointWaiter {
    run_id: Option<String>,
    reply: tokio::sync::oneshot::Sender<Result<PointFigures, ExchangeError>>,
}

pub struct ExchangeActor {
    provider: Arc<dyn ExchangeProvider>,
    limit: SharedRateLimit,
    db: Db,
    /// This instance's id: sends leave only for runs whose lease it holds.
    owner: String,
    /// Funds checks waiting for the next consistent point; no send starts while there are any.
    points: Vec<PointWaiter>,
    /// A consistent point is being read.
    reading_point: bool,
    /// A point was just answered: the next send goes before the next point, so that a stream
    /// of checks never starves withdrawals.
    send_owed: bool,
    queue: VecDeque<Queued>,
    sending: bool,
    /// A timer will pump again (waiting for a token or a back-off to end).
    waiting: bool,
    /// Set while backing off after the exchange's rate-limit answer.
    paused_until: Option<Instant>,
    /// Withdrawals sent (accepted or not), for the rate-limit test and metrics.
    sent: u64,
    /// Shutting down: nothing more is sent.
    stopped: bool,
    /// Client ids of first sends taken off the queue at shutdown: never sent.
    unsent: Vec<String>,
    /// Told when the send in progress has delivered its outcomes.
    idle_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Since when the head of the queue has waited for a token, for the wait-time metric.
    waiting_since: Option<Instant>,
    /// Whole tokens left after the last take (across every instance).
    tokens: i64,
    /// Reads of the shared rate limit that failed on the database: logged once an outage.
    limit_outage: Outage,
    /// How long after its stamp a send may still go (`exchange.send_deadline_ms`).
    send_deadline: Duration,
}

impl ExchangeActor {
    /// `limit` is the account's shared withdrawal rate limit (startup lowers the configured
    /// one to the exchange's own, see [`effective_limit`]).
    pub fn new(
        provider: Arc<dyn ExchangeProvider>,
        limit: SharedRateLimit,
        db: Db,
        owner: String,
        send_deadline: Duration,
    ) -> ExchangeActor {
        ExchangeActor {
            provider,
            limit,
            db,
            owner,
            points: Vec::new(),
            reading_point: false,
            send_owed: false,
            queue: VecDeque::new(),
            sending: false,
            waiting: false,
            paused_until: None,
            sent: 0,
            stopped: false,
            unsent: Vec::new(),
            idle_waiters: Vec::new(),
            waiting_since: None,
            tokens: 0,
            limit_outage: Outage::new("the withdrawal rate limit could not be read"),
            send_deadline,
        }
    }

    /// Sends the next batch if a token allows, or arms a timer for when one will.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.stopped {
            self.set_aside();
        }
        if self.reading_point || (!self.points.is_empty() && !self.send_owed) {
            self.take_point(ctx);
            return;
        }
        if self.sending || self.waiting || self.queue.is_empty() {
            self.send_owed = false;
            self.take_point(ctx);
            return;
        }
        let now = Instant::now();
        if let Some(until) = self.paused_until {
            if until > now {
                self.pump_after(until - now, ctx);
                return;
            }
            self.paused_until = None;
        }
        let wanted = self.queue.len().min(MAX_BATCH);
        // Tokens come from the shared row; only this future takes them, and the queue only
        // grows meanwhile, so every token taken is spent.
        self.sending = true;
        let limit = self.limit.clone();
        ctx.spawn(
            async move { limit.take(wanted).await }
                .in_runtime()
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok((0, wait, tokens)) => {
                        act.limit_outage.succeeded();
                        act.tokens = tokens;
                        telemetry::rate_limit_tokens(tokens as f64);
                        act.waiting_since.get_or_insert_with(Instant::now);
                        act.sending = false;
                        act.wake_idle_waiters();
                        act.pump_after(wait.max(Duration::from_millis(1)), ctx);
                        act.take_point(ctx);
                    }
                    Ok((granted, _, tokens)) => {
                        act.limit_outage.succeeded();
                        act.tokens = tokens;
                        telemetry::rate_limit_tokens(tokens as f64);
                        telemetry::rate_limit_wait(
                            act.waiting_since
                                .take()
                                .map_or(0.0, |since| since.elapsed().as_secs_f64()),
                        );
                        act.send(granted, ctx)
                    }
                    Err(err) => {
                        act.sending = false;
                        act.wake_idle_waiters();
                        let wait = act.limit_outage.failed(&err);
                        act.pump_after(wait, ctx);
                        act.take_point(ctx);
                    }
                }),
        );
    }

    /// At shutdown: takes every queued withdrawal off the queue. First sends are noted as
    /// never sent; resends stay as they are (looked up after the restart).
    fn set_aside(&mut self) {
        for queued in self.queue.drain(..) {
            if !queued.resend {
                self.unsent.push(queued.request.client_id);
            }
        }
    }

    fn pump_after(&mut self, wait: Duration, ctx: &mut Context<Self>) {
        self.waiting = true;
        ctx.run_later(wait, |act, ctx| {
            act.waiting = false;
            act.pump(ctx);
        });
    }

    /// Sends the next `granted` withdrawals in one call to the provider.
    fn send(&mut self, granted: usize, ctx: &mut Context<Self>) {
        if self.stopped {
            self.sending = false;
            self.set_aside();
            self.wake_idle_waiters();
            self.take_point(ctx);
            return;
        }
        self.send_owed = false;
        let granted = granted.min(self.queue.len());
        let batch: Vec<Queued> = self.queue.drain(..granted).collect();
        telemetry::withdrawals_queued(self.queue.len());
        let requests: Vec<WithdrawalRequest> = batch.iter().map(|q| q.request.clone()).collect();
        let provider = self.provider.clone();
        let db = self.db.clone();
        let owner = self.owner.clone();
        let deadline = self.send_deadline;
        ctx.spawn(
            async move { send_fenced(&db, &owner, &*provider, requests, deadline).await }
                .in_runtime()
                .into_actor(self)
                .map(move |(answers, released), act, ctx| {
                    act.sent += answers
                        .iter()
                        .filter(|(_, o, _)| {
                            !matches!(
                                o,
                                WithdrawalOutcome::NotSent { .. }
                                    | WithdrawalOutcome::RateLimited { .. }
                            )
                        })
                        .count() as u64;
                    act.sending = false;
                    act.deliver(batch, answers, released);
                    act.pump(ctx);
                    if !act.sending {
                        act.wake_idle_waiters();
                    }
                }),
        );
    }

    /// Reads a consistent point for every waiting check, once no send is in flight.
    fn take_point(&mut self, ctx: &mut Context<Self>) {
        if self.reading_point || self.sending || self.points.is_empty() {
            return;
        }
        self.reading_point = true;
        let waiters = std::mem::take(&mut self.points);
        let db = self.db.clone();
        let provider = self.provider.clone();
        let runs: Vec<Option<String>> = waiters.iter().map(|w| w.run_id.clone()).collect();
        ctx.spawn(
            async move { read_point(&db, &*provider, &runs).await }
                .in_runtime()
                .into_actor(self)
                .map(move |answers, act, ctx| {
                    for (waiter, answer) in waiters.into_iter().zip(answers) {
                        waiter.reply.send(answer).ok();
                    }
                    act.reading_point = false;
                    act.send_owed = true;
                    act.pump(ctx);
                }),
        );
    }

    fn wake_idle_waiters(&mut self) {
        for waiter in self.idle_waiters.drain(..) {
            waiter.send(()).ok();
        }
    }

    /// Reports each answer to the run that asked; `released`: the holds of accepted ones
    /// were released.
    fn deliver(
        &mut self,
        batch: Vec<Queued>,
        answers: Vec<(String, WithdrawalOutcome, Sent)>,
        released: bool,
    ) {
        let mut by_recipient: Vec<(Recipient<WithdrawalResults>, Vec<Answered>)> = Vec::new();
        let mut retry = Vec::new();
        let mut answers = answers.into_iter();
        let mut tally = OutcomeTally::default();
        for queued in batch {
            let (outcome, sent) = match answers.next() {
                Some((_, outcome, sent)) => (outcome, sent),
                None => (
                    WithdrawalOutcome::Ambiguous {
                        reason: "the exchange gave no answer for this withdrawal".into(),
                    },
                    Sent::Resend,
                ),
            };
            tally.add(&outcome);
            if let WithdrawalOutcome::RateLimited { retry_after_ms } = outcome {
                let until = Instant::now() + Duration::from_millis(retry_after_ms.max(1));
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
                retry.push(queued);
                continue;
            }
            let hold_released = released
                && matches!(
                    super::outcome::of_answer(sent, &outcome),
                    super::outcome::Verdict::Accepted { .. }
                );
            let answered = Answered {
                request: queued.request,
                outcome,
                sent,
                hold_released,
            };
            match by_recipient.iter_mut().find(|(r, _)| *r == queued.reply_to) {
                Some((_, results)) => results.push(answered),
                None => by_recipient.push((queued.reply_to, vec![answered])),
            }
        }
        // Rate-limited withdrawals go back to the front, in their order.
        for queued in retry.into_iter().rev() {
            self.queue.push_front(queued);
        }
        tally.record();
        telemetry::withdrawals_queued(self.queue.len());
        for (recipient, results) in by_recipient {
            if recipient.connected() {
                telemetry::enqueued(ActorKind::RunActor);
            }
            recipient.do_send(WithdrawalResults { results });
        }
    }
}

impl Handler<FundsPoint> for ExchangeActor {
    type Result = ResponseFuture<Result<PointFigures, ExchangeError>>;

    fn handle(&mut self, msg: FundsPoint, ctx: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "FundsPoint");
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.points.push(PointWaiter {
            run_id: msg.run_id,
            reply,
        });
        self.take_point(ctx);
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            answer.await.unwrap_or_else(|_| {
                Err(ExchangeError::Unavailable(
                    "the exchange actor stopped before the funds could be read".into(),
                ))
            })
        }))
    }
}

/// The withdrawal limit in force: the configured one, lowered to the exchange's own limit where
/// it has one (a configured 0, "no limit", becomes the exchange's rate).
pub fn effective_limit(per_second: u32, burst: u32, exchange: Option<(u32, u32)>) -> (u32, u32) {
    match exchange {
        None => (per_second, burst),
        Some((max_rate, max_burst)) => {
            let rate = if per_second == 0 {
                max_rate
            } else {
                per_second.min(max_rate)
            };
            (rate, burst.min(max_burst).max(1))
        }
    }
}

/// Withdrawal outcomes of one batch, counted once per batch rather than once per withdrawal.
#[derive(Default)]
struct OutcomeTally {
    accepted: u64,
    rejected: u64,
    rate_limited: u64,
    ambiguous: u64,
    credentials_refused: u64,
    not_sent: u64,
}

impl OutcomeTally {
    fn add(&mut self, outcome: &WithdrawalOutcome) {
        match outcome {
            WithdrawalOutcome::Accepted { .. } => self.accepted += 1,
            WithdrawalOutcome::Rejected { .. } => self.rejected += 1,
            WithdrawalOutcome::RateLimited { .. } => self.rate_limited += 1,
            WithdrawalOutcome::Ambiguous { .. } => self.ambiguous += 1,
            WithdrawalOutcome::CredentialsRefused { .. } => self.credentials_refused += 1,
            WithdrawalOutcome::NotSent { .. } => self.not_sent += 1,
        }
    }

    fn record(&self) {
        telemetry::withdrawals("accepted", self.accepted);
        telemetry::withdrawals("rejected", self.rejected);
        telemetry::withdrawals("rate_limited", self.rate_limited);
        telemetry::withdrawals("ambiguous", self.ambiguous);
        telemetry::withdrawals("credentials_refused", self.credentials_refused);
        telemetry::withdrawals("not_sent", self.not_sent);
    }
}

impl Actor for ExchangeActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
        telemetry::actor_started(Self::KIND);
        self.tokens = self.limit.limits().1 as i64;
        telemetry::rate_limit_tokens(self.tokens as f64);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        telemetry::actor_stopped(Self::KIND);
    }
}

impl Observed for ExchangeActor {
    const KIND: ActorKind = ActorKind::ExchangeActor;
}

impl Handler<Submit> for ExchangeActor {
    type Result = ();

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        let _handling = Handling::new(Self::KIND, "Submit");
        for request in msg.items {
            self.queue.push_back(Queued {
                request,
                reply_to: msg.reply_to.clone(),
                resend: msg.resend,
            });
        }
        self.pump(ctx);
        telemetry::withdrawals_queued(self.queue.len());
    }
}

/// Shutdown: send nothing more. Answers, once the send in progress has delivered its
/// outcomes, the client ids of first sends that were waiting for a token: the exchange never
/// saw them, so their payouts may be handed over afresh after the restart.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct StopSending;

impl Handler<StopSending> for ExchangeActor {
    type Result = ResponseActFuture<Self, Vec<String>>;

    fn handle(&mut self, _: StopSending, _: &mut Context<Self>) -> Self::Result {
        self.stopped = true;
        self.set_aside();
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.sending {
            self.idle_waiters.push(tx);
        } else {
            tx.send(()).ok();
        }
        Box::pin(
            async move {
                rx.await.ok();
            }
            .in_runtime()
            .into_actor(self)
            .map(|_, act, _| std::mem::take(&mut act.unsent)),
        )
    }
}

/// The exchange balance (and treasury wallet), read live.
#[derive(Message)]
#[rtype(result = "Result<Balances, ExchangeError>")]
pub struct GetBalances;

impl Handler<GetBalances> for ExchangeActor {
    type Result = ResponseFuture<Result<Balances, ExchangeError>>;

    fn handle(&mut self, _: GetBalances, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "GetBalances");
        let provider = self.provider.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            provider.balances().await
        }))
    }
}

/// What the exchange knows of these client ids.
#[derive(Message)]
#[rtype(result = "Result<HashMap<String, RemoteStatus>, ExchangeError>")]
pub struct Lookup {
    pub client_ids: Vec<String>,
    /// None of them was sent before this (where known).
    pub sent_since: Option<chrono::DateTime<chrono::Utc>>,
}

impl Handler<Lookup> for ExchangeActor {
    type Result = ResponseFuture<Result<HashMap<String, RemoteStatus>, ExchangeError>>;

    fn handle(&mut self, msg: Lookup, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "Lookup");
        let provider = self.provider.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            provider.lookup(&msg.client_ids, msg.sent_since).await
        }))
    }
}

/// The current fee and minimum withdrawal of each of these networks the exchange can withdraw
/// to now; a network it cannot is left out.
#[derive(Message)]
#[rtype(result = "Result<HashMap<Network, Quote>, ExchangeError>")]
pub struct QuoteFees(pub Vec<Network>);

impl Handler<QuoteFees> for ExchangeActor {
    type Result = ResponseFuture<Result<HashMap<Network, Quote>, ExchangeError>>;

    fn handle(&mut self, msg: QuoteFees, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "QuoteFees");
        let provider = self.provider.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            let mut quotes = HashMap::new();
            for network in msg.0 {
                if let Some(quote) = provider.quote(network).await? {
                    quotes.insert(network, quote);
                }
            }
            Ok(quotes)
        }))
    }
}

/// Moves treasury funds.
#[derive(Message)]
#[rtype(result = "Result<treasury_transfer::Model, ExchangeError>")]
pub struct Transfer {
    pub transfer_id: String,
    pub direction: TransferDirection,
    pub amount: Cents,
    pub note: Option<String>,
}

impl Handler<Transfer> for ExchangeActor {
    type Result = ResponseFuture<Result<treasury_transfer::Model, ExchangeError>>;

    fn handle(&mut self, msg: Transfer, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "Transfer");
        let provider = self.provider.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            provider
                .transfer(&msg.transfer_id, msg.direction, msg.amount, msg.note)
                .await
        }))
    }
}

/// Transfers, newest first, and their total.
#[derive(Message)]
#[rtype(result = "Result<(Vec<treasury_transfer::Model>, u64), ExchangeError>")]
pub struct ListTransfers {
    pub limit: u64,
    pub offset: u64,
}

impl Handler<ListTransfers> for ExchangeActor {
    type Result = ResponseFuture<Result<(Vec<treasury_transfer::Model>, u64), ExchangeError>>;

    fn handle(&mut self, msg: ListTransfers, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "ListTransfers");
        let provider = self.provider.clone();
        Box::pin(InRuntime::in_runtime(async move {
            let _handling = handling;
            provider.transfers(msg.limit, msg.offset).await
        }))
    }
}

/// The provider's name and the withdrawals waiting for a token.
#[derive(Message)]
#[rtype(result = "ExchangeState")]
pub struct GetState;

#[derive(Debug, Clone)]
pub struct ExchangeState {
    pub provider: &'static str,
    pub queued: usize,
    pub sent: u64,
    /// Whole withdrawal tokens available now.
    pub tokens: f64,
    /// Withdrawals per second (0: no limit) and the burst.
    pub rate_per_second: f64,
    pub burst: f64,
    /// Backing off after the exchange's own rate-limit answer.
    pub paused: bool,
}

impl Handler<GetState> for ExchangeActor {
    type Result = MessageResult<GetState>;

    fn handle(&mut self, _: GetState, _: &mut Context<Self>) -> Self::Result {
        let _handling = Handling::new(Self::KIND, "GetState");
        let now = Instant::now();
        let (rate_per_second, burst) = self.limit.limits();
        MessageResult(ExchangeState {
            provider: self.provider.name(),
            queued: self.queue.len(),
            sent: self.sent,
            tokens: self.tokens as f64,
            rate_per_second,
            burst,
            paused: self.paused_until.is_some_and(|until| until > now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::effective_limit;

    #[test]
    fn the_exchange_limit_caps_the_configured_one() {
        assert_eq!(effective_limit(6, 6, None), (6, 6));
        assert_eq!(effective_limit(0, 6, None), (0, 6));
        assert_eq!(effective_limit(6, 6, Some((6, 1))), (6, 1));
        assert_eq!(effective_limit(100, 10, Some((6, 1))), (6, 1));
        assert_eq!(effective_limit(0, 10, Some((6, 1))), (6, 1));
        assert_eq!(effective_limit(2, 1, Some((6, 1))), (2, 1));
    }
}
