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
}

impl ExchangeActor {
    /// The configured limit (`exchange.withdrawals_per_second`, `exchange.burst`) applies as far
    /// as the exchange's own allows; see [`effective_limit`].
    pub fn new(provider: Arc<dyn ExchangeProvider>, per_second: u32, burst: u32) -> ExchangeActor {
        let (per_second, burst) = effective_limit(per_second, burst, provider.withdrawal_limit());
        ExchangeActor {
            provider,
            bucket: TokenBucket::new(per_second, burst, Instant::now()),
            queue: VecDeque::new(),
            sending: false,
            paused_until: None,
            sent: 0,
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
        if granted == 0 {
            let wait = self.bucket.wait_for_next(now).max(Duration::from_millis(1));
            ctx.run_later(wait, |act, ctx| act.pump(ctx));
            return;
        }
        let batch: Vec<Queued> = self.queue.drain(..granted).collect();
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
        for queued in batch {
            let outcome = outcomes.next().unwrap_or(WithdrawalOutcome::Ambiguous {
                reason: "the exchange gave no answer for this withdrawal".into(),
            });
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
        for (recipient, results) in by_recipient {
            recipient.do_send(WithdrawalResults { results });
        }
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

impl Actor for ExchangeActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(1024);
    }
}

impl Handler<Submit> for ExchangeActor {
    type Result = ();

    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) {
        for request in msg.items {
            self.queue.push_back(Queued {
                request,
                reply_to: msg.reply_to.clone(),
            });
        }
        self.pump(ctx);
    }
}

/// The exchange balance (and treasury wallet), read live.
#[derive(Message)]
#[rtype(result = "Result<Balances, ExchangeError>")]
pub struct GetBalances;

impl Handler<GetBalances> for ExchangeActor {
    type Result = ResponseFuture<Result<Balances, ExchangeError>>;

    fn handle(&mut self, _: GetBalances, _: &mut Context<Self>) -> Self::Result {
        let provider = self.provider.clone();
        Box::pin(async move { provider.balances().await })
    }
}

/// What the exchange knows of these client ids.
#[derive(Message)]
#[rtype(result = "Result<HashMap<String, RemoteStatus>, ExchangeError>")]
pub struct Lookup(pub Vec<String>);

impl Handler<Lookup> for ExchangeActor {
    type Result = ResponseFuture<Result<HashMap<String, RemoteStatus>, ExchangeError>>;

    fn handle(&mut self, msg: Lookup, _: &mut Context<Self>) -> Self::Result {
        let provider = self.provider.clone();
        Box::pin(async move { provider.lookup(&msg.0).await })
    }
}

/// Fee quotes for those of these networks the provider supports, and the minimum withdrawal.
#[derive(Message)]
#[rtype(result = "Result<(HashMap<Network, Cents>, Cents), ExchangeError>")]
pub struct QuoteFees(pub Vec<Network>);

impl Handler<QuoteFees> for ExchangeActor {
    type Result = ResponseFuture<Result<(HashMap<Network, Cents>, Cents), ExchangeError>>;

    fn handle(&mut self, msg: QuoteFees, _: &mut Context<Self>) -> Self::Result {
        let provider = self.provider.clone();
        Box::pin(async move {
            let mut fees = HashMap::new();
            for network in msg.0.into_iter().filter(|n| provider.supports(*n)) {
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
        let provider = self.provider.clone();
        Box::pin(async move {
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
        let provider = self.provider.clone();
        Box::pin(async move { provider.transfers(msg.limit, msg.offset).await })
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
}

impl Handler<GetState> for ExchangeActor {
    type Result = MessageResult<GetState>;

    fn handle(&mut self, _: GetState, _: &mut Context<Self>) -> Self::Result {
        MessageResult(ExchangeState {
            provider: self.provider.name(),
            queued: self.queue.len(),
            sent: self.sent,
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
