//! A client's commands on a run: confirm, balance-check, execute, sync, cancel, archive, retry
//! and cancelling a payout. Each checks its transition against the pure tables, then persists
//! the new snapshot with its events, emails, audit entry and idempotency record in one
//! transaction; the `RunActor` acts on the outside world only after that commit.

use payroll_entities::{Cents, EmployeeStatus, PayoutStatus, RunStatus, RunType, time};
use serde_json::json;

pub use super::answer::Done;
use super::{
    answer::{answer_run, finish_request, refused, run_action},
    cancellation::{cancel, cancel_payout},
    deductions,
    deps::RunDeps,
    funds::{self, funds_transaction},
    jobs::{new_job, start_job, with_payouts},
    messages::{RunCommand, RunError, RunRequest},
    pricing::{quote_fees, wallet_held},
    resolution::resolve_payout,
    retry::retry,
    store::{self, Snapshot},
    transitions::{self, RunOp, recount},
};
use crate::{
    acknowledgement::{Acknowledgement, BalanceCheck, Outcome},
    audit::status_change,
    events::{insert_events, payout_event, run_event},
};

/// Runs a client's command against the snapshot.
#[tracing::instrument(skip_all, fields(run_id = %snapshot.run.id, command = request.command.name()))]
pub async fn handle(
    deps: &RunDeps,
    snapshot: Snapshot,
    request: RunRequest,
) -> Result<Done, RunError> {
    let RunRequest { command, ack, .. } = request;
    match command {
        RunCommand::Confirm => confirm(deps, snapshot, ack).await,
        RunCommand::BalanceCheck => balance_check(deps, snapshot, ack).await,
        RunCommand::Execute => execute(deps, snapshot, ack).await,
        RunCommand::Sync => sync(deps, snapshot, ack).await,
        RunCommand::Cancel {
            reason,
            may_cancel_funded,
        } => cancel(deps, snapshot, ack, reason, may_cancel_funded).await,
        RunCommand::RetryFailed => retry(deps, snapshot, ack, None).await,
        RunCommand::RetryPayout { payout_id } => retry(deps, snapshot, ack, Some(payout_id)).await,
        RunCommand::Archive => archive(deps, snapshot, ack).await,
        RunCommand::CancelPayout { payout_id } => {
            cancel_payout(deps, snapshot, ack, payout_id).await
        }
        RunCommand::ResolvePayout {
            payout_id,
            resolution,
        } => resolve_payout(deps, snapshot, ack, payout_id, resolution).await,
    }
}

/// Pending payouts read and rewritten per page by confirm, so memory does not grow with the run.
const CONFIRM_PAGE: u64 = 2000;
/// Confirm lists at most this many invalid payouts.
const CONFIRM_MAX_ERRORS: usize = 1000;

/// DRAFT → CONFIRMED: payees re-read (address, network, salary of regular runs), fees quoted,
/// test-run deductions taken, and all of it locked; a payee INACTIVE since the run was made is
/// not paid (the payout CANCELLED, with its event). The payouts are worked a page at a time in
/// one transaction, each page written with its events as it goes, so memory does not grow with
/// the run: any invalid payout rolls all of it back.
async fn confirm(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
) -> Result<Done, RunError> {
    let Snapshot { run, job } = snapshot;
    let next = transitions::apply(run.status, RunOp::Confirm)
        .map_err(|_| refused(&run, &RunCommand::Confirm))?;
    // Quoted before the transaction: no write waits on the exchange.
    let quotes = quote_fees(deps).await?;
    let tx = deps.db.begin_write().await?;
    let deduct =
        run.run_type == RunType::Regular && !run.is_test_run && deps.test_run.deduct_from_next_run;
    let now = time::now();
    let mut after = run.clone();
    let mut errors = Vec::new();
    let mut cancelled = 0usize;
    let mut deducted = 0i64;
    let (mut paid, mut total, mut fees) = (0i64, Some(Cents(0)), Some(Cents(0)));
    let mut last_id: Option<String> = None;
    loop {
        let mut page = store::payouts_page(
            &*tx,
            &run.id,
            PayoutStatus::Pending,
            last_id.as_deref(),
            CONFIRM_PAGE,
        )
        .await?;
        let Some(last) = page.last() else { break };
        last_id = Some(last.id.clone());
        let mut employees =
            store::employees_by_id(&*tx, page.iter().map(|p| p.employee_id.clone())).await?;
        for p in page.iter_mut() {
            let Some(e) = employees
                .get_mut(&p.employee_id)
                .filter(|e| e.status == EmployeeStatus::Active)
            else {
                // A payee deactivated since the run was made is not paid.
                p.status = PayoutStatus::Cancelled;
                p.updated_at = now;
                recount(
                    &mut after,
                    None,
                    PayoutStatus::Pending,
                    PayoutStatus::Cancelled,
                );
                continue;
            };
            let mut amount = match run.run_type {
                RunType::Regular => e.salary_usd_cents,
                _ => p.amount_usd_cents,
            };
            if run.is_test_run {
                amount = amount.min(deps.test_run.amount_usd_cents);
            }
            let mut deduction = 0;
            if deduct
                && e.test_deduction_balance_usd_cents > 0
                && amount - e.test_deduction_balance_usd_cents >= 1
                // Taken atomically: a test payout completing meanwhile adds to the balance and
                // keeps its addition; a balance another run took first is not taken twice.
                && deductions::take_deduction(&*tx, &e.id, e.test_deduction_balance_usd_cents).await?
            {
                deduction = e.test_deduction_balance_usd_cents;
                e.test_deduction_balance_usd_cents = 0;
                deducted += deduction;
            }
            p.amount_usd_cents = amount - deduction;
            p.test_run_deduction_usd_cents = deduction;
            p.network = e.network;
            p.wallet_address = e.wallet_address.clone();
            p.employee_name = e.name.clone();
            p.employee_email = e.email.clone();
            p.updated_at = now;
            // A wallet changed lately is not paid until its hold ends or is lifted (§16).
            errors.extend(wallet_held(e, &p.id, now));
            match quotes.get(&e.network) {
                None => errors.push((
                    format!("payouts[{}].network", p.id),
                    format!(
                        "the exchange cannot withdraw USDC on {} now; change the employee's network or cancel this payout",
                        e.network
                    ),
                )),
                Some(quote) => {
                    p.fee_usd_cents = quote.fee.0;
                    if let Some(why) = quote.refusal(Cents(p.amount_usd_cents), e.network) {
                        errors.push((format!("payouts[{}].amount_usd_cents", p.id), why));
                    }
                }
            }
            paid += 1;
            total = total.and_then(|t| t.checked_add(Cents(p.amount_usd_cents)));
            fees = fees.and_then(|f| f.checked_add(Cents(p.fee_usd_cents)));
        }
        if errors.len() >= CONFIRM_MAX_ERRORS {
            break;
        }
        if errors.is_empty() {
            store::save_payouts(&*tx, &page).await?;
            let events: Vec<_> = page
                .iter()
                .filter(|p| p.status == PayoutStatus::Cancelled)
                .map(|p| payout_event("payout.cancelled", p))
                .collect();
            if !events.is_empty() {
                cancelled += events.len();
                insert_events(&tx, events).await?;
            }
        }
    }
    if !errors.is_empty() {
        errors.truncate(CONFIRM_MAX_ERRORS);
        return Err(RunError::Invalid(errors));
    }
    if paid == 0 {
        return Err(RunError::Invalid(vec![(
            "payouts".into(),
            "every payee of this run is INACTIVE now; cancel the run".into(),
        )]));
    }
    let (Some(total), Some(fees)) = (total, fees) else {
        return Err(RunError::Invalid(vec![(
            "payouts".into(),
            "the amounts add up to more than can be represented".into(),
        )]));
    };
    after.status = next;
    after.confirmed_at = Some(now);
    after.employee_count = paid;
    after.total_amount_usd_cents = total.0;
    after.total_fees_usd_cents = fees.0;
    store::save_run(&*tx, run.version, &mut after).await?;
    insert_events(
        &tx,
        vec![run_event("payroll.run.confirmed", &after, job.as_ref())],
    )
    .await?;
    let details = json!({
        "status": {"before": run.status, "after": next},
        "total_amount_usd_cents": after.total_amount_usd_cents,
        "total_fees_usd_cents": after.total_fees_usd_cents,
        "cancelled_inactive_payees": cancelled,
        "test_run_deductions_usd_cents": deducted,
    });
    let action = run_action("PAYROLL_RUN_CONFIRMED", &after, details);
    answer_run(tx, ack, after, job, action, false).await
}

/// Reports the funding figures; a CONFIRMED run that is covered becomes DEPOSITED.
async fn balance_check(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
) -> Result<Done, RunError> {
    let Snapshot { run, job } = snapshot;
    let (tx, f, _funds) = funds_transaction(deps, &run.id, None).await?;
    let mut after = run.clone();
    let mut action = "PAYROLL_RUN_BALANCE_CHECKED";
    if run.status == RunStatus::Confirmed && f.sufficient() {
        transitions::apply(run.status, RunOp::Fund)
            .map_err(|_| refused(&run, &RunCommand::BalanceCheck))?;
        after = funds::mark_deposited(&tx, &run, job.as_ref()).await?;
        action = "PAYROLL_RUN_DEPOSITED";
    }
    let check = BalanceCheck {
        sufficient: f.sufficient(),
        required: f.required,
        available: f.available,
        deficit: f.deficit,
        run: after.clone(),
        checked_at: time::now(),
    };
    let details = json!({
        "status": {"before": run.status, "after": after.status},
        "required_usdc_cents": f.required, "available_usdc_cents": f.available, "deficit_usdc_cents": f.deficit,
    });
    let audit = run_action(action, &after, details);
    let snapshot = Snapshot { run: after, job };
    finish_request(
        tx,
        ack,
        Outcome::BalanceCheck(check),
        audit,
        snapshot,
        false,
    )
    .await
}

/// DEPOSITED → PAYING_OUT: a job, one email per payout, and the withdrawals start (after
/// commit). Never starts anything in another status.
async fn execute(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
) -> Result<Done, RunError> {
    let Snapshot { run, job: previous } = snapshot;
    if !matches!(run.status, RunStatus::Confirmed | RunStatus::Deposited) {
        return Err(refused(&run, &RunCommand::Execute));
    }
    let (tx, f, _funds) = funds_transaction(deps, &run.id, None).await?;
    // Another instance may have executed it meanwhile: then this one answers 409, having
    // written nothing.
    store::lock_version(&*tx, &run, |stored| match stored.status {
        RunStatus::Confirmed | RunStatus::Deposited => Ok(()),
        _ => Err(refused(stored, &RunCommand::Execute)),
    })
    .await?;
    if !f.sufficient() {
        return Err(RunError::InsufficientFunds {
            required: f.required,
            available: f.available,
            deficit: f.deficit,
        });
    }
    if run.status == RunStatus::Confirmed {
        return Err(RunError::NotYetDeposited {
            refused: transitions::refusal(run.status),
        });
    }
    let next = transitions::apply(run.status, RunOp::Execute)
        .map_err(|_| refused(&run, &RunCommand::Execute))?;
    // The job's counts are those of the payouts it takes, known once they are assigned.
    let mut job = new_job(deps, &run.id, 0);
    store::insert_job(&*tx, &job).await?;
    let count = store::assign_pending_to_job(&*tx, &run.id, &job.id).await? as i64;
    job = with_payouts(deps, job, count);
    let mut after = run.clone();
    after.executed_at = Some(time::now());
    start_job(&tx, run.version, next, &mut after, &mut job).await?;
    let mut details = status_change(run.status, next);
    details["job_id"] = json!(job.id);
    details["payouts"] = json!(count);
    details["previous_job_id"] = json!(previous.map(|j| j.id));
    let action = run_action("PAYROLL_RUN_EXECUTED", &after, details);
    answer_run(tx, ack, after, Some(job), action, true).await
}

/// Answers the run as it stands; a PAYING_OUT run is reconciled with the exchange first (by
/// the actor, before this runs).
async fn sync(deps: &RunDeps, snapshot: Snapshot, ack: Acknowledgement) -> Result<Done, RunError> {
    let tx = deps.db.begin_write().await?;
    let action = run_action(
        "PAYROLL_RUN_SYNCED",
        &snapshot.run,
        json!({"status": snapshot.run.status, "payout_summary": {
            "pending": snapshot.run.pending_count, "processing": snapshot.run.processing_count,
            "completed": snapshot.run.completed_count, "failed": snapshot.run.failed_count,
        }}),
    );
    let outcome = Outcome::Run {
        run: snapshot.run.clone(),
        job: snapshot.job.clone(),
    };
    finish_request(tx, ack, outcome, action, snapshot, false).await
}

async fn archive(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
) -> Result<Done, RunError> {
    let Snapshot { run, job } = snapshot;
    transitions::apply(run.status, RunOp::Archive)
        .map_err(|_| refused(&run, &RunCommand::Archive))?;
    let tx = deps.db.begin_write().await?;
    let mut after = run.clone();
    if !run.is_archived {
        after.is_archived = true;
        store::save_run(&*tx, run.version, &mut after).await?;
    }
    let action = run_action(
        "PAYROLL_RUN_ARCHIVED",
        &after,
        json!({"is_archived": {"before": run.is_archived, "after": true}}),
    );
    answer_run(tx, ack, after, job, action, false).await
}
