//! What the exchange says about a run's withdrawals, applied to its payouts: answers to sends,
//! look-ups by client withdrawal id, stuck payouts, and the run's completion once every payout
//! is final. Each change commits with its events and audit entries in one transaction.

use chrono::{DateTime, Duration, Utc};
use payroll_entities::{Cents, JobStatus, PayoutStatus, RunStatus, job, payout, time};
use serde_json::json;

use super::{
    deps::RunDeps,
    messages::RunError,
    store::{self, Snapshot},
    transitions::{self, RunOp, recount},
};
use crate::{
    audit::{self, first_ids, status_change, system_entry},
    events::{insert_events, payout_event, run_event},
    exchange::{
        RemoteStatus, WithdrawalOutcome, WithdrawalRequest, actor::Lookup, holds, parse_client_id,
    },
    telemetry::CountedSend,
};

/// A payout's change learned from the exchange.
enum Change {
    Accepted {
        cex_id: String,
    },
    Completed {
        cex_id: String,
        tx_hash: String,
        explorer_url: Option<String>,
    },
    Failed {
        cex_id: Option<String>,
        reason: String,
    },
}

/// What recording exchange answers leaves to do.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Client ids to look up later (accepted, or answered ambiguously).
    pub watch: Vec<String>,
    /// Still pending at the exchange.
    pub still_pending: Vec<String>,
    /// Unknown at the exchange past the grace period: to send once more.
    pub resend: Vec<WithdrawalRequest>,
}

/// Applies changes to payouts, the run's and job's counters and events, in one transaction.
async fn apply_changes(
    deps: &RunDeps,
    snapshot: Snapshot,
    changes: Vec<(String, Change)>,
    resent: &[String],
) -> Result<Snapshot, RunError> {
    if changes.is_empty() && resent.is_empty() {
        return Ok(snapshot);
    }
    let Snapshot { run, mut job } = snapshot;
    let tx = deps.db.begin_write().await?;
    let wanted: Vec<String> = changes
        .iter()
        .map(|(client_id, _)| client_id)
        .chain(resent.iter())
        .filter_map(|c| parse_client_id(c).map(|(id, _)| id.to_owned()))
        .collect();
    let mut payouts = store::payouts_by_id(&*tx, &wanted).await?;
    let now = time::now();
    let mut after = run.clone();
    let mut changed = Vec::new();
    let mut events = Vec::new();
    let (mut completed, mut failed) = (Vec::new(), Vec::new());
    let mut ended = Vec::new();
    let in_job_of = |p: &payout::Model, job: &Option<job::Model>| {
        p.job_id.is_some() && p.job_id == job.as_ref().map(|j| j.id.clone())
    };
    for (client_id, change) in changes {
        let Some((payout_id, _)) = parse_client_id(&client_id) else {
            continue;
        };
        let Some(mut p) = payouts.remove(payout_id) else {
            continue;
        };
        let before = p.status;
        // An answer about another attempt than the payout's current one changes nothing.
        if before.is_terminal() || p.client_withdrawal_id.as_deref() != Some(client_id.as_str()) {
            continue;
        }
        let in_job = in_job_of(&p, &job);
        p.updated_at = now;
        match change {
            Change::Accepted { cex_id } => {
                if before != PayoutStatus::Pending {
                    continue;
                }
                p.status = PayoutStatus::Processing;
                p.cex_withdrawal_id = Some(cex_id);
                events.push(payout_event("payout.processing", &p));
            }
            Change::Completed {
                cex_id,
                tx_hash,
                explorer_url,
            } => {
                if before == PayoutStatus::Pending {
                    // Accepted and settled since we last heard: both steps are told.
                    p.cex_withdrawal_id = Some(cex_id.clone());
                    p.status = PayoutStatus::Processing;
                    events.push(payout_event("payout.processing", &p));
                }
                p.status = PayoutStatus::Completed;
                p.cex_withdrawal_id = Some(cex_id);
                p.on_chain_tx_hash = Some(tx_hash);
                p.block_explorer_url = explorer_url;
                p.completed_at = Some(now);
                completed.push(p.id.clone());
                events.push(payout_event("payout.completed", &p));
            }
            Change::Failed { cex_id, reason } => {
                // A refusal (no exchange id) only ever concerns a withdrawal not yet accepted.
                if cex_id.is_none() && before != PayoutStatus::Pending {
                    continue;
                }
                p.status = PayoutStatus::Failed;
                if cex_id.is_some() {
                    p.cex_withdrawal_id = cex_id;
                }
                p.failed_reason = Some(reason);
                failed.push(p.id.clone());
                events.push(payout_event("payout.failed", &p));
            }
        }
        if before == PayoutStatus::Pending {
            // The attempt's claim on the balance has ended: accepted (the exchange's balance
            // dropped), or failed without a withdrawal. The exchange actor may have released
            // the hold already; releasing again changes nothing.
            let why = match (&p.status, &p.cex_withdrawal_id) {
                (PayoutStatus::Failed, None) => holds::Release::Refused,
                (PayoutStatus::Failed, Some(_)) => holds::Release::Failed,
                _ => holds::Release::Accepted,
            };
            ended.push(((p.id.clone(), p.attempt), why));
        }
        tracing::debug!(payout_id = %p.id, %client_id, before = ?before, after = ?p.status, "payout changed");
        recount(
            &mut after,
            if in_job { job.as_mut() } else { None },
            before,
            p.status,
        );
        changed.push(p);
    }
    for client_id in resent {
        if let Some(p) = parse_client_id(client_id).and_then(|(id, _)| payouts.get_mut(id)) {
            p.initiated_at = Some(now);
            p.updated_at = now;
            changed.push(p.clone());
        }
    }
    store::save_payouts(&*tx, &changed).await?;
    for why in [
        holds::Release::Accepted,
        holds::Release::Refused,
        holds::Release::Failed,
    ] {
        let attempts: Vec<(String, i32)> = ended
            .iter()
            .filter(|(_, w)| *w == why)
            .map(|(a, _)| a.clone())
            .collect();
        if !attempts.is_empty() {
            holds::release(&*tx, &attempts, why).await?;
        }
    }
    if !changed.is_empty() {
        store::save_run(&*tx, run.version, &mut after).await?;
        if let Some(job) = job.as_mut() {
            store::save_job(&*tx, job).await?;
        }
    }
    insert_events(&tx, events).await?;
    if !completed.is_empty() {
        audit::insert(&*tx, system_entry("PAYOUTS_COMPLETED", "payroll_run", &run.id, json!({
            "count": completed.len(), "first_payout_ids": first_ids(completed.iter().map(String::as_str)),
        })))
        .await?;
    }
    if !failed.is_empty() {
        audit::insert(&*tx, system_entry("PAYOUTS_FAILED", "payroll_run", &run.id, json!({
            "count": failed.len(), "first_payout_ids": first_ids(failed.iter().map(String::as_str)),
        })))
        .await?;
    }
    tx.commit().await?;
    Ok(Snapshot { run: after, job })
}

/// Records the exchange's answers to withdrawals this run handed over.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id, answers = results.len()))]
pub async fn record_results(
    deps: &RunDeps,
    snapshot: Snapshot,
    results: Vec<(WithdrawalRequest, WithdrawalOutcome)>,
) -> Result<(Snapshot, Recorded), RunError> {
    let mut recorded = Recorded::default();
    let mut changes = Vec::new();
    for (request, outcome) in results {
        if parse_client_id(&request.client_id).is_none() {
            continue;
        }
        match outcome {
            WithdrawalOutcome::Accepted { cex_id } => {
                recorded.watch.push(request.client_id.clone());
                changes.push((request.client_id.clone(), Change::Accepted { cex_id }));
            }
            WithdrawalOutcome::Rejected { reason } => {
                changes.push((
                    request.client_id.clone(),
                    Change::Failed {
                        cex_id: None,
                        reason,
                    },
                ));
            }
            WithdrawalOutcome::Ambiguous { reason } => {
                let payout_id = parse_client_id(&request.client_id).map_or("", |(id, _)| id);
                tracing::warn!(payout_id, client_id = %request.client_id, %reason, "ambiguous withdrawal answer; it will be looked up");
                recorded.watch.push(request.client_id.clone());
            }
            WithdrawalOutcome::RateLimited { .. } => recorded.watch.push(request.client_id.clone()),
        }
    }
    let snapshot = apply_changes(deps, snapshot, changes, &[]).await?;
    Ok((snapshot, recorded))
}

/// Asks the exchange about these client ids and records what it says.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id, client_ids = client_ids.len()))]
pub async fn reconcile(
    deps: &RunDeps,
    snapshot: Snapshot,
    client_ids: Vec<String>,
) -> Result<(Snapshot, Recorded), RunError> {
    let mut recorded = Recorded::default();
    if client_ids.is_empty() {
        return Ok((snapshot, recorded));
    }
    let statuses = deps
        .exchange
        .counted_send(Lookup(client_ids.clone()))
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(|e| RunError::Exchange(e.to_string()))?;
    let ids: Vec<String> = client_ids
        .iter()
        .filter_map(|c| parse_client_id(c).map(|(id, _)| id.to_owned()))
        .collect();
    let payouts = store::payouts_by_id(&deps.db.conn, &ids).await?;
    let grace = Duration::milliseconds(deps.exchange_settings.reconcile_grace_ms as i64);
    let now: DateTime<Utc> = time::now();
    let mut changes = Vec::new();
    let mut resend_ids = Vec::new();
    for client_id in client_ids {
        let Some((payout_id, _)) = parse_client_id(&client_id) else {
            continue;
        };
        let Some(p) = payouts.get(payout_id) else {
            continue;
        };
        // Only the current attempt counts.
        if p.client_withdrawal_id.as_deref() != Some(client_id.as_str()) || p.status.is_terminal() {
            continue;
        }
        match statuses
            .get(&client_id)
            .cloned()
            .unwrap_or(RemoteStatus::Unknown)
        {
            RemoteStatus::Unknown => {
                if p.status == PayoutStatus::Pending
                    && p.initiated_at.is_none_or(|t| now - t >= grace)
                {
                    resend_ids.push(client_id.clone());
                    recorded.resend.push(WithdrawalRequest {
                        client_id: client_id.clone(),
                        amount: Cents(p.amount_usd_cents),
                        fee: Cents(p.fee_usd_cents),
                        network: p.network,
                        address: p.wallet_address.clone(),
                    });
                } else {
                    recorded.still_pending.push(client_id);
                }
            }
            RemoteStatus::Pending { cex_id } => {
                if p.status == PayoutStatus::Pending {
                    changes.push((client_id.clone(), Change::Accepted { cex_id }));
                }
                recorded.still_pending.push(client_id);
            }
            RemoteStatus::Completed {
                cex_id,
                tx_hash,
                explorer_url,
            } => {
                changes.push((
                    client_id.clone(),
                    Change::Completed {
                        cex_id,
                        tx_hash,
                        explorer_url,
                    },
                ));
            }
            RemoteStatus::Failed { cex_id, reason } => {
                changes.push((
                    client_id.clone(),
                    Change::Failed {
                        cex_id: Some(cex_id),
                        reason,
                    },
                ));
            }
        }
    }
    let snapshot = apply_changes(deps, snapshot, changes, &resend_ids).await?;
    Ok((snapshot, recorded))
}

/// Payouts PROCESSING for longer than `exchange.stuck_after_ms`.
pub async fn stuck_payouts(deps: &RunDeps, run_id: &str) -> Result<Vec<String>, RunError> {
    let since = time::now() - Duration::milliseconds(deps.exchange_settings.stuck_after_ms as i64);
    store::processing_since(&deps.db, run_id, since).await
}

/// Records payouts found stuck (audit entry); they are never sent again.
pub async fn report_stuck(
    deps: &RunDeps,
    run_id: &str,
    payout_ids: &[String],
) -> Result<(), RunError> {
    let tx = deps.db.begin_write().await?;
    audit::insert(
        &*tx,
        system_entry(
            "PAYOUTS_STUCK",
            "payroll_run",
            run_id,
            json!({
                "count": payout_ids.len(),
                "first_payout_ids": first_ids(payout_ids.iter().map(String::as_str)),
                "stuck_after_ms": deps.exchange_settings.stuck_after_ms,
            }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// PAYING_OUT with every payout terminal → COMPLETED (none failed) or FAILED; the job
/// completes in the same transaction. Completed test payouts become deductions.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id))]
pub async fn finish_if_done(
    deps: &RunDeps,
    snapshot: Snapshot,
) -> Result<(Snapshot, bool), RunError> {
    let Snapshot { run, mut job } = snapshot;
    if run.status != RunStatus::PayingOut || run.pending_count > 0 || run.processing_count > 0 {
        return Ok((Snapshot { run, job }, false));
    }
    let op = if run.failed_count > 0 {
        RunOp::FinishWithFailures
    } else {
        RunOp::FinishPaid
    };
    let next = transitions::apply(run.status, op).map_err(|_| RunError::Stale)?;
    let tx = deps.db.begin_write().await?;
    let now = time::now();
    let mut after = run.clone();
    after.status = next;
    after.completed_at = Some(now);
    // Deductions taken by payouts that failed go back now the run has ended.
    let returned = if next == RunStatus::Failed {
        store::return_failed_deductions(&*tx, &run.id).await?
    } else {
        0
    };
    after.total_amount_usd_cents += returned;
    store::save_run(&*tx, run.version, &mut after).await?;
    if let Some(job) = job.as_mut() {
        job.status = JobStatus::Completed;
        job.finished_at = Some(now);
        store::save_job(&*tx, job).await?;
    }
    let mut credited = 0i64;
    if run.is_test_run && deps.test_run.deduct_from_next_run {
        let paid =
            store::completed_of_job(&*tx, &run.id, job.as_ref().map(|j| j.id.clone())).await?;
        for (employee_id, amount) in &paid {
            store::credit_deduction(&*tx, employee_id, *amount).await?;
            credited += amount;
        }
    }
    let kind = if next == RunStatus::Completed {
        "payroll.run.completed"
    } else {
        "payroll.run.failed"
    };
    insert_events(&tx, vec![run_event(kind, &after, job.as_ref())]).await?;
    let action = if next == RunStatus::Completed {
        "PAYROLL_RUN_COMPLETED"
    } else {
        "PAYROLL_RUN_FAILED"
    };
    let mut details = status_change(run.status, next);
    details["payout_summary"] = json!({"completed": after.completed_count, "failed": after.failed_count, "cancelled": after.cancelled_count});
    details["test_run_deductions_credited_usd_cents"] = json!(credited);
    details["test_run_deductions_returned_usd_cents"] = json!(returned);
    audit::insert(&*tx, system_entry(action, "payroll_run", &run.id, details)).await?;
    tx.commit().await?;
    Ok((Snapshot { run: after, job }, true))
}
