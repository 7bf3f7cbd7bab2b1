//! `/payroll-runs` (and the `/runs` alias): create, list, show, payouts, cancel, archive.

use std::collections::{HashMap, HashSet};

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use chrono::{DateTime, Utc};
use futures_util::stream;
use payroll_actors::{
    events::run_event,
    run::{messages::RunCommand, planning, store, transitions},
};
use payroll_entities::{
    EmployeeStatus, PayoutStatus, RunStatus, RunType, Stablecoin, employee, ids, job, payout,
    payroll_run, time,
    views::{PayoutResource, RunResource},
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::{
    api::{ApiRequest, find_resource, merge_errors},
    audit::AuditRecord,
    auth::{self, Scope},
    dates::{DateInput, DayEdge},
    error::{ApiError, ErrorCode, FieldError},
    routes::api_keys::EmptyRequest,
    run_commands::{self, BalanceCheckResource},
};

/// One payee of an `ad_hoc` or `reimbursement` run.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunItem {
    #[schema(value_type = String)]
    pub employee_id: Option<String>,
    /// At least 1 cent.
    #[schema(value_type = i64)]
    pub amount_usd_cents: Option<i64>,
    pub note: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    /// Date-time or plain date (start of that day).
    #[schema(value_type = String, format = DateTime)]
    pub period_start: Option<DateInput>,
    /// Date-time or plain date (end of that day: 23:59:59.999Z); after period_start.
    #[schema(value_type = String, format = DateTime)]
    pub period_end: Option<DateInput>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_date: Option<DateInput>,
    pub label: Option<String>,
    pub note: Option<String>,
    /// regular (default), ad_hoc or reimbursement.
    #[serde(rename = "type")]
    pub run_type: Option<RunType>,
    /// Test run: each payout is min(test_run.amount_usd_cents, its normal amount).
    pub is_test_run: Option<bool>,
    /// Regular runs: the ACTIVE employees to pay; default all ACTIVE ones with a salary above 0
    /// whose contract dates overlap the period.
    pub employee_ids: Option<Vec<String>>,
    /// Required for ad_hoc and reimbursement runs, refused for regular ones. Each item is
    /// checked on its own, so every invalid one is listed.
    #[schema(value_type = Option<Vec<RunItem>>)]
    pub items: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRunRequest {
    /// Why the run is cancelled.
    pub reason: Option<String>,
}

fn check_len(errors: &mut Vec<FieldError>, field: &str, value: Option<&str>, max: usize) {
    if value.is_some_and(|v| v.chars().count() > max) {
        errors.push(FieldError::new(field, format!("at most {max} characters")));
    }
}

async fn find_run(req: &ApiRequest, id: &str) -> Result<payroll_run::Model, ApiError> {
    find_resource::<payroll_run::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::Run,
        "payroll_run",
        id,
        false,
    )
    .await
}

/// 409 naming the current status and what the run allows instead.
pub fn transition_refused(refused: transitions::Refused, operation: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidStatusTransition,
        format!("A {} run cannot be {operation}.", refused.current),
    )
    .detail("current_status", refused.current.as_str())
    .detail(
        "allowed_transitions",
        json!(
            refused
                .allowed_transitions
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
        ),
    )
    .detail("allowed_operations", json!(refused.allowed_operations))
}

/// The current jobs of these runs, by id.
async fn jobs_of<C: ConnectionTrait>(
    conn: &C,
    runs: &[payroll_run::Model],
) -> Result<HashMap<String, job::Model>, ApiError> {
    let ids: Vec<String> = runs
        .iter()
        .filter_map(|r| r.current_job_id.clone())
        .collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(job::Entity::find()
        .filter(job::Column::Id.is_in(ids))
        .all(conn)
        .await?
        .into_iter()
        .map(|j| (j.id.clone(), j))
        .collect())
}

/// The run as shown, with its current job.
pub async fn show_run<C: ConnectionTrait>(
    conn: &C,
    run: &payroll_run::Model,
) -> Result<RunResource, ApiError> {
    let jobs = jobs_of(conn, std::slice::from_ref(run)).await?;
    Ok(RunResource::new(
        run,
        run.current_job_id.as_ref().and_then(|id| jobs.get(id)),
    ))
}

#[utoipa::path(get, path = "/payroll-runs", operation_id = "listPayrollRuns", tag = "payroll-runs",
    params(
        ("status" = Option<RunStatus>, Query), ("type" = Option<RunType>, Query),
        ("is_adhoc" = Option<bool>, Query), ("is_test_run" = Option<bool>, Query),
        ("include_archived" = Option<bool>, Query, description = "default false"),
        ("created_after" = Option<String>, Query, description = "date-time or date"),
        ("created_before" = Option<String>, Query, description = "date-time or date"),
        ("sort" = Option<String>, Query, description = "created_at, -created_at (default), total_amount_usd_cents, -total_amount_usd_cents"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Runs", body = Vec<RunResource>)))]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed("status", RunStatus::parse, &RunStatus::spellings());
    let run_type = query.parsed("type", RunType::parse, &RunType::spellings());
    let is_adhoc = query.bool("is_adhoc");
    let is_test_run = query.bool("is_test_run");
    let include_archived = query.bool("include_archived").unwrap_or(false);
    let created_after = query.datetime("created_after");
    let created_before = query.datetime("created_before");
    let sort = query.parsed(
        "sort",
        |s| match s {
            "created_at" | "-created_at" | "total_amount_usd_cents" | "-total_amount_usd_cents" => {
                Some(s.to_owned())
            }
            _ => None,
        },
        "created_at, -created_at, total_amount_usd_cents, -total_amount_usd_cents",
    );
    let page = query.page();
    query.finish(&[
        "status",
        "type",
        "is_adhoc",
        "is_test_run",
        "include_archived",
        "created_after",
        "created_before",
        "sort",
        "limit",
        "offset",
    ])?;

    let mut select = payroll_run::Entity::find();
    if let Some(status) = status {
        select = select.filter(payroll_run::Column::Status.eq(status));
    }
    if let Some(run_type) = run_type {
        select = select.filter(payroll_run::Column::RunType.eq(run_type));
    }
    if let Some(adhoc) = is_adhoc {
        select = if adhoc {
            select.filter(payroll_run::Column::RunType.eq(RunType::AdHoc))
        } else {
            select.filter(payroll_run::Column::RunType.ne(RunType::AdHoc))
        };
    }
    if let Some(test) = is_test_run {
        select = select.filter(payroll_run::Column::IsTestRun.eq(test));
    }
    if !include_archived {
        select = select.filter(payroll_run::Column::IsArchived.eq(false));
    }
    if let Some(after) = created_after {
        select = select.filter(payroll_run::Column::CreatedAt.gt(after));
    }
    if let Some(before) = created_before {
        select = select.filter(payroll_run::Column::CreatedAt.lt(before));
    }
    select = match sort.as_deref() {
        Some("created_at") => select.order_by_asc(payroll_run::Column::Id),
        Some("total_amount_usd_cents") => select
            .order_by_asc(payroll_run::Column::TotalAmountUsdCents)
            .order_by_desc(payroll_run::Column::Id),
        Some("-total_amount_usd_cents") => select
            .order_by_desc(payroll_run::Column::TotalAmountUsdCents)
            .order_by_desc(payroll_run::Column::Id),
        _ => select.order_by_desc(payroll_run::Column::Id),
    };
    let db = &req.state().db.conn;
    let total = select.clone().count(db).await?;
    let runs = select.limit(page.limit).offset(page.offset).all(db).await?;
    let jobs = jobs_of(db, &runs).await?;
    let items: Vec<RunResource> = runs
        .iter()
        .map(|r| RunResource::new(r, r.current_job_id.as_ref().and_then(|id| jobs.get(id))))
        .collect();
    req.list(&items, page, total)
}

#[utoipa::path(post, path = "/payroll-runs", operation_id = "createPayrollRun", tag = "payroll-runs",
    request_body = CreateRunRequest,
    responses((status = 201, description = "The new DRAFT run with its payouts computed", body = RunResource)))]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let (body, type_errors) = req.json_partial::<CreateRunRequest>()?;
    let mut errors = Vec::new();
    let start = body.period_start.map(|d| d.resolve(DayEdge::Start));
    let end = body.period_end.map(|d| d.resolve(DayEdge::End));
    if start.is_none() {
        errors.push(FieldError::new(
            "period_start",
            "required: a date-time or date",
        ));
    }
    if end.is_none() {
        errors.push(FieldError::new(
            "period_end",
            "required: a date-time or date",
        ));
    }
    if let (Some(s), Some(e)) = (start, end)
        && e <= s
    {
        errors.push(FieldError::new("period_end", "must be after period_start"));
    }
    check_len(&mut errors, "label", body.label.as_deref(), 200);
    check_len(&mut errors, "note", body.note.as_deref(), 2000);
    let run_type = body.run_type.unwrap_or(RunType::Regular);
    let is_test_run = body.is_test_run.unwrap_or(false);
    match (run_type, &body.items, &body.employee_ids) {
        (RunType::Regular, Some(_), _) => errors.push(FieldError::new(
            "items",
            "not allowed for regular runs, which pay salaries: use employee_ids to choose employees",
        )),
        (RunType::AdHoc | RunType::Reimbursement, None, _) => errors.push(FieldError::new(
            "items",
            "required for ad_hoc and reimbursement runs: [{employee_id, amount_usd_cents}]",
        )),
        (RunType::AdHoc | RunType::Reimbursement, Some(items), _) if items.is_empty() => {
            errors.push(FieldError::new("items", "must hold at least one item"))
        }
        _ => {}
    }
    if run_type != RunType::Regular && body.employee_ids.is_some() {
        errors.push(FieldError::new(
            "employee_ids",
            "only for regular runs; ad_hoc and reimbursement runs name employees in items",
        ));
    }
    if body.employee_ids.as_ref().is_some_and(Vec::is_empty) {
        errors.push(FieldError::new(
            "employee_ids",
            "must hold at least one id; leave it out to pay every eligible employee",
        ));
    }
    // The payees wanted, in order, with the amount an item sets.
    let mut wanted: Vec<(String, String, Option<i64>, Option<String>)> = Vec::new();
    let mut seen = HashSet::new();
    if run_type == RunType::Regular {
        for (i, id) in body.employee_ids.iter().flatten().enumerate() {
            let field = format!("employee_ids[{i}]");
            if !seen.insert(id.clone()) {
                errors.push(FieldError::new(field, "listed twice"));
            } else {
                wanted.push((field, id.clone(), None, None));
            }
        }
    } else {
        for (i, raw) in body.items.iter().flatten().enumerate() {
            let field = format!("items[{i}]");
            let (item, item_errors) = if raw.is_object() {
                crate::api::parse_partial::<RunItem>(raw.clone())
            } else {
                (
                    None,
                    vec![FieldError::new(
                        "",
                        "each item must be an object {employee_id, amount_usd_cents}",
                    )],
                )
            };
            errors.extend(item_errors.iter().map(|e| {
                let at = if e.field.is_empty() {
                    field.clone()
                } else {
                    format!("{field}.{}", e.field)
                };
                FieldError::new(at, e.message.clone())
            }));
            let Some(item) = item else { continue };
            let mistyped = |name: &str| item_errors.iter().any(|e| e.field == name);
            match &item.employee_id {
                None if mistyped("employee_id") => {}
                None => errors.push(FieldError::new(format!("{field}.employee_id"), "required")),
                Some(id) if !seen.insert(id.clone()) => errors.push(FieldError::new(
                    format!("{field}.employee_id"),
                    "one item per employee: this employee is in an earlier item",
                )),
                Some(_) => {}
            }
            match item.amount_usd_cents {
                None if mistyped("amount_usd_cents") => {}
                None => errors.push(FieldError::new(
                    format!("{field}.amount_usd_cents"),
                    "required: at least 1 cent",
                )),
                Some(a) if a < 1 => errors.push(FieldError::new(
                    format!("{field}.amount_usd_cents"),
                    "must be at least 1 cent",
                )),
                Some(_) => {}
            }
            check_len(
                &mut errors,
                &format!("{field}.note"),
                item.note.as_deref(),
                500,
            );
            if let Some(id) = &item.employee_id {
                wanted.push((
                    format!("{field}.employee_id"),
                    id.clone(),
                    item.amount_usd_cents,
                    item.note.clone(),
                ));
            }
        }
    }
    let checks = std::mem::replace(&mut errors, type_errors);
    merge_errors(&mut errors, checks);
    let (Some(start), Some(end)) = (start, end) else {
        return Err(ApiError::validation(errors));
    };
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }

    let state = req.state();
    let now = time::now();
    let run_id = ids::new_id(ids::IdKind::Run);
    let tx = state.db.begin_write().await?;
    store::lock_run_creation(&*tx).await?;
    if run_type == RunType::Regular
        && !is_test_run
        && let Some(existing) = store::find_overlapping_regular(&*tx, start, end).await?
    {
        return Err(ApiError::new(
            ErrorCode::PayrollRunOverlap,
            format!(
                "Regular run {} ({}) already covers part of this period.",
                existing.id, existing.status
            ),
        )
        .detail("existing_run_id", existing.id.as_str())
        .detail("existing_run_status", existing.status.as_str()));
    }

    // (employee, amount, note) of every payout.
    let mut payees: Vec<(employee::Model, i64, Option<String>)> = Vec::new();
    if run_type == RunType::Regular && body.employee_ids.is_none() {
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
            return Err(ApiError::validation(vec![FieldError::new(
                "employee_ids",
                "no ACTIVE employee with a salary above 0 has a contract covering the period; add employees first",
            )]));
        }
    } else {
        let ids: Vec<String> = wanted.iter().map(|(_, id, _, _)| id.clone()).collect();
        let mut found = store::employees_by_id(&*tx, ids.iter().cloned()).await?;
        for (field, id, amount, note) in wanted {
            match found.remove(&id) {
                None => errors.push(FieldError::new(field, format!("no employee with id {id}"))),
                Some(e) if e.status != EmployeeStatus::Active => {
                    errors.push(FieldError::new(field, format!("employee {id} is INACTIVE")))
                }
                Some(e) => {
                    let amount = amount.unwrap_or(e.salary_usd_cents);
                    if amount < 1 {
                        errors.push(FieldError::new(
                            field,
                            format!("employee {id} has no salary to pay"),
                        ));
                    } else {
                        payees.push((e, amount, note));
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(ApiError::validation(errors));
        }
    }

    let cap = state.settings.test_run.amount_usd_cents;
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
            completed_at: None,
            created_at: now,
            updated_at: now,
        })
        .collect();
    let total = payroll_entities::Cents::sum(
        payouts
            .iter()
            .map(|p| payroll_entities::Cents(p.amount_usd_cents)),
    )
    .ok_or_else(|| {
        ApiError::validation(vec![FieldError::new(
            "items",
            "the amounts add up to more than can be represented",
        )])
    })?;
    let count = payouts.len() as i64;
    let run = payroll_run::Model {
        id: run_id.clone(),
        status: RunStatus::Draft,
        run_type,
        is_test_run,
        is_archived: false,
        label: body
            .label
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty()),
        note: body.note,
        period_start: start,
        period_end: end,
        pay_date: body.pay_date.map(|d| d.resolve(DayEdge::Start)),
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
        created_by_key_id: req.caller.as_ref().map(|c| c.key_id.clone()),
        version: 1,
        created_at: now,
        updated_at: now,
        confirmed_at: None,
        deposited_at: None,
        executed_at: None,
        completed_at: None,
        cancelled_at: None,
        cancel_reason: None,
    };
    let first_ids: Vec<&str> = payouts.iter().take(20).map(|p| p.id.as_str()).collect();
    let record = AuditRecord::new("PAYROLL_RUN_CREATED", "payroll_run", &run_id).details(json!({
        "type": run_type,
        "is_test_run": is_test_run,
        "payout_count": count,
        "total_amount_usd_cents": total.0,
        "first_payout_ids": first_ids,
    }));
    let shown = RunResource::new(&run, None);
    payroll_actors::events::insert_events(&tx, vec![run_event("payroll.run.created", &run, None)])
        .await?;
    store::insert_run(&*tx, run, payouts).await?;
    req.commit::<_, RunResource>(tx, StatusCode::CREATED, &shown, None, record)
        .await
}

#[utoipa::path(get, path = "/payroll-runs/{run_id}", operation_id = "getPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)),
    responses((status = 200, description = "The run with its current status", body = RunResource)))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let run = find_run(&req, req.param("run_id")).await?;
    req.ok(&show_run(&req.state().db.conn, &run).await?)
}

const CSV_PAGE: u64 = 1000;

#[utoipa::path(get, path = "/payroll-runs/{run_id}/payouts", operation_id = "getPayrollRunPayouts", tag = "payroll-runs",
    params(("run_id" = String, Path), ("status" = Option<PayoutStatus>, Query),
        ("format" = Option<String>, Query, description = "`csv` streams every payout as CSV (also with Accept: text/csv)"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Payouts of the run, newest first; or all of them as text/csv", body = Vec<PayoutResource>)))]
pub async fn payouts(req: ApiRequest, http: HttpRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed("status", PayoutStatus::parse, &PayoutStatus::spellings());
    let format = query.parsed(
        "format",
        |s| matches!(s, "json" | "csv").then(|| s.to_owned()),
        "json, csv",
    );
    let page = query.page();
    query.finish(&["status", "format", "limit", "offset"])?;
    let run = find_run(&req, req.param("run_id")).await?;
    let wants_csv = match format.as_deref() {
        Some(f) => f == "csv",
        None => http
            .headers()
            .get(actix_web::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/csv")),
    };
    if wants_csv {
        return Ok(csv_stream(req.state().db.clone(), run.id, status));
    }
    let mut select =
        payout::Entity::find().filter(payout::Column::PayrollRunId.eq(run.id.as_str()));
    if let Some(status) = status {
        select = select.filter(payout::Column::Status.eq(status));
    }
    let db = &req.state().db.conn;
    let total = match status {
        Some(_) => select.clone().count(db).await?,
        None => {
            (run.pending_count
                + run.processing_count
                + run.completed_count
                + run.failed_count
                + run.cancelled_count) as u64
        }
    };
    let items: Vec<PayoutResource> = select
        .order_by_desc(payout::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .iter()
        .map(PayoutResource::from)
        .collect();
    req.list(&items, page, total)
}

const CSV_HEADER: &[&str] = &[
    "id",
    "payroll_run_id",
    "employee_id",
    "employee_name",
    "employee_email",
    "status",
    "is_test_run",
    "amount_usd_cents",
    "fee_usd_cents",
    "test_run_deduction_usd_cents",
    "stablecoin",
    "network",
    "wallet_address",
    "note",
    "attempt",
    "client_withdrawal_id",
    "cex_withdrawal_id",
    "on_chain_tx_hash",
    "block_explorer_url",
    "failed_reason",
    "initiated_at",
    "completed_at",
    "created_at",
    "updated_at",
];

/// Free text as a CSV cell that a spreadsheet shows as text, never runs as a formula.
fn text_cell(value: &str) -> std::borrow::Cow<'_, str> {
    if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{value}"))
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

fn csv_row(writer: &mut csv::Writer<Vec<u8>>, p: &payout::Model) -> Result<(), csv::Error> {
    let opt_ts = |t: &Option<DateTime<Utc>>| t.as_ref().map(time::format).unwrap_or_default();
    writer.write_record([
        p.id.as_str(),
        &p.payroll_run_id,
        &p.employee_id,
        &text_cell(&p.employee_name),
        &text_cell(&p.employee_email),
        p.status.as_str(),
        if p.is_test_run { "true" } else { "false" },
        &p.amount_usd_cents.to_string(),
        &p.fee_usd_cents.to_string(),
        &p.test_run_deduction_usd_cents.to_string(),
        p.stablecoin.as_str(),
        p.network.as_str(),
        &p.wallet_address,
        &text_cell(p.note.as_deref().unwrap_or_default()),
        &p.attempt.to_string(),
        p.client_withdrawal_id.as_deref().unwrap_or_default(),
        p.cex_withdrawal_id.as_deref().unwrap_or_default(),
        p.on_chain_tx_hash.as_deref().unwrap_or_default(),
        p.block_explorer_url.as_deref().unwrap_or_default(),
        &text_cell(p.failed_reason.as_deref().unwrap_or_default()),
        &opt_ts(&p.initiated_at),
        &opt_ts(&p.completed_at),
        &time::format(&p.created_at),
        &time::format(&p.updated_at),
    ])
}

/// Every payout of the run as CSV, read page by page (by id) so memory stays flat.
fn csv_stream(
    db: payroll_entities::db::Db,
    run_id: String,
    status: Option<PayoutStatus>,
) -> HttpResponse {
    struct Cursor {
        db: payroll_entities::db::Db,
        run_id: String,
        status: Option<PayoutStatus>,
        after: Option<String>,
        header_sent: bool,
        done: bool,
    }
    let cursor = Cursor {
        db,
        run_id,
        status,
        after: None,
        header_sent: false,
        done: false,
    };
    let body = stream::unfold(cursor, |mut c| async move {
        if c.done {
            return None;
        }
        let mut writer = csv::WriterBuilder::new().from_writer(Vec::with_capacity(256 * 1024));
        if !c.header_sent {
            c.header_sent = true;
            if let Err(err) = writer.write_record(CSV_HEADER) {
                return Some((Err(ApiError::internal(err)), c));
            }
        }
        let mut select =
            payout::Entity::find().filter(payout::Column::PayrollRunId.eq(c.run_id.as_str()));
        if let Some(status) = c.status {
            select = select.filter(payout::Column::Status.eq(status));
        }
        if let Some(after) = &c.after {
            select = select.filter(payout::Column::Id.gt(after.as_str()));
        }
        let page = match select
            .order_by_asc(payout::Column::Id)
            .limit(CSV_PAGE)
            .all(&c.db.conn)
            .await
        {
            Ok(page) => page,
            Err(err) => {
                c.done = true;
                return Some((Err(ApiError::from(err)), c));
            }
        };
        if (page.len() as u64) < CSV_PAGE {
            c.done = true;
        }
        for p in &page {
            if let Err(err) = csv_row(&mut writer, p) {
                c.done = true;
                return Some((Err(ApiError::internal(err)), c));
            }
        }
        c.after = page.last().map(|p| p.id.clone());
        match writer.into_inner() {
            Ok(bytes) => Some((Ok(web::Bytes::from(bytes)), c)),
            Err(err) => {
                c.done = true;
                Some((Err(ApiError::internal(err)), c))
            }
        }
    });
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .streaming(body)
}

/// Checks the run exists (404 otherwise) before its actor is started for it.
async fn existing_run_id(req: &ApiRequest) -> Result<String, ApiError> {
    Ok(find_run(req, req.param("run_id")).await?.id)
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/confirm", operation_id = "confirmPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, CONFIRMED: payees re-read, fees quoted, test-run deductions taken, amounts locked", body = RunResource)))]
pub async fn confirm(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::Confirm, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/balance-check", operation_id = "checkPayrollRunBalance", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "Whether the exchange account covers the run; a covered CONFIRMED run becomes DEPOSITED (funds reserved)", body = BalanceCheckResource)))]
pub async fn balance_check(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::BalanceCheck, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/execute", operation_id = "executePayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, PAYING_OUT, with its job: withdrawals start, each payee is emailed", body = RunResource)))]
pub async fn execute(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::Execute, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/sync", operation_id = "syncPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run after one reconciliation pass with the exchange (PAYING_OUT runs); poll until every payout is terminal", body = RunResource)))]
pub async fn sync(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::Sync, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/retry-failed", operation_id = "retryFailedPayouts", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, PAYING_OUT again with a new job: every FAILED payout is sent again to its employee's current wallet", body = RunResource)))]
pub async fn retry_failed(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::RetryFailed, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/cancel", operation_id = "cancelPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<CancelRunRequest>),
    responses((status = 200, description = "The run, now CANCELLED; its pending payouts are CANCELLED and its reservation released", body = RunResource)))]
pub async fn cancel(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let body: CancelRunRequest = req.json()?;
    let mut errors = Vec::new();
    check_len(&mut errors, "reason", body.reason.as_deref(), 1000);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let run_id = existing_run_id(&req).await?;
    let may_cancel_funded = auth::grants(&req.caller()?.scopes, Scope::PayrollExecute);
    let command = RunCommand::Cancel {
        reason: body.reason,
        may_cancel_funded,
    };
    run_commands::send(&req, &run_id, command, StatusCode::OK).await
}

#[utoipa::path(post, path = "/payroll-runs/{run_id}/archive", operation_id = "archivePayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, archived (hidden from lists unless include_archived=true)", body = RunResource)))]
pub async fn archive(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    run_commands::send(&req, &run_id, RunCommand::Archive, StatusCode::OK).await
}
