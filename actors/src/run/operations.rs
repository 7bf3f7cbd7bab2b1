//! The run's operations, each one transaction over the run's snapshot. The `RunActor` runs them
//! one at a time and keeps the snapshot they return; nothing here acts on the outside world
//! before its transaction has committed (the actor sends withdrawals only after
//! [`claim_window`] committed their client ids).

use std::collections::HashMap;

use actix::prelude::*;
use chrono::{DateTime, Duration, Utc};
use payroll_entities::{
    Cents, EmployeeStatus, JobStatus, Network, PayoutStatus, RunStatus, RunType,
    db::{Db, WriteTx},
    employee, ids, job, payout, payroll_run, time,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
    sea_query::{Expr, OnConflict},
};
use serde_json::{Value, json};

use super::{
    funds::{self, Figures},
    messages::{RunCommand, RunError, RunReply, RunRequest},
    store,
    transitions::{self, RunOp},
};
use crate::{
    ack::{Acknowledgement, AuditAction, BalanceCheck, Outcome, insert_audit, system_entry},
    events::{insert_events, payout_event, run_event},
    exchange::{
        RemoteStatus, WithdrawalOutcome, WithdrawalRequest,
        actor::{ExchangeActor, GetBalances, Lookup, QuoteFees},
    },
    mailer::{self, OutboxChanged},
    settings::{ExchangeSettings, RunsSettings, TestRunSettings},
    telemetry::CountedSend,
};

/// What every run actor needs.
pub struct RunDeps {
    pub db: Db,
    /// Serialises funding decisions of this process (PostgreSQL adds an advisory lock across
    /// instances).
    pub funds_lock: tokio::sync::Mutex<()>,
    pub exchange: Addr<ExchangeActor>,
    pub mailer: Option<Recipient<OutboxChanged>>,
    pub runs: RunsSettings,
    pub exchange_settings: ExchangeSettings,
    pub test_run: TestRunSettings,
    /// This instance's id and lease duration.
    pub lease: super::lease::LeaseSettings,
}

/// The run as its actor holds it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub run: payroll_run::Model,
    pub job: Option<job::Model>,
}

/// The result of a client's command.
pub struct Done {
    pub reply: RunReply,
    pub snapshot: Snapshot,
    /// New rows in the email outbox.
    pub mail: bool,
}

/// Rows per multi-row statement.
const CHUNK: usize = 500;

pub async fn load(db: &Db, run_id: &str) -> Result<Snapshot, RunError> {
    let run = payroll_run::Entity::find_by_id(run_id.to_owned())
        .one(&db.conn)
        .await?
        .ok_or(RunError::NotFound)?;
    let job = match &run.current_job_id {
        Some(id) => job::Entity::find_by_id(id.clone()).one(&db.conn).await?,
        None => None,
    };
    Ok(Snapshot { run, job })
}

/// The run's version as stored (None: the run is gone).
pub async fn stored_version(db: &Db, run_id: &str) -> Result<Option<i64>, sea_orm::DbErr> {
    payroll_run::Entity::find_by_id(run_id.to_owned())
        .select_only()
        .column(payroll_run::Column::Version)
        .into_tuple::<i64>()
        .one(&db.conn)
        .await
}

/// Writes the run if nobody changed it since `before_version`; bumps its version.
async fn save_run<C: ConnectionTrait>(
    conn: &C,
    before_version: i64,
    run: &mut payroll_run::Model,
) -> Result<(), RunError> {
    run.version = before_version + 1;
    run.updated_at = time::now();
    let changes = run.clone().into_active_model().reset_all();
    let written = payroll_run::Entity::update_many()
        .set(changes)
        .filter(payroll_run::Column::Id.eq(run.id.as_str()))
        .filter(payroll_run::Column::Version.eq(before_version))
        .exec(conn)
        .await?
        .rows_affected;
    if written == 1 {
        Ok(())
    } else {
        let stored = payroll_run::Entity::find_by_id(run.id.clone())
            .one(conn)
            .await?;
        tracing::warn!(
            run_id = %run.id,
            expected_version = before_version,
            stored_version = ?stored.map(|r| r.version),
            "stale run snapshot"
        );
        Err(RunError::Stale)
    }
}

async fn save_job<C: ConnectionTrait>(conn: &C, job: &mut job::Model) -> Result<(), RunError> {
    job.updated_at = time::now();
    job::Entity::update(job.clone().into_active_model().reset_all())
        .exec(conn)
        .await?;
    Ok(())
}

/// Writes changed payouts in multi-row statements (insert-or-update by id).
async fn save_payouts<C: ConnectionTrait>(
    conn: &C,
    payouts: &[payout::Model],
) -> Result<(), RunError> {
    use payout::Column as C;
    let on_conflict = OnConflict::column(C::Id)
        .update_columns([
            C::EmployeeName,
            C::EmployeeEmail,
            C::Status,
            C::AmountUsdCents,
            C::FeeUsdCents,
            C::TestRunDeductionUsdCents,
            C::Network,
            C::WalletAddress,
            C::Attempt,
            C::JobId,
            C::ClientWithdrawalId,
            C::CexWithdrawalId,
            C::OnChainTxHash,
            C::BlockExplorerUrl,
            C::FailedReason,
            C::InitiatedAt,
            C::CompletedAt,
            C::UpdatedAt,
        ])
        .to_owned();
    for chunk in payouts.chunks(CHUNK) {
        payout::Entity::insert_many(
            chunk
                .iter()
                .cloned()
                .map(IntoActiveModel::into_active_model),
        )
        .on_conflict(on_conflict.clone())
        .exec_without_returning(conn)
        .await?;
    }
    Ok(())
}

async fn payouts_of<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    status: PayoutStatus,
) -> Result<Vec<payout::Model>, RunError> {
    Ok(payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(status))
        .order_by_asc(payout::Column::Id)
        .all(conn)
        .await?)
}

/// The payout, locked for the rest of the transaction on PostgreSQL (SQLite's write
/// transactions hold the database): a claim by the run's lease holder on another instance
/// waits for this transaction, or this one reads what the claim committed.
async fn payout_by_id<C: ConnectionTrait>(
    conn: &C,
    run_id: &str,
    payout_id: &str,
) -> Result<payout::Model, RunError> {
    payout::Entity::find_by_id(payout_id.to_owned())
        .lock_exclusive()
        .one(conn)
        .await?
        .filter(|p| p.payroll_run_id == run_id)
        .ok_or_else(|| RunError::PayoutNotFound(payout_id.to_owned()))
}

/// Moves one payout between summary counters of the run and its job.
fn recount(
    run: &mut payroll_run::Model,
    job: Option<&mut job::Model>,
    from: PayoutStatus,
    to: PayoutStatus,
) {
    *run.counter_mut(from) -= 1;
    *run.counter_mut(to) += 1;
    if let Some(job) = job {
        *job.counter_mut(from) -= 1;
        *job.counter_mut(to) += 1;
    }
}

fn first_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    ids.take(20).collect()
}

fn refused(run: &payroll_run::Model, command: &RunCommand) -> RunError {
    RunError::Refused {
        refused: transitions::refusal(run.status),
        operation: command.name(),
        hint: None,
    }
}

fn run_action(action: &'static str, run: &payroll_run::Model, details: Value) -> AuditAction {
    AuditAction {
        action,
        resource_type: "payroll_run",
        resource_id: run.id.clone(),
        details,
    }
}

fn status_change(before: RunStatus, after: RunStatus) -> Value {
    json!({"status": {"before": before, "after": after}})
}

/// Commits `ack` with the outcome and answers.
async fn finish_request(
    tx: WriteTx,
    ack: Acknowledgement,
    outcome: Outcome,
    action: AuditAction,
    snapshot: Snapshot,
    mail: bool,
) -> Result<Done, RunError> {
    let body = ack.commit_in(&*tx, &outcome, action).await?;
    tx.commit().await?;
    Ok(Done {
        reply: RunReply {
            body,
            run: snapshot.run.clone(),
            job: snapshot.job.clone(),
        },
        snapshot,
        mail,
    })
}

/// Commits `ack` and answers with the run as it now stands.
async fn answer_run(
    tx: WriteTx,
    ack: Acknowledgement,
    run: payroll_run::Model,
    job: Option<job::Model>,
    action: AuditAction,
    mail: bool,
) -> Result<Done, RunError> {
    let snapshot = Snapshot {
        run: run.clone(),
        job: job.clone(),
    };
    finish_request(tx, ack, Outcome::Run { run, job }, action, snapshot, mail).await
}

/// Runs a client's command against the snapshot.
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
    }
}

/// DRAFT → CONFIRMED: payees re-read (address, network, salary of regular runs), fees quoted,
/// test-run deductions taken, and all of it locked.
async fn confirm(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
) -> Result<Done, RunError> {
    let Snapshot { run, job } = snapshot;
    let next = transitions::apply(run.status, RunOp::Confirm)
        .map_err(|_| refused(&run, &RunCommand::Confirm))?;
    // Quoted before the transaction: no write waits on the exchange.
    let (fees, minimum) = deps
        .exchange
        .counted_send(QuoteFees(Network::ALL.to_vec()))
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(|e| RunError::Exchange(e.to_string()))?;
    let tx = deps.db.begin_write().await?;
    let mut payouts = payouts_of(&*tx, &run.id, PayoutStatus::Pending).await?;
    let mut employees =
        store::employees_by_id(&*tx, payouts.iter().map(|p| p.employee_id.clone())).await?;
    let deduct =
        run.run_type == RunType::Regular && !run.is_test_run && deps.test_run.deduct_from_next_run;
    let now = time::now();
    let mut after = run.clone();
    let mut errors = Vec::new();
    let mut cancelled = Vec::new();
    let mut deducted: Vec<(String, i64)> = Vec::new();
    for p in payouts.iter_mut() {
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
            cancelled.push(p.clone());
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
        {
            deduction = e.test_deduction_balance_usd_cents;
            e.test_deduction_balance_usd_cents = 0;
            deducted.push((e.id.clone(), deduction));
        }
        p.amount_usd_cents = amount - deduction;
        p.test_run_deduction_usd_cents = deduction;
        p.fee_usd_cents = fees.get(&e.network).copied().unwrap_or(Cents::ZERO).0;
        p.network = e.network;
        p.wallet_address = e.wallet_address.clone();
        p.employee_name = e.name.clone();
        p.employee_email = e.email.clone();
        p.updated_at = now;
        if p.amount_usd_cents < minimum.0 {
            errors.push((
                format!("payouts[{}].amount_usd_cents", p.id),
                format!(
                    "{} cents is below the exchange's minimum withdrawal of {} cents; cancel this payout or change the amount",
                    p.amount_usd_cents, minimum.0
                ),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(RunError::Invalid(errors));
    }
    let paid: Vec<&payout::Model> = payouts
        .iter()
        .filter(|p| p.status == PayoutStatus::Pending)
        .collect();
    if paid.is_empty() {
        return Err(RunError::Invalid(vec![(
            "payouts".into(),
            "every payee of this run is INACTIVE now; cancel the run".into(),
        )]));
    }
    after.status = next;
    after.confirmed_at = Some(now);
    after.employee_count = paid.len() as i64;
    let too_large = || {
        RunError::Invalid(vec![(
            "payouts".into(),
            "the amounts add up to more than can be represented".into(),
        )])
    };
    after.total_amount_usd_cents = Cents::sum(paid.iter().map(|p| Cents(p.amount_usd_cents)))
        .ok_or_else(too_large)?
        .0;
    after.total_fees_usd_cents = Cents::sum(paid.iter().map(|p| Cents(p.fee_usd_cents)))
        .ok_or_else(too_large)?
        .0;
    save_payouts(&*tx, &payouts).await?;
    for (employee_id, _) in &deducted {
        employee::Entity::update_many()
            .col_expr(
                employee::Column::TestDeductionBalanceUsdCents,
                Expr::value(0i64),
            )
            .filter(employee::Column::Id.eq(employee_id.as_str()))
            .exec(&*tx)
            .await?;
    }
    save_run(&*tx, run.version, &mut after).await?;
    let mut events = vec![run_event("payroll.run.confirmed", &after, job.as_ref())];
    events.extend(
        cancelled
            .iter()
            .map(|p| payout_event("payout.cancelled", p)),
    );
    insert_events(&tx, events).await?;
    let details = json!({
        "status": {"before": run.status, "after": next},
        "total_amount_usd_cents": after.total_amount_usd_cents,
        "total_fees_usd_cents": after.total_fees_usd_cents,
        "cancelled_inactive_payees": cancelled.len(),
        "test_run_deductions_usd_cents": deducted.iter().map(|(_, d)| d).sum::<i64>(),
    });
    let action = run_action("PAYROLL_RUN_CONFIRMED", &after, details);
    answer_run(tx, ack, after, job, action, false).await
}

async fn exchange_available(deps: &RunDeps) -> Result<i64, RunError> {
    Ok(deps
        .exchange
        .counted_send(GetBalances)
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(|e| RunError::Exchange(e.to_string()))?
        .available
        .0)
}

/// A write transaction in which a funding decision is made, with its figures. Decisions are
/// serialised (the process's funds lock, and PostgreSQL's advisory lock held from the first
/// read to the commit). Reservations are read before the exchange balance: a withdrawal
/// accepted in between lowers the balance after its reservation was counted, which can only
/// understate what is free, never overstate it. `required` defaults to the run's pending
/// payouts. Keep the returned guard until the transaction commits.
async fn funds_transaction<'a>(
    deps: &'a RunDeps,
    run_id: &str,
    required: Option<i64>,
) -> Result<(WriteTx, Figures, tokio::sync::MutexGuard<'a, ()>), RunError> {
    let guard = deps.funds_lock.lock().await;
    let (tx, reserved) = if deps.db.backend() == sea_orm::DatabaseBackend::Postgres {
        let tx = deps.db.begin_write().await?;
        funds::lock_funds(&*tx).await?;
        let reserved = funds::reserved_by_others(&*tx, run_id).await?;
        (Some(tx), reserved)
    } else {
        // SQLite: the sandbox writes to this database too, so no write transaction may be
        // held across the exchange call; the funds lock serialises the decisions.
        (
            None,
            funds::reserved_by_others(&deps.db.conn, run_id).await?,
        )
    };
    let available = exchange_available(deps).await?;
    let tx = match tx {
        Some(tx) => tx,
        None => deps.db.begin_write().await?,
    };
    let required = match required {
        Some(r) => r,
        None => funds::required_of(&*tx, run_id).await?,
    };
    Ok((tx, Figures::new(available, reserved, required), guard))
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
        after.status = transitions::apply(run.status, RunOp::Fund)
            .map_err(|_| refused(&run, &RunCommand::BalanceCheck))?;
        after.deposited_at = Some(time::now());
        save_run(&*tx, run.version, &mut after).await?;
        insert_events(
            &tx,
            vec![run_event("payroll.run.deposited", &after, job.as_ref())],
        )
        .await?;
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

/// The funds watch of a CONFIRMED run: DEPOSITED once covered.
pub async fn watch_funds(deps: &RunDeps, snapshot: Snapshot) -> Result<Snapshot, RunError> {
    let Snapshot { run, job } = snapshot;
    if run.status != RunStatus::Confirmed {
        return Ok(Snapshot { run, job });
    }
    let (tx, f, _funds) = funds_transaction(deps, &run.id, None).await?;
    if !f.sufficient() {
        return Ok(Snapshot { run, job });
    }
    let mut after = run.clone();
    after.status = RunStatus::Deposited;
    after.deposited_at = Some(time::now());
    save_run(&*tx, run.version, &mut after).await?;
    insert_events(
        &tx,
        vec![run_event("payroll.run.deposited", &after, job.as_ref())],
    )
    .await?;
    insert_audit(
        &*tx,
        system_entry(
            "PAYROLL_RUN_DEPOSITED",
            "payroll_run",
            &run.id,
            json!({
                "status": {"before": run.status, "after": after.status},
                "required_usdc_cents": f.required, "available_usdc_cents": f.available,
            }),
        ),
    )
    .await?;
    tx.commit().await?;
    Ok(Snapshot { run: after, job })
}

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

fn new_job(deps: &RunDeps, run_id: &str, count: i64) -> job::Model {
    let now = time::now();
    job::Model {
        id: ids::new_id(ids::IdKind::Job),
        payroll_run_id: run_id.to_owned(),
        status: JobStatus::Processing,
        total: count,
        pending_count: count,
        processing_count: 0,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        estimated_duration_seconds: estimate_seconds(deps, count),
        failed_reason: None,
        created_at: now,
        updated_at: now,
        finished_at: None,
    }
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
    if !f.sufficient() {
        return Err(RunError::InsufficientFunds {
            required: f.required,
            available: f.available,
            deficit: f.deficit,
        });
    }
    if run.status == RunStatus::Confirmed {
        return Err(RunError::Refused {
            refused: transitions::refusal(run.status),
            operation: "executed",
            hint: Some("The run is covered but not yet DEPOSITED: call POST /api/v1/payroll-runs/{run_id}/balance-check, then execute.".into()),
        });
    }
    let next = transitions::apply(run.status, RunOp::Execute)
        .map_err(|_| refused(&run, &RunCommand::Execute))?;
    let pending: Vec<(String, i32)> = payout::Entity::find()
        .select_only()
        .column(payout::Column::Id)
        .column(payout::Column::Attempt)
        .filter(payout::Column::PayrollRunId.eq(run.id.as_str()))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .into_tuple()
        .all(&*tx)
        .await?;
    let mut job = new_job(deps, &run.id, pending.len() as i64);
    job::Entity::insert(job.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    payout::Entity::update_many()
        .col_expr(payout::Column::JobId, Expr::value(job.id.clone()))
        .filter(payout::Column::PayrollRunId.eq(run.id.as_str()))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .exec(&*tx)
        .await?;
    mailer::enqueue(&*tx, &pending).await?;
    let mut after = run.clone();
    after.status = next;
    after.executed_at = Some(time::now());
    after.current_job_id = Some(job.id.clone());
    save_run(&*tx, run.version, &mut after).await?;
    save_job(&*tx, &mut job).await?;
    insert_events(
        &tx,
        vec![run_event("payroll.run.executing", &after, Some(&job))],
    )
    .await?;
    let mut details = status_change(run.status, next);
    details["job_id"] = json!(job.id);
    details["payouts"] = json!(pending.len());
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

/// Gives test-run deductions taken by this run's payouts back to their employees.
async fn return_deductions<C: ConnectionTrait>(conn: &C, run_id: &str) -> Result<i64, RunError> {
    let taken: Vec<(String, i64)> = payout::Entity::find()
        .select_only()
        .column(payout::Column::EmployeeId)
        .column(payout::Column::TestRunDeductionUsdCents)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::TestRunDeductionUsdCents.gt(0))
        .into_tuple()
        .all(conn)
        .await?;
    for (employee_id, amount) in &taken {
        use sea_orm::sea_query::ExprTrait;
        employee::Entity::update_many()
            .col_expr(
                employee::Column::TestDeductionBalanceUsdCents,
                Expr::col(employee::Column::TestDeductionBalanceUsdCents).add(*amount),
            )
            .filter(employee::Column::Id.eq(employee_id.as_str()))
            .exec(conn)
            .await?;
    }
    // Given back once: the payouts no longer hold them.
    payout::Entity::update_many()
        .col_expr(payout::Column::TestRunDeductionUsdCents, Expr::value(0i64))
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::TestRunDeductionUsdCents.gt(0))
        .exec(conn)
        .await?;
    Ok(taken.iter().map(|(_, a)| a).sum())
}

/// DRAFT, CONFIRMED or DEPOSITED → CANCELLED: pending payouts cancelled, the reservation and
/// test-run deductions released.
async fn cancel(
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
    let mut pending = payouts_of(&*tx, &run.id, PayoutStatus::Pending).await?;
    let now = time::now();
    let mut after = run.clone();
    for p in pending.iter_mut() {
        p.status = PayoutStatus::Cancelled;
        p.updated_at = now;
        recount(
            &mut after,
            None,
            PayoutStatus::Pending,
            PayoutStatus::Cancelled,
        );
    }
    save_payouts(&*tx, &pending).await?;
    let returned = return_deductions(&*tx, &run.id).await?;
    after.status = next;
    after.cancelled_at = Some(now);
    after.cancel_reason = reason;
    save_run(&*tx, run.version, &mut after).await?;
    let mut events = vec![run_event("payroll.run.cancelled", &after, job.as_ref())];
    events.extend(pending.iter().map(|p| payout_event("payout.cancelled", p)));
    insert_events(&tx, events).await?;
    let mut details = status_change(run.status, next);
    details["cancelled_payouts"] = json!(pending.len());
    details["first_payout_ids"] = json!(first_ids(pending.iter().map(|p| p.id.as_str())));
    details["reason"] = json!(after.cancel_reason);
    details["test_run_deductions_returned_usd_cents"] = json!(returned);
    let action = run_action("PAYROLL_RUN_CANCELLED", &after, details);
    answer_run(tx, ack, after, job, action, false).await
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
        save_run(&*tx, run.version, &mut after).await?;
    }
    let action = run_action(
        "PAYROLL_RUN_ARCHIVED",
        &after,
        json!({"is_archived": {"before": run.is_archived, "after": true}}),
    );
    answer_run(tx, ack, after, job, action, false).await
}

/// FAILED → PAYING_OUT for every failed payout (or one): each takes its employee's current
/// wallet, a new attempt and a new email; funds are checked and reserved for them.
async fn retry(
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
    let tx = deps.db.begin_write().await?;
    let mut failed = match &only {
        Some(id) => {
            let p = payout_by_id(&*tx, &run.id, id).await?;
            if p.status != PayoutStatus::Failed {
                return Err(RunError::PayoutRefused {
                    payout_id: p.id.clone(),
                    current: p.status,
                    operation: "retried",
                    hint: "Only a FAILED payout can be retried.".into(),
                });
            }
            vec![p]
        }
        None => payouts_of(&*tx, &run.id, PayoutStatus::Failed).await?,
    };
    let next = transitions::apply(run.status, RunOp::RetryFailed).map_err(|_| match &only {
        Some(_) => RunError::Refused {
            refused: transitions::refusal(run.status),
            operation: "retried",
            hint: Some("A failed payout is retried once its run has finished (FAILED); sync the run and try again then.".into()),
        },
        None => refused(&run, &command),
    })?;
    if failed.is_empty() {
        return Err(refused(&run, &command));
    }
    drop(tx);
    let required = Cents::sum(
        failed
            .iter()
            .map(|p| Cents(p.amount_usd_cents.saturating_add(p.fee_usd_cents))),
    )
    .ok_or_else(|| {
        RunError::Invalid(vec![(
            "payouts".into(),
            "the amounts add up to more than can be represented".into(),
        )])
    })?;
    let (tx, f, _funds) = funds_transaction(deps, &run.id, Some(required.0)).await?;
    if !f.sufficient() {
        return Err(RunError::InsufficientFunds {
            required: f.required,
            available: f.available,
            deficit: f.deficit,
        });
    }
    let employees =
        store::employees_by_id(&*tx, failed.iter().map(|p| p.employee_id.clone())).await?;
    let mut job = new_job(deps, &run.id, failed.len() as i64);
    let mut after = run.clone();
    let mut address_changes = Vec::new();
    for p in failed.iter_mut() {
        if let Some(e) = employees.get(&p.employee_id) {
            if e.wallet_address != p.wallet_address || e.network != p.network {
                address_changes.push(json!({
                    "payout_id": p.id,
                    "wallet_address": {"before": p.wallet_address, "after": e.wallet_address},
                    "network": {"before": p.network, "after": e.network},
                }));
            }
            p.wallet_address = e.wallet_address.clone();
            p.network = e.network;
        }
        p.status = PayoutStatus::Pending;
        p.attempt += 1;
        p.job_id = Some(job.id.clone());
        p.client_withdrawal_id = None;
        p.cex_withdrawal_id = None;
        p.on_chain_tx_hash = None;
        p.block_explorer_url = None;
        p.failed_reason = None;
        p.initiated_at = None;
        p.completed_at = None;
        p.updated_at = time::now();
        recount(
            &mut after,
            None,
            PayoutStatus::Failed,
            PayoutStatus::Pending,
        );
    }
    job::Entity::insert(job.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    save_payouts(&*tx, &failed).await?;
    let mail: Vec<(String, i32)> = failed.iter().map(|p| (p.id.clone(), p.attempt)).collect();
    mailer::enqueue(&*tx, &mail).await?;
    after.status = next;
    after.completed_at = None;
    after.current_job_id = Some(job.id.clone());
    save_run(&*tx, run.version, &mut after).await?;
    save_job(&*tx, &mut job).await?;
    insert_events(
        &tx,
        vec![run_event("payroll.run.executing", &after, Some(&job))],
    )
    .await?;
    let mut details = status_change(run.status, next);
    details["job_id"] = json!(job.id);
    details["retried_payouts"] = json!(failed.len());
    details["first_payout_ids"] = json!(first_ids(failed.iter().map(|p| p.id.as_str())));
    details["address_changes"] = json!(address_changes);
    details["previous_job_id"] = json!(previous.map(|j| j.id));
    let snapshot = Snapshot {
        run: after.clone(),
        job: Some(job.clone()),
    };
    let (outcome, action) = match only {
        Some(_) => {
            let p = failed.into_iter().next().ok_or(RunError::Stale)?;
            let action = AuditAction {
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

/// PENDING (not yet handed to the exchange) → CANCELLED.
async fn cancel_payout(
    deps: &RunDeps,
    snapshot: Snapshot,
    ack: Acknowledgement,
    payout_id: String,
) -> Result<Done, RunError> {
    let Snapshot { run, mut job } = snapshot;
    let tx = deps.db.begin_write().await?;
    let mut p = payout_by_id(&*tx, &run.id, &payout_id).await?;
    if p.status != PayoutStatus::Pending || p.client_withdrawal_id.is_some() {
        let hint = if p.status == PayoutStatus::Pending {
            "This payout was already handed to the exchange and can no longer be cancelled; sync the run to follow it."
        } else {
            "Only a PENDING payout not yet handed to the exchange can be cancelled."
        };
        return Err(RunError::PayoutRefused {
            payout_id,
            current: p.status,
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
    save_payouts(&*tx, std::slice::from_ref(&p)).await?;
    if returned_deduction > 0 {
        use sea_orm::sea_query::ExprTrait;
        employee::Entity::update_many()
            .col_expr(
                employee::Column::TestDeductionBalanceUsdCents,
                Expr::col(employee::Column::TestDeductionBalanceUsdCents).add(returned_deduction),
            )
            .filter(employee::Column::Id.eq(p.employee_id.as_str()))
            .exec(&*tx)
            .await?;
    }
    save_run(&*tx, run.version, &mut after).await?;
    if let (true, Some(job)) = (in_job, job.as_mut()) {
        save_job(&*tx, job).await?;
    }
    insert_events(&tx, vec![payout_event("payout.cancelled", &p)]).await?;
    let action = AuditAction {
        action: "PAYOUT_CANCELLED",
        resource_type: "payout",
        resource_id: p.id.clone(),
        details: json!({"status": {"before": PayoutStatus::Pending, "after": PayoutStatus::Cancelled}, "payroll_run_id": run.id}),
    };
    let snapshot = Snapshot { run: after, job };
    finish_request(tx, ack, Outcome::Payout(p), action, snapshot, false).await
}

/// Commits client withdrawal ids for up to `limit` payouts not yet handed over, and returns
/// the withdrawals to send. Nothing is sent for a payout whose id is not committed.
pub async fn claim_window(
    deps: &RunDeps,
    run: &payroll_run::Model,
    limit: usize,
) -> Result<Vec<WithdrawalRequest>, RunError> {
    if limit == 0 || run.status != RunStatus::PayingOut {
        return Ok(Vec::new());
    }
    let tx = deps.db.begin_write().await?;
    // Fenced by the lease: an instance that lost it commits no withdrawal.
    if !super::lease::holds(&*tx, &deps.lease, &run.id).await? {
        return Err(RunError::Stale);
    }
    let mut batch = payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run.id.as_str()))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .filter(payout::Column::ClientWithdrawalId.is_null())
        .order_by_asc(payout::Column::Id)
        .limit(limit as u64)
        .all(&*tx)
        .await?;
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let now = time::now();
    // One narrow statement: the client ids are derived in SQL from id and attempt.
    let ids: Vec<String> = batch.iter().map(|p| p.id.clone()).collect();
    let claimed = payout::Entity::update_many()
        .col_expr(
            payout::Column::ClientWithdrawalId,
            Expr::cust("id || '-' || CAST(attempt AS TEXT)"),
        )
        .col_expr(payout::Column::InitiatedAt, Expr::value(now))
        .col_expr(payout::Column::UpdatedAt, Expr::value(now))
        .filter(payout::Column::Id.is_in(ids))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .filter(payout::Column::ClientWithdrawalId.is_null())
        .exec(&*tx)
        .await?
        .rows_affected;
    if claimed != batch.len() as u64 {
        return Err(RunError::Stale);
    }
    for p in batch.iter_mut() {
        p.client_withdrawal_id = Some(format!("{}-{}", p.id, p.attempt));
    }
    tx.commit().await?;
    Ok(batch
        .into_iter()
        .map(|p| WithdrawalRequest {
            client_id: p.client_withdrawal_id.unwrap_or_default(),
            amount: Cents(p.amount_usd_cents),
            fee: Cents(p.fee_usd_cents),
            network: p.network,
            address: p.wallet_address,
        })
        .collect())
}

/// At shutdown: payouts whose withdrawals were committed but never left this instance (they
/// were waiting for a token) are handed back, to be claimed afresh under the same ids. Only
/// on runs whose lease this instance still holds: where another instance has taken a run
/// over, it may already have sent such an id again, and the ids are looked up instead.
pub async fn hand_back(
    db: &Db,
    lease: &super::lease::LeaseSettings,
    client_ids: &[String],
) -> Result<u64, RunError> {
    let mut handed_back = 0;
    for chunk in client_ids.chunks(CHUNK) {
        let tx = db.begin_write().await?;
        handed_back += payout::Entity::update_many()
            .col_expr(
                payout::Column::ClientWithdrawalId,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                payout::Column::InitiatedAt,
                Expr::value(Option::<chrono::DateTime<chrono::Utc>>::None),
            )
            .col_expr(payout::Column::UpdatedAt, Expr::value(time::now()))
            .filter(payout::Column::ClientWithdrawalId.is_in(chunk.to_vec()))
            .filter(payout::Column::Status.eq(PayoutStatus::Pending))
            .filter(payout::Column::CexWithdrawalId.is_null())
            .filter(payout::Column::PayrollRunId.in_subquery(super::lease::held_runs(lease)))
            .exec(&*tx)
            .await?
            .rows_affected;
        tx.commit().await?;
    }
    Ok(handed_back)
}

/// The payout id and attempt in a client withdrawal id `pay_…-<attempt>`.
pub fn parse_client_id(client_id: &str) -> Option<(&str, i32)> {
    let (payout_id, attempt) = client_id.rsplit_once('-')?;
    Some((payout_id, attempt.parse().ok()?))
}

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
    let mut payouts: HashMap<String, payout::Model> = HashMap::new();
    for chunk in wanted.chunks(1000) {
        for p in payout::Entity::find()
            .filter(payout::Column::Id.is_in(chunk.iter().cloned()))
            .all(&*tx)
            .await?
        {
            payouts.insert(p.id.clone(), p);
        }
    }
    let now = time::now();
    let mut after = run.clone();
    let mut changed = Vec::new();
    let mut events = Vec::new();
    let (mut completed, mut failed) = (Vec::new(), Vec::new());
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
    save_payouts(&*tx, &changed).await?;
    if !changed.is_empty() {
        save_run(&*tx, run.version, &mut after).await?;
        if let Some(job) = job.as_mut() {
            save_job(&*tx, job).await?;
        }
    }
    insert_events(&tx, events).await?;
    if !completed.is_empty() {
        insert_audit(&*tx, system_entry("PAYOUTS_COMPLETED", "payroll_run", &run.id, json!({
            "count": completed.len(), "first_payout_ids": first_ids(completed.iter().map(String::as_str)),
        })))
        .await?;
    }
    if !failed.is_empty() {
        insert_audit(&*tx, system_entry("PAYOUTS_FAILED", "payroll_run", &run.id, json!({
            "count": failed.len(), "first_payout_ids": first_ids(failed.iter().map(String::as_str)),
        })))
        .await?;
    }
    tx.commit().await?;
    Ok(Snapshot { run: after, job })
}

/// Records the exchange's answers to withdrawals this run handed over.
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
    let mut payouts: HashMap<String, payout::Model> = HashMap::new();
    let ids: Vec<String> = client_ids
        .iter()
        .filter_map(|c| parse_client_id(c).map(|(id, _)| id.to_owned()))
        .collect();
    for chunk in ids.chunks(1000) {
        for p in payout::Entity::find()
            .filter(payout::Column::Id.is_in(chunk.iter().cloned()))
            .all(&deps.db.conn)
            .await?
        {
            payouts.insert(p.id.clone(), p);
        }
    }
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

/// Client ids of the run's payouts handed to the exchange and not yet terminal.
pub async fn unsettled_client_ids(db: &Db, run_id: &str) -> Result<Vec<String>, RunError> {
    let ids: Vec<Option<String>> = payout::Entity::find()
        .select_only()
        .column(payout::Column::ClientWithdrawalId)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.is_in([PayoutStatus::Pending, PayoutStatus::Processing]))
        .filter(payout::Column::ClientWithdrawalId.is_not_null())
        .order_by_asc(payout::Column::Id)
        .into_tuple()
        .all(&db.conn)
        .await?;
    Ok(ids.into_iter().flatten().collect())
}

/// Payouts PROCESSING for longer than `exchange.stuck_after_ms`.
pub async fn stuck_payouts(deps: &RunDeps, run_id: &str) -> Result<Vec<String>, RunError> {
    let since = time::now() - Duration::milliseconds(deps.exchange_settings.stuck_after_ms as i64);
    Ok(payout::Entity::find()
        .select_only()
        .column(payout::Column::Id)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Processing))
        .filter(payout::Column::InitiatedAt.lt(since))
        .into_tuple()
        .all(&deps.db.conn)
        .await?)
}

/// Records payouts found stuck (audit entry); they are never sent again.
pub async fn report_stuck(
    deps: &RunDeps,
    run_id: &str,
    payout_ids: &[String],
) -> Result<(), RunError> {
    let tx = deps.db.begin_write().await?;
    insert_audit(
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
    save_run(&*tx, run.version, &mut after).await?;
    if let Some(job) = job.as_mut() {
        job.status = JobStatus::Completed;
        job.finished_at = Some(now);
        save_job(&*tx, job).await?;
    }
    let mut credited = 0i64;
    if run.is_test_run && deps.test_run.deduct_from_next_run {
        let paid: Vec<(String, i64)> = payout::Entity::find()
            .select_only()
            .column(payout::Column::EmployeeId)
            .column(payout::Column::AmountUsdCents)
            .filter(payout::Column::PayrollRunId.eq(run.id.as_str()))
            .filter(payout::Column::Status.eq(PayoutStatus::Completed))
            .filter(payout::Column::JobId.eq(job.as_ref().map(|j| j.id.clone())))
            .into_tuple()
            .all(&*tx)
            .await?;
        for (employee_id, amount) in &paid {
            use sea_orm::sea_query::ExprTrait;
            employee::Entity::update_many()
                .col_expr(
                    employee::Column::TestDeductionBalanceUsdCents,
                    Expr::col(employee::Column::TestDeductionBalanceUsdCents).add(*amount),
                )
                .filter(employee::Column::Id.eq(employee_id.as_str()))
                .exec(&*tx)
                .await?;
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
    insert_audit(&*tx, system_entry(action, "payroll_run", &run.id, details)).await?;
    tx.commit().await?;
    Ok((Snapshot { run: after, job }, true))
}

/// Whether the payouts of a run still hold pending withdrawals to hand over.
pub async fn has_unclaimed(db: &Db, run_id: &str) -> Result<bool, RunError> {
    Ok(payout::Entity::find()
        .select_only()
        .column(payout::Column::Id)
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Status.eq(PayoutStatus::Pending))
        .filter(payout::Column::ClientWithdrawalId.is_null())
        .limit(1)
        .into_tuple::<String>()
        .one(&db.conn)
        .await?
        .is_some())
}

/// Puts the mailer to work after new outbox rows were committed.
pub fn nudge_mailer(deps: &RunDeps) {
    if let Some(mailer) = &deps.mailer {
        if mailer.connected() {
            crate::telemetry::enqueued(crate::telemetry::ActorKind::Mailer);
        }
        mailer.do_send(OutboxChanged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_carry_payout_and_attempt() {
        assert_eq!(parse_client_id("pay_01ABC-2"), Some(("pay_01ABC", 2)));
        assert_eq!(parse_client_id("pay_01ABC"), None);
        assert_eq!(parse_client_id("pay_01ABC-x"), None);
    }
}
