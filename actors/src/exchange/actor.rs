//! The `ExchangeActor`: one per exchange account. It sends withdrawals in arrival order, never
//! faster than the token bucket allows (in any t seconds at most `burst + rate·t`), batches them
//! where the bucket has several tokens, backs off when the exchange says "rate limited" (no
//! withdrawal is made then, so none is counted twice), and reports every outcome to the run
//! that asked. Reads (balances, lookups, fees) do not wait behind withdrawals.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use actix::prelude::*;
use payroll_entities::{Cents, Network, TransferDirection, treasury_transfer};

use super::{
    Balances, ExchangeError, ExchangeProvider, RemoteStatus, WithdrawalOutcome, WithdrawalRequest,
    token_bucket::TokenBucket,
};
use crate::telemetry::{self, ActorKind, Handling, Observed};

/// Most withdrawals sent in one call to the provider.
const MAX_BATCH: usize = 64;

/// A withdrawal with the exchange's answer to it.
pub type Answered = (WithdrawalRequest, WithdrawalOutcome);

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
}

struct Queued {
    request: WithdrawalRequest,
    reply_to: Recipient<WithdrawalResults>,
}

pub struct ExchangeActor {
    provider: Arc<dyn ExchangeProvider>,
    bucket: TokenBucket,
    queue: VecDeque<Queued>,
    sending: bool,
    /// Set while backing off after the exchange's rate-limit answer.
    paused_until: Option<Instant>,
    /// Withdrawals sent (accepted or not), for the rate-limit test and metrics.
    sent: u64,
    /// Since when the head of the queue has waited for a token, for the wait-time metric.
    waiting_since: Option<Instant>,
}

impl ExchangeActor {
    pub fn new(provider: Arc<dyn ExchangeProvider>, per_second: u32, burst: u32) -> ExchangeActor {
        ExchangeActor {
            provider,
            bucket: TokenBucket::new(per_second, burst, Instant::now()),
            queue: VecDeque::new(),
            sending: false,
            paused_until: None,
            sent: 0,
            waiting_since: None,
        }
    }

    /// Sends the next batch if a token allows, or arms a timer for when one will.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.sending || self.queue.is_empty() {
            return;
        }
        let now = Instant::now();
        if let Some(until) = self.paused_until {
            if until > now {
                ctx.run_later(until - now, |act, ctx| act.pump(ctx));
                return;
            }
            self.paused_until = None;
        }
        let wanted = self.queue.len().min(MAX_BATCH);
        let granted = self.bucket.take(wanted, now);
        telemetry::rate_limit_tokens(self.bucket.available(now).floor());
        if granted == 0 {
            self.waiting_since.get_or_insert(now);
            let wait = self.bucket.wait_for_next(now).max(Duration::from_millis(1));
            ctx.run_later(wait, |act, ctx| act.pump(ctx));
            return;
        }
        telemetry::rate_limit_wait(
            self.waiting_since
                .take()
                .map_or(0.0, |since| now.duration_since(since).as_secs_f64()),
        );
        let batch: Vec<Queued> = self.queue.drain(..granted).collect();
        telemetry::withdrawals_queued(self.queue.len());
        let requests: Vec<WithdrawalRequest> = batch.iter().map(|q| q.request.clone()).collect();
        self.sending = true;
        self.sent += requests.len() as u64;
        let provider = self.provider.clone();
        ctx.spawn(
            async move { provider.withdraw(&requests).await }
                .into_actor(self)
                .map(move |outcomes, act, ctx| {
                    act.sending = false;
                    act.deliver(batch, outcomes);
                    act.pump(ctx);
                }),
        );
    }

    fn deliver(&mut self, batch: Vec<Queued>, outcomes: Vec<WithdrawalOutcome>) {
        let mut by_recipient: Vec<(Recipient<WithdrawalResults>, Vec<Answered>)> = Vec::new();
        let mut retry = Vec::new();
        let mut outcomes = outcomes.into_iter();
        let mut tally = OutcomeTally::default();
        for queued in batch {
            let outcome = outcomes.next().unwrap_or(WithdrawalOutcome::Ambiguous {
                reason: "the exchange gave no answer for this withdrawal".into(),
            });
            tally.add(&outcome);
            if let WithdrawalOutcome::RateLimited { retry_after_ms } = outcome {
                let until = Instant::now() + Duration::from_millis(retry_after_ms.max(1));
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
                self.sent = self.sent.saturating_sub(1);
                retry.push(queued);
                continue;
            }
            match by_recipient.iter_mut().find(|(r, _)| *r == queued.reply_to) {
                Some((_, results)) => results.push((queued.request, outcome)),
                None => by_recipient.push((queued.reply_to, vec![(queued.request, outcome)])),
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

/// Withdrawal outcomes of one batch, counted once per batch rather than once per withdrawal.
#[derive(Default)]
struct OutcomeTally {
    accepted: u64,
    rejected: u64,
    rate_limited: u64,
    ambiguous: u64,
}

impl OutcomeTally {
    fn add(&mut self, outcome: &WithdrawalOutcome) {
        match outcome {
            WithdrawalOutcome::Accepted { .. } => self.accepted += 1,
            WithdrawalOutcome::Rejected { .. } => self.rejected += 1,
            WithdrawalOutcome::RateLimited { .. } => self.rate_limited += 1,
            WithdrawalOutcome::Ambiguous { .. } => self.ambiguous += 1,
        }
    }

    fn record(&self) {
        telemetry::withdrawals("accepted", self.accepted);
        telemetry::withdrawals("rejected", self.rejected);
        telemetry::withdrawals("rate_limited", self.rate_limited);
        telemetry::withdrawals("ambiguous", self.ambiguous);
    }
}

impl Actor for ExchangeActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
        telemetry::actor_started(Self::KIND);
        telemetry::rate_limit_tokens(self.bucket.available(Instant::now()).floor());
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
            });
        }
        self.pump(ctx);
        telemetry::withdrawals_queued(self.queue.len());
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
        Box::pin(async move {
            let _handling = handling;
            provider.balances().await
        })
    }
}

/// What the exchange knows of these client ids.
#[derive(Message)]
#[rtype(result = "Result<HashMap<String, RemoteStatus>, ExchangeError>")]
pub struct Lookup(pub Vec<String>);

impl Handler<Lookup> for ExchangeActor {
    type Result = ResponseFuture<Result<HashMap<String, RemoteStatus>, ExchangeError>>;

    fn handle(&mut self, msg: Lookup, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "Lookup");
        let provider = self.provider.clone();
        Box::pin(async move {
            let _handling = handling;
            provider.lookup(&msg.0).await
        })
    }
}

/// Fee quotes for these networks, and the minimum withdrawal.
#[derive(Message)]
#[rtype(result = "Result<(HashMap<Network, Cents>, Cents), ExchangeError>")]
pub struct QuoteFees(pub Vec<Network>);

impl Handler<QuoteFees> for ExchangeActor {
    type Result = ResponseFuture<Result<(HashMap<Network, Cents>, Cents), ExchangeError>>;

    fn handle(&mut self, msg: QuoteFees, _: &mut Context<Self>) -> Self::Result {
        let handling = Handling::new(Self::KIND, "QuoteFees");
        let provider = self.provider.clone();
        Box::pin(async move {
            let _handling = handling;
            let mut fees = HashMap::new();
            for network in msg.0 {
                fees.insert(network, provider.fee(network).await?);
            }
            Ok((fees, provider.min_withdrawal()))
        })
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
        Box::pin(async move {
            let _handling = handling;
            provider
                .transfer(&msg.transfer_id, msg.direction, msg.amount, msg.note)
                .await
        })
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
        Box::pin(async move {
            let _handling = handling;
            provider.transfers(msg.limit, msg.offset).await
        })
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
        let (rate_per_second, burst) = self.bucket.limits();
        MessageResult(ExchangeState {
            provider: self.provider.name(),
            queued: self.queue.len(),
            sent: self.sent,
            tokens: self.bucket.available(now).floor(),
            rate_per_second,
            burst,
            paused: self.paused_until.is_some_and(|until| until > now),
        })
    }
}
