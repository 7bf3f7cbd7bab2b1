//! The job a run's payouts are paid in: made by execute and by retry, each of which starts it
//! the same way.

use payroll_entities::{JobStatus, RunStatus, db::WriteTx, ids, job, payroll_run, time};

use super::{deps::RunDeps, messages::RunError, store};
use crate::{
    events::{insert_events, run_event},
    mailer,
};

/// Seconds the payouts should take at the withdrawal rate.
fn estimate_seconds(deps: &RunDeps, count: i64) -> i64 {
    let rate = i64::from(deps.exchange_settings.withdrawals_per_second);
    let sending = if rate == 0 {
        count / 2000
    } else {
        count / rate
    };
    let settle = (deps.exchange_settings.sandbox.completion_delay_ms / 1000) as i64;
    sending + settle + (deps.runs.poll_interval_ms / 1000) as i64 + 1
}

/// `job` with `count` payouts, all pending, and the time they should take.
pub(super) fn with_payouts(deps: &RunDeps, job: job::Model, count: i64) -> job::Model {
    job::Model {
        total: count,
        pending_count: count,
        estimated_duration_seconds: estimate_seconds(deps, count),
        ..job
    }
}

pub(super) fn new_job(deps: &RunDeps, run_id: &str, count: i64) -> job::Model {
    let now = time::now();
    let job = job::Model {
        id: ids::new_id(ids::IdKind::Job),
        payroll_run_id: run_id.to_owned(),
        status: JobStatus::Processing,
        total: 0,
        pending_count: 0,
        processing_count: 0,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        estimated_duration_seconds: 0,
        failed_reason: None,
        created_at: now,
        updated_at: now,
        finished_at: None,
    };
    with_payouts(deps, job, count)
}

/// The tail of execute and retry: the run moves to `next` (PAYING_OUT) with `job` as its
/// current job, one email is queued per payout of the job (at its current attempt), and
/// `payroll.run.executing` is written. The job row exists already and its payouts hold it;
/// the withdrawals start after the commit.
pub(super) async fn start_job(
    tx: &WriteTx,
    before_version: i64,
    next: RunStatus,
    after: &mut payroll_run::Model,
    job: &mut job::Model,
) -> Result<(), RunError> {
    mailer::enqueue_job(&**tx, &job.payroll_run_id, &job.id).await?;
    after.status = next;
    after.current_job_id = Some(job.id.clone());
    store::save_run(&**tx, before_version, after).await?;
    store::save_job(&**tx, job).await?;
    insert_events(
        tx,
        vec![run_event("payroll.run.executing", after, Some(job))],
    )
    .await?;
    Ok(())
}
