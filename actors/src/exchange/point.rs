//! The funds side of the `ExchangeActor` (CONTRACT §7): holds released as soon as the
//! exchange has answered, and the figures of one consistent point.

use payroll_entities::db::Db;

use super::{
    Balances, ExchangeError, ExchangeProvider, WithdrawalOutcome, WithdrawalRequest, holds,
    parse_client_id,
};

/// Releases the holds of attempts whose answer ends their claim on the balance, before the
/// answers go anywhere: accepted (the exchange's balance has dropped) or definitely refused on
/// a first send. A refusal of a resend proves nothing (the first send may have been accepted)
/// and becomes an unknown answer, looked up by client id. When the ledger cannot be written,
/// the holds stay until the run records the outcome and releases them itself.
pub(super) async fn settle_holds(
    db: &Db,
    requests: &[WithdrawalRequest],
    resends: &[bool],
    outcomes: &mut [WithdrawalOutcome],
) {
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for ((request, resend), outcome) in requests.iter().zip(resends).zip(outcomes.iter_mut()) {
        let Some((payout_id, attempt)) = parse_client_id(&request.client_id) else {
            continue;
        };
        match outcome {
            WithdrawalOutcome::Accepted { .. } => accepted.push((payout_id.to_owned(), attempt)),
            WithdrawalOutcome::Rejected { reason } if *resend => {
                *outcome = WithdrawalOutcome::Ambiguous {
                    reason: format!("a resend was refused ({reason}); the first send is looked up"),
                };
            }
            WithdrawalOutcome::Rejected { .. } => refused.push((payout_id.to_owned(), attempt)),
            _ => {}
        }
    }
    if accepted.is_empty() && refused.is_empty() {
        return;
    }
    let written = async {
        let tx = db.begin_write().await?;
        holds::release(&*tx, &accepted, holds::Release::Accepted).await?;
        holds::release(&*tx, &refused, holds::Release::Refused).await?;
        tx.commit().await
    }
    .await;
    if let Err(err) = written {
        tracing::warn!(error = %err, "holds of answered withdrawals could not be released now; the runs release them");
    }
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
        let reserved = holds::reserved(&db.conn).await?;
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
