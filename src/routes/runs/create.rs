//! The body of `POST /payroll-runs`, checked by its shape: every invalid field is listed at
//! once. The payees are checked against the employees by the `RunManager`, which creates the
//! run.

use std::collections::HashSet;

use actix_web::http::StatusCode;
use payroll_actors::run::messages::{CreateRun, Payee, Payees};
use payroll_entities::{MAX_MONEY_CENTS, RunType};
use serde::Deserialize;
use utoipa::ToSchema;

use super::commands;
use crate::http::{
    body::{merge_errors, money_over_limit, parse_partial},
    dates::{DateInput, DayEdge},
    error::{ApiError, FieldError},
    request::ApiRequest,
};

/// One payee of an `ad_hoc` or `reimbursement` run.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunItem {
    #[schema(value_type = String)]
    pub employee_id: Option<String>,
    /// At least 1 cent, at most 100,000,000,000 cents.
    #[schema(value_type = i64, minimum = 1, maximum = 100_000_000_000_i64)]
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

/// Most characters in a run's label, its note and an item's note.
pub const LABEL_MAX: usize = 200;
pub const NOTE_MAX: usize = 2000;
pub const ITEM_NOTE_MAX: usize = 500;

pub use crate::http::body::check_text as check_len;

/// The creation a request asks for, with what it commits; or every invalid field.
pub fn create_run(req: &ApiRequest) -> Result<CreateRun, ApiError> {
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
    check_len(&mut errors, "label", body.label.as_deref(), LABEL_MAX);
    check_len(&mut errors, "note", body.note.as_deref(), NOTE_MAX);
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
    let mut twice = Vec::new();
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
                parse_partial::<RunItem>(raw.clone())
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
                // A payee twice: the document cannot say "one item per employee" (409).
                Some(id) if !seen.insert(id.clone()) => twice.push(FieldError::new(
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
                Some(a) if a > MAX_MONEY_CENTS => {
                    errors.push(money_over_limit(format!("{field}.amount_usd_cents")))
                }
                Some(_) => {}
            }
            check_len(
                &mut errors,
                &format!("{field}.note"),
                item.note.as_deref(),
                ITEM_NOTE_MAX,
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
        // Every reason at once: the payees twice too.
        merge_errors(&mut errors, twice);
        return Err(ApiError::validation(errors));
    }
    if !twice.is_empty() {
        return Err(ApiError::state_conflict(twice));
    }

    let payees = if run_type == RunType::Regular && body.employee_ids.is_none() {
        Payees::Eligible
    } else {
        Payees::Listed(
            wanted
                .into_iter()
                .map(|(field, employee_id, amount_usd_cents, note)| Payee {
                    field,
                    employee_id,
                    amount_usd_cents,
                    note,
                })
                .collect(),
        )
    };
    Ok(CreateRun {
        run_type,
        is_test_run,
        period_start: start,
        period_end: end,
        pay_date: body.pay_date.map(|d| d.resolve(DayEdge::Start)),
        label: body
            .label
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty()),
        note: body.note,
        payees,
        created_by_key_id: req.caller.as_ref().map(|c| c.key_id.clone()),
        ack: commands::acknowledgement(req, StatusCode::CREATED),
    })
}
