//! Creating a run (CONTRACT §8): its payees chosen by the pure rules of `planning`, its payouts
//! computed, and the run, its payouts, the `payroll.run.created` event, the audit entry and the
//! idempotency record written in one transaction.

use chrono::{DateTime, Utc};
use payroll_entities::{
    Cents, EmployeeStatus, PayoutStatus, RunStatus, RunType, Stablecoin, employee, ids, payout,
    payroll_run, time,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
};
use serde_json::json;

use super::{
    deps::RunDeps,
    messages::{CreateRun, Payees, RunError, RunReply},
    planning, store,
};
use crate::{
    acknowledgement::Outcome,
    audit::{AuditRecord, first_ids},
    events::{insert_events, run_event},
};

/// Creates the run `msg` describes, as DRAFT; answers with the committed answer.
#[tracing::instrument(skip_all, fields(run_type = %msg.run_type, is_test_run = msg.is_test_run))]
pub async fn create_run(deps: &RunDeps, msg: CreateRun) -> Result<RunReply, RunError> {
    let CreateRun {
        run_type,
        is_test_run,
        period_start: start,
        period_end: end,
        pay_date,
        label,
        note,
        payees: wanted,
        created_by_key_id,
        ack,
    } = msg;
    let now = time::now();
    let run_id = ids::new_id(ids::IdKind::Run);
    let tx = deps.db.begin_write().await?;
    store::lock_run_creation(&*tx).await?;
    if run_type == RunType::Regular
        && !is_test_run
        && let Some(existing) = store::find_overlapping_regular(&*tx, start, end).await?
    {
        return Err(RunError::Overlap {
            existing_run_id: existing.id,
            existing_status: existing.status,
        });
    }

    // The run row first, its figures filled in once every payout is written; the payouts are
    // made and written a page of employees at a time, so memory does not grow with the run.
    let mut run = payroll_run::Model {
        label,
        note,
        pay_date,
        created_by_key_id,
        ..new_run(run_id, run_type, is_test_run, (start, end), now)
    };
    store::insert_run(&*tx, run.clone()).await?;
    let mut tally = Tally {
        count: 0,
        total: Some(Cents(0)),
        first_ids: Vec::new(),
    };
    let cap = deps.test_run.amount_usd_cents;
    let make = |e: employee::Model, amount: i64, note: Option<String>| {
        let amount = if is_test_run {
            planning::test_run_amount(amount, cap)
        } else {
            amount
        };
        new_payout(&run.id, is_test_run, e, amount, note, now)
    };
    match wanted {
        Payees::Eligible => {
            let mut last_id: Option<String> = None;
            loop {
                // Walked by id alone, each page the next ids of the primary key: a filter on
                // status in the query let SQLite (which keeps no statistics here) read every
                // ACTIVE employee through the status index and sort them, for each page.
                // Those not paid are skipped here instead.
                let mut query = employee::Entity::find();
                if let Some(last) = &last_id {
                    query = query.filter(employee::Column::Id.gt(last.as_str()));
                }
                let page = query
                    .order_by_asc(employee::Column::Id)
                    .limit(EMPLOYEE_PAGE)
                    .all(&*tx)
                    .await?;
                let Some(last) = page.last() else { break };
                last_id = Some(last.id.clone());
                let payouts: Vec<payout::Model> = page
                    .into_iter()
                    .filter(|e| e.status == EmployeeStatus::Active && e.salary_usd_cents > 0)
                    .filter(|e| planning::paid_by_default(e, start, end))
                    .map(|e| {
                        let salary = e.salary_usd_cents;
                        make(e, salary, None)
                    })
                    .collect();
                tally.add(&*tx, payouts).await?;
            }
            if tally.count == 0 {
                return Err(RunError::Invalid(vec![(
                    "employee_ids".into(),
                    "no ACTIVE employee with a salary above 0 has a contract covering the period; add employees first".into(),
                )]));
            }
        }
        Payees::Listed(wanted) => {
            let mut found =
                store::employees_by_id(&*tx, wanted.iter().map(|w| w.employee_id.clone())).await?;
            let mut errors = Vec::new();
            let mut payouts = Vec::with_capacity(wanted.len());
            for w in wanted {
                let id = &w.employee_id;
                match found.remove(id) {
                    None => errors.push((w.field, format!("no employee with id {id}"))),
                    Some(e) if e.status != EmployeeStatus::Active => {
                        errors.push((w.field, format!("employee {id} is INACTIVE")))
                    }
                    Some(e) => {
                        let amount = w.amount_usd_cents.unwrap_or(e.salary_usd_cents);
                        if amount < 1 {
                            errors.push((w.field, format!("employee {id} has no salary to pay")));
                        } else {
                            payouts.push(make(e, amount, w.note));
                        }
                    }
                }
            }
            if !errors.is_empty() {
                return Err(RunError::Invalid(errors));
            }
            tally.add(&*tx, payouts).await?;
        }
    }

    let total = tally.total.ok_or_else(|| {
        RunError::Invalid(vec![(
            "items".into(),
            "the amounts add up to more than can be represented".into(),
        )])
    })?;
    let count = tally.count;
    run.employee_count = count;
    run.pending_count = count;
    run.total_amount_usd_cents = total.0;
    payroll_run::Entity::update(run.clone().into_active_model().reset_all())
        .exec(&*tx)
        .await?;
    let action = AuditRecord {
        action: "PAYROLL_RUN_CREATED",
        resource_type: "payroll_run",
        resource_id: run.id.clone(),
        details: json!({
            "type": run_type,
            "is_test_run": is_test_run,
            "payout_count": count,
            "total_amount_usd_cents": total.0,
            "first_payout_ids": first_ids(tally.first_ids.iter().map(String::as_str)),
        }),
    };
    insert_events(&tx, vec![run_event("payroll.run.created", &run, None)]).await?;
    let outcome = Outcome::Run {
        run: run.clone(),
        job: None,
    };
    let body = ack.commit_in(&*tx, &outcome, action).await?;
    tx.commit().await?;
    // Confirm, the payouts' CSV and execution walk the run's payouts in pages and claim them
    // in windows: with statistics that still take them for a few rows, PostgreSQL read all
    // of them for each page.
    deps.db.analyze_after("payouts", count as u64).await;
    Ok(RunReply {
        body,
        run,
        job: None,
    })
}

/// Employees read per page when a run pays everybody eligible.
const EMPLOYEE_PAGE: u64 = 2000;

/// The payouts written so far.
struct Tally {
    count: i64,
    total: Option<Cents>,
    first_ids: Vec<String>,
}

impl Tally {
    async fn add<C: ConnectionTrait>(
        &mut self,
        conn: &C,
        payouts: Vec<payout::Model>,
    ) -> Result<(), RunError> {
        for p in &payouts {
            self.count += 1;
            self.total = self
                .total
                .and_then(|t| t.checked_add(Cents(p.amount_usd_cents)));
            if self.first_ids.len() < 20 {
                self.first_ids.push(p.id.clone());
            }
        }
        store::insert_payouts(conn, payouts).await?;
        Ok(())
    }
}

/// A PENDING payout of `amount` to `e`.
fn new_payout(
    run_id: &str,
    is_test_run: bool,
    e: employee::Model,
    amount: i64,
    note: Option<String>,
    now: DateTime<Utc>,
) -> payout::Model {
    payout::Model {
        id: ids::new_id(ids::IdKind::Payout),
        payroll_run_id: run_id.to_owned(),
        employee_id: e.id,
        employee_name: e.name,
        employee_email: e.email,
        status: PayoutStatus::Pending,
        is_test_run,
        amount_usd_cents: amount,
        fee_usd_cents: 0,
        test_run_deduction_usd_cents: 0,
        stablecoin: e.stablecoin,
        network: e.network,
        wallet_address: e.wallet_address,
        note,
        attempt: 1,
        job_id: None,
        client_withdrawal_id: None,
        cex_withdrawal_id: None,
        on_chain_tx_hash: None,
        block_explorer_url: None,
        failed_reason: None,
        initiated_at: None,
        send_count: 0,
        last_sent_at: None,
        unfound_lookups: 0,
        stuck_since: None,
        completed_at: None,
        created_at: now,
        updated_at: now,
    }
}

/// A DRAFT run with no payouts yet and nothing optional set.
fn new_run(
    id: String,
    run_type: RunType,
    is_test_run: bool,
    (period_start, period_end): (DateTime<Utc>, DateTime<Utc>),
    now: DateTime<Utc>,
) -> payroll_run::Model {
    payroll_run::Model {
        id,
        status: RunStatus::Draft,
        run_type,
        is_test_run,
        is_archived: false,
        label: None,
        note: None,
        period_start,
        period_end,
        pay_date: None,
        employee_count: 0,
        total_amount_usd_cents: 0,
        total_fees_usd_cents: 0,
        stablecoin: Stablecoin::Usdc,
        pending_count: 0,
        processing_count: 0,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        current_job_id: None,
        created_by_key_id: None,
        version: 1,
        created_at: now,
        updated_at: now,
        confirmed_at: None,
        deposited_at: None,
        executed_at: None,
        completed_at: None,
        cancelled_at: None,
        cancel_reason: None,
    }
}
