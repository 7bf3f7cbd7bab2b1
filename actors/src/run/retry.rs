//! FAILED → PAYING_OUT: a finished run's failed payouts (or one of them) paid again. Each takes
//! its employee's current wallet and network and the exchange's current fee there (CONTRACT §6,
//! §7), a new attempt and a new email; the funds are checked and held for them. The payouts are
//! worked a page at a time in the funding decision's one transaction, so memory does not grow
//! with the run, and a refused retry (an unpayable payout, too little money) changes nothing.

use payroll_entities::{Cents, PayoutStatus, payout, time};
use serde_json::{Value, json};
use std::collections::HashMap;

use super::{
    answer::{Done, finish_request, refused, run_action},
    deps::RunDeps,
    funds::funds_transaction,
    jobs::{new_job, start_job, with_payouts},
    messages::{RunCommand, RunError},
    pricing::{quote_fees, wallet_held},
    store::{self, Snapshot},
    transitions::{self, PayoutOp, RunOp, recount},
};
use crate::{
    acknowledgement::{Acknowledgement, Outcome},
    audit::{AuditRecord, FIRST_IDS, status_change},
    exchange::{Quote, holds},
};

/// Failed payouts read and rewritten per page.
const RETRY_PAGE: u64 = 2000;
/// A refused retry lists at most this many unpayable payouts.
const MAX_ERRORS: usize = 1000;

/// What the retried payouts add up to, gathered page by page.
#[derive(Default)]
struct Tally {
    count: i64,
    required: Option<Cents>,
    fee_change: i64,
    /// The first payouts whose wallet or network changed since their last attempt.
    address_changes: Vec<Value>,
    address_change_count: i64,
    first_ids: Vec<String>,
    unpayable: Vec<(String, String)>,
}

/// FAILED → PAYING_OUT for every failed payout (or `only` one of them).
pub(super) async fn retry(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
    only: Option<String>,
) -> Result<Done, RunError> {
    let Snapshot { run, job: previous } = snapshot;
    let command = match &only {
        Some(id) => RunCommand::RetryPayout {
            payout_id: id.clone(),
        },
        None => RunCommand::RetryFailed,
    };
    // Judged before anything is quoted or locked: the payout named, then the run.
    let failed = match &only {
        Some(id) => {
            check_retriable(&store::payout_by_id(&deps.db.conn, &run.id, id).await?)?;
            1
        }
        None => store::count_in_status(&deps.db.conn, &run.id, PayoutStatus::Failed).await?,
    };
    let next = transitions::apply(run.status, RunOp::RetryFailed).map_err(|_| match &only {
        Some(_) => RunError::Refused {
            refused: transitions::refusal(run.status),
            operation: "retried",
            hint: Some("A failed payout is retried once its run has finished (FAILED); sync the run and try again then.".into()),
        },
        None => refused(&run, &command),
    })?;
    if failed == 0 {
        return Err(refused(&run, &command));
    }
    // Quoted before the transaction: no write waits on the exchange.
    let quotes = quote_fees(deps).await?;
    let (tx, f, _funds) = funds_transaction(deps, &run.id, Some(0)).await?;
    // Another instance may have retried it meanwhile: judged again against the stored run.
    store::lock_version(&*tx, &run, |stored| {
        transitions::apply(stored.status, RunOp::RetryFailed)
            .map(|_| ())
            .map_err(|_| refused(stored, &command))
    })
    .await?;
    let mut job = new_job(deps, &run.id, 0);
    store::insert_job(&*tx, &job).await?;
    let mut after = run.clone();
    let mut tally = Tally {
        required: Some(Cents(0)),
        ..Tally::default()
    };
    let mut last: Option<payout::Model> = None;
    let now = time::now();
    loop {
        let mut page = match &only {
            Some(id) if last.is_none() => {
                let p = store::payout_by_id(&*tx, &run.id, id).await?;
                check_retriable(&p)?;
                vec![p]
            }
            Some(_) => break,
            None => {
                store::payouts_page(
                    &*tx,
                    &run.id,
                    PayoutStatus::Failed,
                    last.as_ref().map(|p| p.id.as_str()),
                    RETRY_PAGE,
                )
                .await?
            }
        };
        if page.is_empty() {
            break;
        }
        let employees =
            store::employees_by_id(&*tx, page.iter().map(|p| p.employee_id.clone())).await?;
        for p in page.iter_mut() {
            tally.take(p, employees.get(&p.employee_id), &quotes, now);
        }
        if tally.unpayable.len() >= MAX_ERRORS {
            break;
        }
        if tally.unpayable.is_empty() {
            for p in page.iter_mut() {
                restart(p, &job.id, now);
                recount(
                    &mut after,
                    None,
                    PayoutStatus::Failed,
                    PayoutStatus::Pending,
                );
            }
            store::save_payouts(&*tx, &page).await?;
            store::reset_sends(&*tx, &page.iter().map(|p| p.id.clone()).collect::<Vec<_>>())
                .await?;
        }
        last = page.pop();
    }
    if !tally.unpayable.is_empty() {
        tally.unpayable.truncate(MAX_ERRORS);
        return Err(RunError::Invalid(tally.unpayable));
    }
    if tally.count == 0 {
        return Err(refused(&run, &command));
    }
    let required = tally.required.ok_or_else(|| {
        RunError::Invalid(vec![(
            "payouts".into(),
            "the amounts add up to more than can be represented".into(),
        )])
    })?;
    let f = f.with_required(required.0);
    if !f.sufficient() {
        return Err(RunError::InsufficientFunds {
            required: f.required,
            available: f.available,
            deficit: f.deficit,
        });
    }
    // The run's PENDING payouts are the ones just retried: a FAILED run has no other.
    if holds::hold_pending_of_run(&*tx, &run.id).await? != required.0 {
        return Err(RunError::Stale);
    }
    job = with_payouts(deps, job, tally.count);
    after.total_fees_usd_cents += tally.fee_change;
    after.completed_at = None;
    start_job(&tx, run.version, next, &mut after, &mut job).await?;
    let mut details = status_change(run.status, next);
    details["job_id"] = json!(job.id);
    details["retried_payouts"] = json!(tally.count);
    details["first_payout_ids"] = json!(tally.first_ids);
    details["address_changes"] = json!(tally.address_changes);
    details["address_change_count"] = json!(tally.address_change_count);
    details["previous_job_id"] = json!(previous.map(|j| j.id));
    let snapshot = Snapshot {
        run: after.clone(),
        job: Some(job.clone()),
    };
    let (outcome, action) = match only {
        Some(_) => {
            let p = last.ok_or(RunError::Stale)?;
            let action = AuditRecord {
                action: "PAYOUT_RETRIED",
                resource_type: "payout",
                resource_id: p.id.clone(),
                details,
            };
            (Outcome::Payout(p), action)
        }
        None => (
            Outcome::Run {
                run: after,
                job: Some(job),
            },
            run_action("PAYROLL_RUN_RETRIED", &snapshot.run, details),
        ),
    };
    finish_request(tx, ack, outcome, action, snapshot, true).await
}

/// Only a FAILED payout is retried.
fn check_retriable(p: &payout::Model) -> Result<(), RunError> {
    transitions::apply_payout(p.status, PayoutOp::Retry).map_err(|refused| {
        RunError::PayoutRefused {
            payout_id: p.id.clone(),
            refused,
            operation: "retried",
            hint: "Only a FAILED payout can be retried.".into(),
        }
    })?;
    Ok(())
}

/// A payout as its next attempt starts: PENDING in `job_id`, with nothing of the last
/// attempt's withdrawal left on it.
fn restart(p: &mut payout::Model, job_id: &str, now: chrono::DateTime<chrono::Utc>) {
    p.status = PayoutStatus::Pending;
    p.attempt += 1;
    p.job_id = Some(job_id.to_owned());
    p.client_withdrawal_id = None;
    p.cex_withdrawal_id = None;
    p.on_chain_tx_hash = None;
    p.block_explorer_url = None;
    p.failed_reason = None;
    p.initiated_at = None;
    p.send_count = 0;
    p.last_sent_at = None;
    p.stuck_since = None;
    p.completed_at = None;
    p.updated_at = now;
}

/// Addresses changes kept for the audit entry; the rest are counted.
const ADDRESS_CHANGES_SHOWN: usize = 20;

impl Tally {
    /// Takes `p` into the retry: its employee's current wallet and network, the current fee
    /// there, and what would keep it from being paid at `now`.
    fn take(
        &mut self,
        p: &mut payout::Model,
        employee: Option<&payroll_entities::employee::Model>,
        quotes: &HashMap<payroll_entities::Network, Quote>,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        if let Some(e) = employee {
            // A retry pays the current wallet: one changed lately waits for its hold (§16).
            self.unpayable.extend(wallet_held(e, &p.id, now));
            if e.wallet_address != p.wallet_address || e.network != p.network {
                self.address_change_count += 1;
                if self.address_changes.len() < ADDRESS_CHANGES_SHOWN {
                    self.address_changes.push(json!({
                        "payout_id": p.id,
                        "wallet_address": {"before": p.wallet_address, "after": e.wallet_address},
                        "network": {"before": p.network, "after": e.network},
                    }));
                }
            }
            p.wallet_address = e.wallet_address.clone();
            p.network = e.network;
        }
        match quotes.get(&p.network) {
            Some(quote) => {
                self.fee_change += quote.fee.0 - p.fee_usd_cents;
                p.fee_usd_cents = quote.fee.0;
                // The exchange's minimum and step, as at confirm: the fee may have moved.
                if let Some(why) = quote.refusal(Cents(p.amount_usd_cents), p.network) {
                    self.unpayable
                        .push((format!("payouts[{}].amount_usd_cents", p.id), why));
                }
            }
            None => self.unpayable.push((
                format!("payouts[{}].network", p.id),
                format!(
                    "the exchange cannot withdraw USDC on {} now; change the employee's network and retry",
                    p.network
                ),
            )),
        }
        self.count += 1;
        if self.first_ids.len() < FIRST_IDS {
            self.first_ids.push(p.id.clone());
        }
        self.required = self
            .required
            .and_then(|r| r.checked_add(Cents(p.amount_usd_cents.saturating_add(p.fee_usd_cents))));
    }
}
