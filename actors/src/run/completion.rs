//! The end of a job: a run whose payouts are all final becomes COMPLETED or FAILED with its job,
//! and a job that cannot go on (the exchange refuses our credentials, or cannot be reached for
//! `exchange.unreachable_fail_ms`) is FAILED (CONTRACT §5): its payouts not yet sent fail,
//! those sent keep being reconciled, and the run ends FAILED once they are final.

use payroll_entities::{JobStatus, PayoutStatus, RunStatus, payout, time};
use serde_json::json;

use super::{
    deductions,
    deps::RunDeps,
    messages::RunError,
    store::{self, Snapshot},
    transitions::{self, RunOp, recount},
};
use crate::{
    audit::{self, first_ids, status_change, system_entry},
    events::{insert_events, payout_event, run_event},
    exchange::holds,
};

/// Fails the run's current job: every payout of it not yet sent (PENDING with no send counted)
/// becomes FAILED with `failed_reason: "job_failed: …"`, its hold released, in one transaction
/// with the job's status, events and audit entry.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id))]
pub async fn fail_job(
    deps: &RunDeps,
    snapshot: Snapshot,
    reason: &str,
) -> Result<Snapshot, RunError> {
    let Snapshot { run, job } = snapshot;
    let Some(mut job) = job.clone().filter(|j| j.status == JobStatus::Processing) else {
        return Ok(Snapshot { run, job });
    };
    if run.status != RunStatus::PayingOut {
        return Ok(Snapshot {
            run,
            job: Some(job),
        });
    }
    let failed_reason = format!("job_failed: {reason}");
    let tx = deps.db.begin_write().await?;
    let mut unsent = store::unsent_of_job(&*tx, &run.id, &job.id).await?;
    let now = time::now();
    let mut after = run.clone();
    for p in unsent.iter_mut() {
        p.status = PayoutStatus::Failed;
        p.failed_reason = Some(failed_reason.clone());
        p.updated_at = now;
        recount(
            &mut after,
            Some(&mut job),
            PayoutStatus::Pending,
            PayoutStatus::Failed,
        );
    }
    store::save_payouts(&*tx, &unsent).await?;
    let attempts: Vec<(String, i32)> = unsent.iter().map(|p| (p.id.clone(), p.attempt)).collect();
    holds::release(&*tx, &attempts, holds::Release::Refused).await?;
    job.status = JobStatus::Failed;
    job.failed_reason = Some(failed_reason.clone());
    job.finished_at = Some(now);
    store::save_run(&*tx, run.version, &mut after).await?;
    store::save_job(&*tx, &mut job).await?;
    insert_events(
        &tx,
        unsent
            .iter()
            .map(|p| payout_event("payout.failed", p))
            .collect(),
    )
    .await?;
    audit::insert(
        &*tx,
        system_entry(
            "JOB_FAILED",
            "job",
            &job.id,
            json!({
                "reason": failed_reason,
                "payroll_run_id": run.id,
                "failed_payouts": unsent.len(),
                "first_payout_ids": first_ids(unsent.iter().map(|p: &payout::Model| p.id.as_str())),
            }),
        ),
    )
    .await?;
    tx.commit().await?;
    tracing::warn!(run_id = %run.id, job_id = %job.id, reason, failed = unsent.len(), "job failed");
    Ok(Snapshot {
        run: after,
        job: Some(job),
    })
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
        deductions::return_failed_deductions(&*tx, &run.id).await?
    } else {
        0
    };
    after.total_amount_usd_cents += returned;
    store::save_run(&*tx, run.version, &mut after).await?;
    if let Some(job) = job.as_mut() {
        // A FAILED job stays FAILED: it ended before its payouts did.
        if job.status == JobStatus::Processing {
            job.status = JobStatus::Completed;
            job.finished_at = Some(now);
        }
        store::save_job(&*tx, job).await?;
    }
    let credited = if run.is_test_run && deps.test_run.deduct_from_next_run {
        deductions::credit_completed(&*tx, &run.id, job.as_ref().map(|j| j.id.as_str())).await?
    } else {
        0
    };
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
