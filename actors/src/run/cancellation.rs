//! Cancelling a run, or one payout not yet handed to the exchange: the payouts' holds and
//! test-run deductions go back in the same transaction, and a CONFIRMED or DEPOSITED run left
//! with nothing to pay is cancelled with its last payout (CONTRACT §6).

use payroll_entities::{PayoutStatus, RunStatus, time};
use serde_json::json;

use super::{
    answer::{Done, answer_run, finish_request, refused, run_action},
    deductions,
    deps::RunDeps,
    messages::{RunCommand, RunError},
    store::{self, Snapshot},
    transitions::{self, PayoutOp, RunOp, recount},
};
use crate::{
    acknowledgement::{Acknowledgement, Outcome},
    audit::{AuditRecord, first_ids, status_change},
    events::{insert_events, payout_event, run_event},
    exchange::holds::{self, Release},
};

/// PENDING payouts cancelled per page when a run is cancelled.
const CANCEL_PAGE: u64 = 2000;

/// DRAFT, CONFIRMED or DEPOSITED → CANCELLED: pending payouts cancelled, the reservation and
/// test-run deductions released.
pub(super) async fn cancel(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
    reason: Option<String>,
    may_cancel_funded: bool,
) -> Result<Done, RunError> {
    let Snapshot { run, job } = snapshot;
    let command = RunCommand::Cancel {
        reason: None,
        may_cancel_funded,
    };
    let next =
        transitions::apply(run.status, RunOp::Cancel).map_err(|_| refused(&run, &command))?;
    if matches!(run.status, RunStatus::Confirmed | RunStatus::Deposited) && !may_cancel_funded {
        return Err(RunError::ScopeRequired("payroll:execute"));
    }
    let tx = deps.db.begin_write().await?;
    let now = time::now();
    let mut after = run.clone();
    // Counted first, so the run and its event come before its payouts' events; the payouts
    // are then cancelled a page at a time, so memory does not grow with the run.
    let count = store::count_in_status(&*tx, &run.id, PayoutStatus::Pending).await?;
    *after.counter_mut(PayoutStatus::Pending) -= count;
    *after.counter_mut(PayoutStatus::Cancelled) += count;
    let returned = deductions::return_deductions(&*tx, &run.id).await?;
    let released = holds::release_run(&*tx, &run.id, Release::Cancelled).await?;
    after.status = next;
    after.cancelled_at = Some(now);
    after.cancel_reason = reason;
    store::save_run(&*tx, run.version, &mut after).await?;
    insert_events(
        &tx,
        vec![run_event("payroll.run.cancelled", &after, job.as_ref())],
    )
    .await?;
    let mut first: Vec<String> = Vec::new();
    let mut last_id: Option<String> = None;
    loop {
        let mut page = store::payouts_page(
            &*tx,
            &run.id,
            PayoutStatus::Pending,
            last_id.as_deref(),
            CANCEL_PAGE,
        )
        .await?;
        let Some(last) = page.last() else { break };
        last_id = Some(last.id.clone());
        for p in page.iter_mut() {
            p.status = PayoutStatus::Cancelled;
            p.updated_at = now;
        }
        store::save_payouts(&*tx, &page).await?;
        let room = 20usize.saturating_sub(first.len());
        first.extend(page.iter().take(room).map(|p| p.id.clone()));
        insert_events(
            &tx,
            page.iter()
                .map(|p| payout_event("payout.cancelled", p))
                .collect(),
        )
        .await?;
    }
    let mut details = status_change(run.status, next);
    details["cancelled_payouts"] = json!(count);
    details["first_payout_ids"] = json!(first_ids(first.iter().map(String::as_str)));
    details["reason"] = json!(after.cancel_reason);
    details["test_run_deductions_returned_usd_cents"] = json!(returned);
    details["holds_released_usd_cents"] = json!(released);
    let action = run_action("PAYROLL_RUN_CANCELLED", &after, details);
    answer_run(tx, ack, after, job, action, false).await
}

/// PENDING (not yet handed to the exchange) → CANCELLED.
pub(super) async fn cancel_payout(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
    payout_id: String,
) -> Result<Done, RunError> {
    let Snapshot { run, mut job } = snapshot;
    let tx = deps.db.begin_write().await?;
    let mut p = store::payout_by_id(&*tx, &run.id, &payout_id).await?;
    let next = transitions::apply_payout(p.status, PayoutOp::Cancel);
    if next.is_err() || p.client_withdrawal_id.is_some() {
        let hint = if p.status == PayoutStatus::Pending {
            "This payout was already handed to the exchange and can no longer be cancelled; sync the run to follow it."
        } else {
            "Only a PENDING payout not yet handed to the exchange can be cancelled."
        };
        return Err(RunError::PayoutRefused {
            payout_id,
            refused: transitions::payout_refusal(p.status),
            operation: "cancelled",
            hint: hint.into(),
        });
    }
    if !matches!(
        run.status,
        RunStatus::Draft | RunStatus::Confirmed | RunStatus::Deposited | RunStatus::PayingOut
    ) {
        return Err(refused(&run, &RunCommand::CancelPayout { payout_id }));
    }
    p.status = PayoutStatus::Cancelled;
    p.updated_at = time::now();
    let mut after = run.clone();
    let in_job = p.job_id.is_some() && p.job_id == job.as_ref().map(|j| j.id.clone());
    recount(
        &mut after,
        if in_job { job.as_mut() } else { None },
        PayoutStatus::Pending,
        PayoutStatus::Cancelled,
    );
    after.employee_count -= 1;
    after.total_amount_usd_cents -= p.amount_usd_cents;
    after.total_fees_usd_cents -= p.fee_usd_cents;
    let returned_deduction = std::mem::take(&mut p.test_run_deduction_usd_cents);
    store::save_payouts(&*tx, std::slice::from_ref(&p)).await?;
    if returned_deduction > 0 {
        deductions::credit_deduction(&*tx, &p.employee_id, returned_deduction).await?;
    }
    holds::release(&*tx, &[(p.id.clone(), p.attempt)], Release::Cancelled).await?;
    let mut events = vec![payout_event("payout.cancelled", &p)];
    // A funded or confirmed run left with nothing to pay is cancelled with its last payout
    // (CONTRACT §6): it never reaches PAYING_OUT with no payouts.
    let run_cancelled = matches!(run.status, RunStatus::Confirmed | RunStatus::Deposited)
        && after.pending_count == 0;
    if run_cancelled {
        let next = transitions::apply(run.status, RunOp::Cancel).map_err(|_| {
            refused(
                &run,
                &RunCommand::CancelPayout {
                    payout_id: p.id.clone(),
                },
            )
        })?;
        after.status = next;
        after.cancelled_at = Some(time::now());
        after.cancel_reason = Some("every payout was cancelled".into());
        deductions::return_deductions(&*tx, &run.id).await?;
        holds::release_run(&*tx, &run.id, Release::Cancelled).await?;
        events.push(run_event("payroll.run.cancelled", &after, job.as_ref()));
    }
    store::save_run(&*tx, run.version, &mut after).await?;
    if let (true, Some(job)) = (in_job, job.as_mut()) {
        store::save_job(&*tx, job).await?;
    }
    insert_events(&tx, events).await?;
    let action = AuditRecord {
        action: "PAYOUT_CANCELLED",
        resource_type: "payout",
        resource_id: p.id.clone(),
        details: json!({
            "status": {"before": PayoutStatus::Pending, "after": PayoutStatus::Cancelled},
            "payroll_run_id": run.id,
            "run_status": {"before": run.status, "after": after.status},
        }),
    };
    let snapshot = Snapshot { run: after, job };
    finish_request(tx, ack, Outcome::Payout(p), action, snapshot, false).await
}
