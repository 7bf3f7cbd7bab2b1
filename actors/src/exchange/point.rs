//! The funds side of the `ExchangeActor` (CONTRACT §7): holds released as soon as the
//! exchange has answered (after each send was fenced by the run's lease), and the figures of
//! one consistent point.

use payroll_entities::db::Db;

use super::{
    Balances, ExchangeError, ExchangeProvider, WithdrawalOutcome, WithdrawalRequest, fence, holds,
    outcome::{Sent, Verdict, of_answer},
    parse_client_id,
};

/// Sends one batch: each send stamped under the run's lease first (those of runs this
/// instance no longer holds are not sent), then the provider's answers, and the holds of
/// accepted attempts released before the answers go anywhere (the exchange's balance has
/// dropped). Sends the exchange turned away with its rate limit are not counted.
/// When the ledger cannot be written, the holds stay until the run records the outcome and
/// releases them itself. Answers (client id, outcome, which send) in the batch's order, and
/// whether the holds of the accepted ones were released.
pub(super) async fn send_fenced(
    db: &Db,
    owner: &str,
    provider: &dyn ExchangeProvider,
    requests: Vec<WithdrawalRequest>,
    send_deadline: std::time::Duration,
) -> (Vec<(String, WithdrawalOutcome, Sent)>, bool) {
    let ids: Vec<String> = requests.iter().map(|r| r.client_id.clone()).collect();
    // Measured from before the stamp: whatever goes, goes within the deadline of it.
    let deadline = std::time::Instant::now() + send_deadline;
    let stamped = match fence::stamp_sends(db, owner, &ids, db.clock_now()).await {
        Ok(stamped) => stamped,
        Err(err) => {
            tracing::warn!(error = %err, "sends could not be stamped; nothing was sent");
            let answers = ids
                .into_iter()
                .map(|id| {
                    let reason = format!("the send could not be recorded: {err}");
                    (id, WithdrawalOutcome::NotSent { reason }, Sent::First)
                })
                .collect();
            return (answers, false);
        }
    };
    let going: Vec<WithdrawalRequest> = requests
        .iter()
        .filter(|r| stamped.contains_key(&r.client_id))
        .cloned()
        .collect();
    let mut outcomes = if going.is_empty() {
        Vec::new()
    } else {
        provider.withdraw(&going, deadline).await
    }
    .into_iter();
    let answers: Vec<(String, WithdrawalOutcome, Sent)> = requests
        .into_iter()
        .map(|r| match stamped.get(&r.client_id) {
            Some(count) => {
                let outcome = outcomes.next().unwrap_or(WithdrawalOutcome::Ambiguous {
                    reason: "the exchange gave no answer for this withdrawal".into(),
                });
                let sent = if *count > 1 { Sent::Resend } else { Sent::First };
                (r.client_id, outcome, sent)
            }
            None => (
                r.client_id,
                WithdrawalOutcome::NotSent {
                    reason: "this instance no longer holds the run's lease, or the payout is no longer waiting for this send".into(),
                },
                Sent::First,
            ),
        })
        .collect();
    let released = settle_answers(db, &answers).await;
    (answers, released)
}

/// Releases the holds of accepted sends and unstamps the ones the exchange turned away with
/// its rate limit; answers whether that was written.
async fn settle_answers(db: &Db, answers: &[(String, WithdrawalOutcome, Sent)]) -> bool {
    let mut accepted = Vec::new();
    let mut turned_away = Vec::new();
    for (client_id, outcome, sent) in answers {
        if let WithdrawalOutcome::RateLimited { .. } = outcome {
            turned_away.push(client_id.clone());
        }
        let Some((payout_id, attempt)) = parse_client_id(client_id) else {
            continue;
        };
        // Only an acceptance is settled here: the balance has dropped already, so the hold
        // must go now. A refusal keeps its hold until the run records the payout FAILED in the
        // same transaction, so that an answer lost in a crash never leaves a PENDING payout
        // without its hold.
        if let Verdict::Accepted { .. } = of_answer(*sent, outcome) {
            accepted.push((payout_id.to_owned(), attempt));
        }
    }
    if accepted.is_empty() && turned_away.is_empty() {
        return true;
    }
    let written = async {
        let tx = db.begin_write().await?;
        // Payouts before holds before the counter: the order every transaction takes them in.
        fence::unstamp(&*tx, &turned_away).await?;
        holds::release(&*tx, &accepted, holds::Release::Accepted).await?;
        tx.commit().await
    }
    .await;
    if let Err(err) = written {
        tracing::warn!(error = %err, "holds of accepted withdrawals could not be released now; the runs release them");
        return false;
    }
    true
}

/// One consistent point: the reserved total first, then the exchange balance (a hold another
/// instance releases in between can only make the figure smaller, never larger), and each
/// waiting run's own holds.
pub(super) async fn read_point(
    db: &Db,
    provider: &dyn ExchangeProvider,
    runs: &[Option<String>],
) -> Vec<Result<PointFigures, ExchangeError>> {
    let read = async {
        // Decisions are counted with the reserved total, before the exchange is asked: one
        // committed after this read is seen by the decision taken on these figures.
        let (reserved, decisions) = holds::reserved(&db.conn).await?;
        let balances = provider.balances().await?;
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            let held_by_run = match run {
                Some(run_id) => holds::held_by_run(&db.conn, run_id).await?,
                None => 0,
            };
            out.push(PointFigures {
                balances: balances.clone(),
                reserved,
                held_by_run,
                decisions,
            });
        }
        Ok::<_, ExchangeError>(out)
    }
    .await;
    match read {
        Ok(out) => out.into_iter().map(Ok).collect(),
        Err(err) => runs.iter().map(|_| Err(err.clone())).collect(),
    }
}

/// The account's figures at one consistent point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointFigures {
    pub balances: Balances,
    /// Σ active holds of the account.
    pub reserved: i64,
    /// Σ active holds of the run asked about (0 when none was named).
    pub held_by_run: i64,
    /// Funding decisions committed before these figures were read.
    pub decisions: i64,
}

impl PointFigures {
    /// The exchange's available balance.
    pub fn available(&self) -> i64 {
        self.balances.available.0
    }

    /// available − reserved (negative when money left the exchange from outside).
    pub fn unreserved(&self) -> i64 {
        self.available().saturating_sub(self.reserved)
    }

    /// What other runs hold.
    pub fn reserved_by_others(&self) -> i64 {
        self.reserved.saturating_sub(self.held_by_run)
    }
}

/// The account's figures at the next consistent point (see the module docs), with the holds of
/// `run_id` where one is named.
#[derive(actix::Message)]
#[rtype(result = "Result<PointFigures, ExchangeError>")]
pub struct FundsPoint {
    pub run_id: Option<String>,
}
