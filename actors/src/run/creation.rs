//! Creating a run (CONTRACT §8): its payees chosen by the pure rules of `planning`, its payouts
//! computed, and the run, its payouts, the `payroll.run.created` event, the audit entry and the
//! idempotency record written in one transaction.

use chrono::{DateTime, Utc};
use payroll_entities::{
    Cents, EmployeeStatus, PayoutStatus, RunStatus, RunType, Stablecoin, employee, ids, payout,
    payroll_run, time,
};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
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

    // (employee, amount, note) of every payout.
    let mut payees: Vec<(employee::Model, i64, Option<String>)> = Vec::new();
    match wanted {
        Payees::Eligible => {
            for e in employee::Entity::find()
                .filter(employee::Column::Status.eq(EmployeeStatus::Active))
                .filter(employee::Column::SalaryUsdCents.gt(0))
                .order_by_asc(employee::Column::Id)
                .all(&*tx)
                .await?
            {
                if planning::paid_by_default(&e, start, end) {
                    let salary = e.salary_usd_cents;
                    payees.push((e, salary, None));
                }
            }
            if payees.is_empty() {
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
                            payees.push((e, amount, w.note));
                        }
                    }
                }
            }
            if !errors.is_empty() {
                return Err(RunError::Invalid(errors));
            }
        }
    }

    let cap = deps.test_run.amount_usd_cents;
    let payouts: Vec<payout::Model> = payees
        .into_iter()
        .map(|(e, amount, note)| payout::Model {
            id: ids::new_id(ids::IdKind::Payout),
            payroll_run_id: run_id.clone(),
            employee_id: e.id,
            employee_name: e.name,
            employee_email: e.email,
            status: PayoutStatus::Pending,
            is_test_run,
            amount_usd_cents: if is_test_run {
                planning::test_run_amount(amount, cap)
            } else {
                amount
            },
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
            stuck_since: None,
            completed_at: None,
            created_at: now,
            updated_at: now,
        })
        .collect();
    let total = Cents::sum(payouts.iter().map(|p| Cents(p.amount_usd_cents))).ok_or_else(|| {
        RunError::Invalid(vec![(
            "items".into(),
            "the amounts add up to more than can be represented".into(),
        )])
    })?;
    let count = payouts.len() as i64;
    let run = new_run(
        run_id,
        run_type,
        is_test_run,
        (start, end),
        count,
        total,
        now,
    );
    let run = payroll_run::Model {
        label,
        note,
        pay_date,
        created_by_key_id,
        ..run
    };
    let action = AuditRecord {
        action: "PAYROLL_RUN_CREATED",
        resource_type: "payroll_run",
        resource_id: run.id.clone(),
        details: json!({
            "type": run_type,
            "is_test_run": is_test_run,
            "payout_count": count,
            "total_amount_usd_cents": total.0,
            "first_payout_ids": first_ids(payouts.iter().map(|p| p.id.as_str())),
        }),
    };
    insert_events(&tx, vec![run_event("payroll.run.created", &run, None)]).await?;
    store::insert_run(&*tx, run.clone(), payouts).await?;
    let outcome = Outcome::Run {
        run: run.clone(),
        job: None,
    };
    let body = ack.commit_in(&*tx, &outcome, action).await?;
    tx.commit().await?;
    Ok(RunReply {
        body,
        run,
        job: None,
    })
}

/// A DRAFT run of `count` payouts adding up to `total`, with nothing optional set.
fn new_run(
    id: String,
    run_type: RunType,
    is_test_run: bool,
    (period_start, period_end): (DateTime<Utc>, DateTime<Utc>),
    count: i64,
    total: Cents,
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
        employee_count: count,
        total_amount_usd_cents: total.0,
        total_fees_usd_cents: 0,
        stablecoin: Stablecoin::Usdc,
        pending_count: count,
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
