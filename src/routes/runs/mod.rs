//! `/payroll-runs` (and the `/runs` alias): create, list, show, payouts, and the commands
//! (confirm, balance-check, execute, sync, retry-failed, cancel, archive) sent to run actors.

use std::{collections::HashMap, sync::Arc};

use actix_web::{HttpRequest, HttpResponse, http::StatusCode};
use payroll_actors::{
    run::messages::RunCommand,
    telemetry::{CountedSend, MAILBOX_LIMIT},
    views::{PayoutResource, RunResource},
};
use payroll_entities::{PayoutStatus, RunStatus, RunType, ids, job, payout, payroll_run};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use serde::Deserialize;
use utoipa::ToSchema;

mod commands;
pub mod create;
mod csv;
pub mod views;

pub use commands::{BalanceCheckResource, exchange_failed, send};
pub use create::{CreateRunRequest, RunItem};

use crate::http::query::fetch_page;
use crate::{
    http::{
        auth::{self, Scope},
        error::ApiError,
        request::ApiRequest,
        resource::find_resource,
    },
    routes::api_keys::EmptyRequest,
};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRunRequest {
    /// Why the run is cancelled.
    pub reason: Option<String>,
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

/// The orders `GET /payroll-runs` takes in `sort`.
pub const RUN_SORTS: [&str; 4] = [
    "created_at",
    "-created_at",
    "total_amount_usd_cents",
    "-total_amount_usd_cents",
];
/// The `format` values of `GET /payroll-runs/{run_id}/payouts`.
pub const PAYOUT_FORMATS: [&str; 2] = ["json", "csv"];

/// List payroll runs, newest first, filtered by status, type, test run, archive or creation time.
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
#[tracing::instrument(skip_all)]
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
        |s| RUN_SORTS.contains(&s).then(|| s.to_owned()),
        &RUN_SORTS.join(", "),
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
    let (runs, total) = fetch_page(db, select, page).await?;
    let jobs = jobs_of(db, &runs).await?;
    let items: Vec<RunResource> = runs
        .iter()
        .map(|r| RunResource::new(r, r.current_job_id.as_ref().and_then(|id| jobs.get(id))))
        .collect();
    req.list(&items, page, total)
}

/// Create a payroll run (DRAFT) with one payout per paid employee.
///
/// Regular runs pay salaries; ad_hoc and reimbursement runs pay the listed items.
#[utoipa::path(post, path = "/payroll-runs", operation_id = "createPayrollRun", tag = "payroll-runs",
    request_body = CreateRunRequest,
    responses((status = 201, description = "The new DRAFT run with its payouts computed", body = RunResource)))]
#[tracing::instrument(skip_all)]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let message = create::create_run(&req)?;
    let reply = req
        .state()
        .runs
        .bounded_send(message, MAILBOX_LIMIT)?
        .await?
        .map_err(|err| commands::run_error(&req, "", err))?;
    Ok(commands::committed(StatusCode::CREATED, reply.body))
}

/// Get one payroll run with its totals, payout counts and current job.
#[utoipa::path(get, path = "/payroll-runs/{run_id}", operation_id = "getPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)),
    responses((status = 200, description = "The run with its current status", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let state = req.state();
    // Taken before the read: a view read while a write commits is not kept past that write.
    let generation = state.run_views.generation().await;
    if let Some(view) = generation.and_then(|g| state.run_views.get(g, req.param("run_id"))) {
        return req.ok_serialized(&view);
    }
    let run = find_run(&req, req.param("run_id")).await?;
    let view = show_run(&state.db.conn, &run).await?;
    let view = Arc::new(serde_json::to_vec(&view).map_err(ApiError::internal)?);
    if let Some(generation) = generation {
        state.run_views.put(generation, run.id, view.clone());
    }
    req.ok_serialized(&view)
}

/// List a run's payouts (paginated JSON, or every payout as CSV).
#[utoipa::path(get, path = "/payroll-runs/{run_id}/payouts", operation_id = "getPayrollRunPayouts", tag = "payroll-runs",
    params(("run_id" = String, Path), ("status" = Option<PayoutStatus>, Query),
        ("format" = Option<String>, Query, description = "`csv` streams every payout as CSV (also with Accept: text/csv)"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Payouts of the run, newest first; or all of them as text/csv (a header row, then one row a payout)",
        content((Vec<PayoutResource> = "application/json"), (String = "text/csv")))))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn payouts(req: ApiRequest, http: HttpRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed("status", PayoutStatus::parse, &PayoutStatus::spellings());
    let format = query.parsed(
        "format",
        |s| PAYOUT_FORMATS.contains(&s).then(|| s.to_owned()),
        &PAYOUT_FORMATS.join(", "),
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
        return Ok(csv::csv_stream(req.state().db.clone(), run.id, status));
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
    let items: Vec<PayoutResource> = page
        .rows(db, select.order_by_desc(payout::Column::Id))
        .await?
        .iter()
        .map(PayoutResource::from)
        .collect();
    req.list(&items, page, total)
}

/// Checks the run exists (404 otherwise) before its actor is started for it.
async fn existing_run_id(req: &ApiRequest) -> Result<String, ApiError> {
    Ok(find_run(req, req.param("run_id")).await?.id)
}

/// Confirm a DRAFT run (DRAFT → CONFIRMED): amounts and wallets are locked.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/confirm", operation_id = "confirmPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, CONFIRMED: payees re-read, fees quoted, test-run deductions taken, amounts locked", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn confirm(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    commands::send(&req, &run_id, RunCommand::Confirm, StatusCode::OK).await
}

/// Check whether the exchange account covers a CONFIRMED run; if so it becomes DEPOSITED and its funds are reserved.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/balance-check", operation_id = "checkPayrollRunBalance", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "Whether the exchange account covers the run; a covered CONFIRMED run becomes DEPOSITED (funds reserved)", body = BalanceCheckResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn balance_check(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    commands::send(&req, &run_id, RunCommand::BalanceCheck, StatusCode::OK).await
}

/// Execute a DEPOSITED run (DEPOSITED → PAYING_OUT): withdrawals start and a job tracks them.
///
/// Moves money. A CONFIRMED run not yet covered answers 409 CEX_INSUFFICIENT_BALANCE.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/execute", operation_id = "executePayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, PAYING_OUT, with its job: withdrawals start, each payee is emailed", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn execute(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    if let Some(held) = crate::http::approvals::hold(&req, Some(&run_id)).await? {
        return Ok(held);
    }
    commands::send(&req, &run_id, RunCommand::Execute, StatusCode::OK).await
}

/// Reconcile a PAYING_OUT run with the exchange once and return it; in other statuses it just returns the run.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/sync", operation_id = "syncPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run after one reconciliation pass with the exchange (PAYING_OUT runs); poll until every payout is terminal", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn sync(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    commands::send(&req, &run_id, RunCommand::Sync, StatusCode::OK).await
}

/// Retry every FAILED payout of a FAILED run (FAILED → PAYING_OUT) with a new job.
///
/// Moves money, to each employee's current wallet.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/retry-failed", operation_id = "retryFailedPayouts", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, PAYING_OUT again with a new job: every FAILED payout is sent again to its employee's current wallet", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn retry_failed(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    if let Some(held) = crate::http::approvals::hold(&req, Some(&run_id)).await? {
        return Ok(held);
    }
    commands::send(&req, &run_id, RunCommand::RetryFailed, StatusCode::OK).await
}

/// Cancel a DRAFT, CONFIRMED or DEPOSITED run (→ CANCELLED): pending payouts are cancelled and holds released.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/cancel", operation_id = "cancelPayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<CancelRunRequest>),
    responses((status = 200, description = "The run, now CANCELLED; its pending payouts are CANCELLED and its reservation released", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn cancel(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let body: CancelRunRequest = req.json()?;
    let mut errors = Vec::new();
    create::check_len(&mut errors, "reason", body.reason.as_deref(), 1000);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let run_id = existing_run_id(&req).await?;
    let may_cancel_funded = auth::grants(&req.caller()?.scopes, Scope::PayrollExecute);
    let command = RunCommand::Cancel {
        reason: body.reason,
        may_cancel_funded,
    };
    commands::send(&req, &run_id, command, StatusCode::OK).await
}

/// Archive a COMPLETED, FAILED or CANCELLED run: it leaves default lists, its status stays.
#[utoipa::path(post, path = "/payroll-runs/{run_id}/archive", operation_id = "archivePayrollRun", tag = "payroll-runs",
    params(("run_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The run, archived (hidden from lists unless include_archived=true)", body = RunResource)))]
#[tracing::instrument(skip_all, fields(run_id = %req.param("run_id")))]
pub async fn archive(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let run_id = existing_run_id(&req).await?;
    commands::send(&req, &run_id, RunCommand::Archive, StatusCode::OK).await
}
