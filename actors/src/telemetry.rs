//! The metrics the actors report, through the `metrics` facade: the service installs a
//! Prometheus recorder at start; without one (unit tests, the CLI) every call is a no-op.
//! The names and labels are listed in docs/operations.md (Metrics).
//!
//! actix does not expose the length of a mailbox, so `payroll_actor_mailbox_depth` is kept
//! here: messages sent through [`CountedSend`] add one, the handler's [`Handling`] takes one
//! off when it picks the message up. The counts are atomics, copied into the gauge when the
//! metrics are read ([`publish_mailbox_depths`]), not at every message. A message still queued when its actor stops is dropped by
//! actix unhandled and stays counted; that only happens when an actor stops with work queued
//! (shutdown, a run actor failing a step), never on the hot path.

use std::{
    sync::atomic::{AtomicI64, Ordering},
    time::Instant,
};

use actix::{Actor, Addr, Handler, Message, dev::ToEnvelope};

/// The kinds of actor, as the `actor` label spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    RunActor,
    RunManager,
    ExchangeActor,
    WebhookSupervisor,
    WebhookDispatcher,
    Mailer,
    AuditWriter,
}

impl ActorKind {
    pub const ALL: &'static [ActorKind] = &[
        ActorKind::RunActor,
        ActorKind::RunManager,
        ActorKind::ExchangeActor,
        ActorKind::WebhookSupervisor,
        ActorKind::WebhookDispatcher,
        ActorKind::Mailer,
        ActorKind::AuditWriter,
    ];

    fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::RunActor => "RunActor",
            ActorKind::RunManager => "RunManager",
            ActorKind::ExchangeActor => "ExchangeActor",
            ActorKind::WebhookSupervisor => "WebhookSupervisor",
            ActorKind::WebhookDispatcher => "WebhookDispatcher",
            ActorKind::Mailer => "Mailer",
            ActorKind::AuditWriter => "AuditWriter",
        }
    }
}

/// Actors alive and messages queued per kind, kept beside the recorder so the status page can
/// show them without one.
static ALIVE: [AtomicI64; 7] = [const { AtomicI64::new(0) }; 7];
static DEPTH: [AtomicI64; 7] = [const { AtomicI64::new(0) }; 7];

/// One kind of actor as it stands now, in this process.
#[derive(Debug, Clone, Copy)]
pub struct ActorFigures {
    pub kind: ActorKind,
    pub alive: i64,
    pub mailbox_depth: i64,
}

/// Every kind of actor as it stands now.
pub fn actor_figures() -> Vec<ActorFigures> {
    ActorKind::ALL
        .iter()
        .map(|&kind| ActorFigures {
            kind,
            alive: ALIVE[kind.index()].load(Ordering::Relaxed),
            mailbox_depth: DEPTH[kind.index()].load(Ordering::Relaxed),
        })
        .collect()
}

/// An actor whose mailbox and lifecycle are counted.
pub trait Observed: Actor {
    const KIND: ActorKind;
}

/// Call from `Actor::started`.
pub fn actor_started(kind: ActorKind) {
    ALIVE[kind.index()].fetch_add(1, Ordering::Relaxed);
    metrics::gauge!("payroll_actors_alive", "actor" => kind.as_str()).increment(1.0);
    // Present from the start, so a dashboard sees zeros rather than gaps.
    metrics::gauge!("payroll_actor_mailbox_depth", "actor" => kind.as_str())
        .set(DEPTH[kind.index()].load(Ordering::Relaxed) as f64);
    metrics::counter!("payroll_actor_restarts_total", "actor" => kind.as_str()).increment(0);
}

/// The depth at which the API's handlers, the senders that can say no, are refused: for the
/// kinds they send to (the run manager, the exchange actor, the audit writer). The others get
/// only the actors' own messages, which carry committed work and are never refused.
pub fn mailbox_limit(kind: ActorKind) -> Option<i64> {
    match kind {
        ActorKind::AuditWriter => Some(AUDIT_BACKLOG_LIMIT),
        ActorKind::RunManager | ActorKind::ExchangeActor => Some(MAILBOX_LIMIT),
        _ => None,
    }
}

/// Every series whose labels come from a closed set, at zero (or its bound), so a dashboard or
/// an alert sees a zero rather than a gap before the first event of its kind.
pub fn register_closed_sets() {
    for kind in ActorKind::ALL {
        let actor = kind.as_str();
        if let Some(limit) = mailbox_limit(*kind) {
            metrics::gauge!("payroll_actor_mailbox_limit", "actor" => actor).set(limit as f64);
        }
        metrics::gauge!("payroll_actor_mailbox_depth", "actor" => actor)
            .set(DEPTH[kind.index()].load(Ordering::Relaxed) as f64);
        metrics::gauge!("payroll_actors_alive", "actor" => actor).increment(0.0);
        metrics::counter!("payroll_actor_restarts_total", "actor" => actor).increment(0);
        metrics::counter!("payroll_actor_messages_refused_total", "actor" => actor).increment(0);
    }
    for outcome in WITHDRAWAL_OUTCOMES {
        metrics::counter!("payroll_withdrawals_total", "outcome" => *outcome).increment(0);
    }
    for outcome in ["completed", "failed"] {
        metrics::counter!("payroll_payouts_settled_total", "outcome" => outcome).increment(0);
    }
    for outcome in ["succeeded", "failed"] {
        metrics::counter!("payroll_webhook_deliveries_total", "outcome" => outcome).increment(0);
    }
    for outcome in ["sent", "failed", "transport_down"] {
        metrics::counter!("payroll_emails_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("payroll_webhook_endpoints_disabled_total").increment(0);
    metrics::counter!("payroll_stuck_payouts_reported_total").increment(0);
    metrics::counter!("payroll_audit_dropped_total").increment(0);
}

/// The outcomes of `payroll_withdrawals_total`.
pub const WITHDRAWAL_OUTCOMES: &[&str] = &[
    "accepted",
    "rejected",
    "rate_limited",
    "ambiguous",
    "credentials_refused",
    "not_sent",
];

/// Copies every kind's mailbox depth into `payroll_actor_mailbox_depth`; called as the
/// metrics are read.
pub fn publish_mailbox_depths() {
    for kind in ActorKind::ALL {
        metrics::gauge!("payroll_actor_mailbox_depth", "actor" => kind.as_str())
            .set(DEPTH[kind.index()].load(Ordering::Relaxed) as f64);
    }
}

/// Call from `Actor::stopped`.
pub fn actor_stopped(kind: ActorKind) {
    ALIVE[kind.index()].fetch_sub(1, Ordering::Relaxed);
    metrics::gauge!("payroll_actors_alive", "actor" => kind.as_str()).decrement(1.0);
}

/// Call from `Supervised::restarting`.
pub fn actor_restarted(kind: ActorKind) {
    metrics::counter!("payroll_actor_restarts_total", "actor" => kind.as_str()).increment(1);
}

/// One message more in a mailbox of this kind (for senders that cannot use [`CountedSend`],
/// such as a `Recipient`).
pub fn enqueued(kind: ActorKind) {
    DEPTH[kind.index()].fetch_add(1, Ordering::Relaxed);
}

/// `count` items of this kind put back to wait again (a batch that could not be written).
pub fn requeued(kind: ActorKind, count: usize) {
    DEPTH[kind.index()].fetch_add(count as i64, Ordering::Relaxed);
}

/// `count` waiting items of this kind taken off the count at once (for an actor that takes a
/// shared buffer whole rather than one message at a time).
pub fn dequeued(kind: ActorKind, count: usize) {
    if count == 0 {
        return;
    }
    DEPTH[kind.index()].fetch_sub(count as i64, Ordering::Relaxed);
}

/// Held by a handler while it handles one message: taking it off the mailbox count, then, when
/// dropped, counting the message handled and how long that took. A handler that answers with
/// a future moves it into the future, so the time covers the whole answer.
#[must_use = "the handling is recorded when this is dropped"]
pub struct Handling {
    kind: ActorKind,
    message: &'static str,
    start: Instant,
}

impl Handling {
    pub fn new(kind: ActorKind, message: &'static str) -> Handling {
        DEPTH[kind.index()].fetch_sub(1, Ordering::Relaxed);
        Handling {
            kind,
            message,
            start: Instant::now(),
        }
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        let labels = [("actor", self.kind.as_str()), ("message", self.message)];
        metrics::counter!("payroll_actor_messages_handled_total", &labels).increment(1);
        metrics::histogram!("payroll_actor_handler_duration_seconds", &labels)
            .record(self.start.elapsed().as_secs_f64());
    }
}

/// How many messages may wait for one kind of actor (all actors of the kind together) before
/// senders that can say no, the API's handlers, are refused rather than queue more.
pub const MAILBOX_LIMIT: i64 = 4096;

/// The audit writer's bound, larger: an entry waiting is a few hundred bytes, and 16,384 of
/// them are a fifth of a second of reads at 80,000 a second, time for one batch write held up
/// (a checkpoint of SQLite's log, a slow flush of PostgreSQL's) to end without a read refused.
pub const AUDIT_BACKLOG_LIMIT: i64 = 16_384;

/// A kind of actor has `limit` messages waiting: the message was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {} has {limit} messages waiting", .kind.as_str())]
pub struct Overloaded {
    pub kind: ActorKind,
    pub limit: i64,
}

/// Messages now waiting for actors of this kind, in this process.
pub fn mailbox_depth(kind: ActorKind) -> i64 {
    DEPTH[kind.index()].load(Ordering::Relaxed)
}

/// Whether one more message may be queued for actors of this kind by a sender that can say no
/// (below `limit` waiting); a refusal is counted in `payroll_actor_messages_refused_total`.
pub fn admit(kind: ActorKind, limit: i64) -> Result<(), Overloaded> {
    if mailbox_depth(kind) < limit {
        return Ok(());
    }
    metrics::counter!("payroll_actor_messages_refused_total", "actor" => kind.as_str())
        .increment(1);
    Err(Overloaded { kind, limit })
}

/// Sending that counts the message into the receiver's mailbox depth.
pub trait CountedSend<A: Observed> {
    /// `Addr::send`, counted, unless `limit` messages already wait for actors of this kind:
    /// then the message is handed back unsent, so a flood of requests is refused (503) instead
    /// of queued without bound.
    fn bounded_send<M>(&self, msg: M, limit: i64) -> Result<actix::dev::Request<A, M>, Overloaded>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>;

    /// `Addr::do_send`, counted.
    fn counted_do_send<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>;

    /// `Addr::send`, counted.
    fn counted_send<M>(&self, msg: M) -> actix::dev::Request<A, M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>;
}

impl<A: Observed> CountedSend<A> for Addr<A> {
    fn bounded_send<M>(&self, msg: M, limit: i64) -> Result<actix::dev::Request<A, M>, Overloaded>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        admit(A::KIND, limit)?;
        Ok(self.counted_send(msg))
    }

    fn counted_do_send<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        // A closed mailbox drops the message: it is never handled, so it is not counted.
        if self.connected() {
            enqueued(A::KIND);
        }
        self.do_send(msg);
    }

    fn counted_send<M>(&self, msg: M) -> actix::dev::Request<A, M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        if self.connected() {
            enqueued(A::KIND);
        }
        self.send(msg)
    }
}

/// Withdrawals answered by the exchange, by outcome (one of [`WITHDRAWAL_OUTCOMES`]).
pub fn withdrawals(outcome: &'static str, count: u64) {
    if count > 0 {
        metrics::counter!("payroll_withdrawals_total", "outcome" => outcome).increment(count);
    }
}

/// Payouts settled by the exchange's word, by outcome (`completed`, `failed`).
pub fn payouts_settled(completed: usize, failed: usize) {
    for (outcome, count) in [("completed", completed), ("failed", failed)] {
        if count > 0 {
            metrics::counter!("payroll_payouts_settled_total", "outcome" => outcome)
                .increment(count as u64);
        }
    }
}

/// The exchange provider in force (`sandbox`, `okx`, `binance`): 1 on its label.
pub fn exchange_provider(name: &'static str) {
    metrics::gauge!("payroll_exchange_provider", "provider" => name).set(1.0);
}

/// How long a batch of withdrawals waited for rate-limit tokens.
pub fn rate_limit_wait(seconds: f64) {
    metrics::histogram!("payroll_exchange_rate_limit_wait_seconds").record(seconds);
}

/// Whole tokens left in the exchange's withdrawal bucket.
pub fn rate_limit_tokens(tokens: f64) {
    metrics::gauge!("payroll_exchange_rate_limit_tokens").set(tokens);
}

/// Withdrawals waiting for a token at the exchange actor.
pub fn withdrawals_queued(count: usize) {
    metrics::gauge!("payroll_exchange_withdrawals_queued").set(count as f64);
}

/// Webhook attempts recorded, by outcome (`succeeded`, `failed`).
pub fn webhook_deliveries(outcome: &'static str, count: u64) {
    if count > 0 {
        metrics::counter!("payroll_webhook_deliveries_total", "outcome" => outcome)
            .increment(count);
    }
}

/// An endpoint disabled by the dispatcher (410, or retries exhausted).
pub fn webhook_endpoint_disabled() {
    metrics::counter!("payroll_webhook_endpoints_disabled_total").increment(1);
}

/// Emails handed to the transport, by outcome (`sent`, `failed`: an attempt that failed,
/// `transport_down`: the mail server could not be reached).
pub fn emails(outcome: &'static str, count: u64) {
    if count > 0 {
        metrics::counter!("payroll_emails_total", "outcome" => outcome).increment(count);
    }
}

/// Payouts newly found stuck at the exchange (audit entry written).
pub fn stuck_payouts(count: u64) {
    if count > 0 {
        metrics::counter!("payroll_stuck_payouts_reported_total").increment(count);
    }
}

#[cfg(test)]
mod tests {
    use actix::{Context, Handler, Message};

    use super::*;

    struct Echo;

    impl Actor for Echo {
        type Context = Context<Self>;
    }

    impl Observed for Echo {
        const KIND: ActorKind = ActorKind::Mailer;
    }

    #[derive(Message)]
    #[rtype(result = "u32")]
    struct Ping(u32);

    impl Handler<Ping> for Echo {
        type Result = u32;

        fn handle(&mut self, msg: Ping, _: &mut Context<Self>) -> u32 {
            let _handling = Handling::new(Self::KIND, "Ping");
            msg.0
        }
    }

    #[actix_rt::test]
    async fn a_full_mailbox_refuses_instead_of_queueing() {
        let addr = Echo.start();
        let limit = mailbox_depth(ActorKind::Mailer) + 3;
        // The actor runs only when this task yields: the three messages wait in its mailbox.
        let queued: Vec<_> = (0..3)
            .map(|i| addr.bounded_send(Ping(i), limit).expect("room"))
            .collect();
        assert_eq!(
            addr.bounded_send(Ping(9), limit).err(),
            Some(Overloaded {
                kind: ActorKind::Mailer,
                limit
            })
        );
        let mut answers = Vec::new();
        for request in queued {
            answers.push(request.await.expect("answered"));
        }
        assert_eq!(answers, vec![0, 1, 2]);
        // Handled, they leave room again.
        let request = addr.bounded_send(Ping(4), limit).expect("room again");
        assert_eq!(request.await.expect("answered"), 4);
    }
}
