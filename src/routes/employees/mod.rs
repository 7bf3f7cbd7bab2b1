//! `/employees`: payees, their wallets and salaries; CSV or JSON bulk import.

pub mod bulk_import;
pub mod input;
pub mod wallet_changes;

use actix_web::{HttpResponse, http::StatusCode};
use payroll_entities::{EmployeeStatus, EmploymentType, Network, employee, ids, time};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder,
    sea_query::{Expr, ExprTrait, LikeExpr},
};
use serde_json::{Map, Value, json};

use crate::http::query::fetch_page;
use crate::{
    http::{
        audit::AuditRecord,
        body::{merge_errors, parse_collecting},
        dates::Day,
        error::{ApiError, FieldError},
        request::ApiRequest,
        resource::find_resource,
    },
    routes::api_keys::EmptyRequest,
};

use input::*;

/// The employee, read inside the write transaction `tx` (row-locked), so concurrent updates
/// never overwrite each other.
async fn find_employee_for_update(
    tx: &payroll_entities::db::WriteTx,
    id: &str,
) -> Result<employee::Model, ApiError> {
    find_resource::<employee::Entity, _>(&**tx, ids::IdKind::Employee, "employee", id, true).await
}

pub async fn find_employee(req: &ApiRequest, id: &str) -> Result<employee::Model, ApiError> {
    find_resource::<employee::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::Employee,
        "employee",
        id,
        false,
    )
    .await
}

/// List employees, newest first, filtered by status, employment type or a name/email search.
#[utoipa::path(get, path = "/employees", operation_id = "listEmployees", tag = "employees",
    params(
        ("status" = Option<EmployeeStatus>, Query), ("employment_type" = Option<EmploymentType>, Query),
        ("search" = Option<String>, Query, description = "Name or email substring, case-insensitive"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Employees, newest first", body = Vec<EmployeeResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.parsed(
        "status",
        EmployeeStatus::parse,
        &EmployeeStatus::spellings(),
    );
    let employment = query.parsed(
        "employment_type",
        EmploymentType::parse,
        &EmploymentType::spellings(),
    );
    let search = query.str("search").filter(|s| !s.trim().is_empty());
    let page = query.page();
    query.finish(&["status", "employment_type", "search", "limit", "offset"])?;

    let mut select = employee::Entity::find();
    if let Some(status) = status {
        select = select.filter(employee::Column::Status.eq(status));
    }
    if let Some(kind) = employment {
        select = select.filter(employee::Column::EmploymentType.eq(kind));
    }
    if let Some(search) = search {
        // `\` escapes LIKE's wildcards, so `%` and `_` in the search match themselves.
        let pattern = || {
            LikeExpr::new(format!("%{}%", escape_like(&search.trim().to_lowercase()))).escape('\\')
        };
        select = select.filter(
            Condition::any()
                .add(Expr::col(employee::Column::NameLower).like(pattern()))
                .add(Expr::col(employee::Column::EmailLower).like(pattern())),
        );
    }
    let db = &req.state().db.conn;
    let (rows, total) = fetch_page(db, select.order_by_desc(employee::Column::Id), page).await?;
    let items: Vec<EmployeeResource> = rows.iter().map(EmployeeResource::from).collect();
    req.list(&items, page, total)
}

fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// Create an employee (a payee) with a salary per regular run and a wallet on one network.
#[utoipa::path(post, path = "/employees", operation_id = "createEmployee", tag = "employees",
    request_body = EmployeeInput,
    responses((status = 201, description = "The new employee", body = EmployeeResource)))]
#[tracing::instrument(skip_all)]
pub async fn create(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let (input, mut errors) = req.json_partial::<EmployeeInput>()?;
    let mut checks = Vec::new();
    let valid = validate(&input, "", &mut checks);
    merge_errors(&mut errors, checks);
    let Some(valid) = valid.filter(|_| errors.is_empty()) else {
        return Err(ApiError::validation(errors));
    };
    let model = new_model(valid, time::now());
    let tx = req.state().db.begin_write().await?;
    if let Some(existing) = employee::Entity::find()
        .filter(employee::Column::EmailLower.eq(model.email_lower.as_str()))
        .one(&*tx)
        .await?
    {
        return Err(email_taken(&existing.id));
    }
    let inserted = employee::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await;
    if let Err(err) = inserted {
        // Another request created the same email between the check and the insert.
        if matches!(
            err.sql_err(),
            Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
        ) {
            drop(tx);
            let existing = employee::Entity::find()
                .filter(employee::Column::EmailLower.eq(model.email_lower.as_str()))
                .one(&req.state().db.conn)
                .await?;
            return Err(email_taken(existing.as_ref().map_or("", |e| e.id.as_str())));
        }
        return Err(err.into());
    }
    let shown = EmployeeResource::from(&model);
    let record = AuditRecord::new("EMPLOYEE_CREATED", "employee", &model.id)
        .details(json!({"after": shown}));
    req.commit::<_, EmployeeResource>(tx, StatusCode::CREATED, &shown, None, record)
        .await
}

/// Get one employee.
#[utoipa::path(get, path = "/employees/{employee_id}", operation_id = "getEmployee", tag = "employees",
    params(("employee_id" = String, Path)),
    responses((status = 200, description = "The employee", body = EmployeeResource)))]
#[tracing::instrument(skip_all, fields(employee_id = %req.param("employee_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let found = find_employee(&req, req.param("employee_id")).await?;
    req.ok(&EmployeeResource::from(&found))
}

/// The fields that differ between two shown employees, as `{field: {before, after}}`.
fn changes(before: &EmployeeResource, after: &EmployeeResource) -> Value {
    let (Ok(Value::Object(b)), Ok(Value::Object(a))) =
        (serde_json::to_value(before), serde_json::to_value(after))
    else {
        return json!({});
    };
    let mut out = Map::new();
    for (key, new) in a {
        if key == "updated_at" {
            continue;
        }
        let old = b.get(&key).cloned().unwrap_or(Value::Null);
        if old != new {
            out.insert(key, json!({"before": old, "after": new}));
        }
    }
    Value::Object(out)
}

/// A patch refused: 400 if the patch is wrong in itself, 409 `STATE_CONFLICT` if it only
/// clashes with what is stored (a wallet of another network's shape than the stored network, a
/// contract end before the stored start): the document can say neither.
fn refusal_of_patch(patch: &EmployeeUpdate, errors: Vec<FieldError>) -> ApiError {
    let stored = |e: &FieldError| match e.field.as_str() {
        // A wallet alone conflicts with the stored network only if it is a wallet at all (of
        // some network's form); a new network alone conflicts with the stored wallet.
        "wallet_address" => match (&patch.network, &patch.wallet_address) {
            (None, Some(wallet)) => Network::ALL
                .iter()
                .any(|n| crate::wallet::validate(*n, wallet.trim()).is_ok()),
            (Some(_), None) => true,
            _ => false,
        },
        "contract_end_date" => {
            patch.contract_start_date.is_none() || patch.contract_end_date.is_none()
        }
        _ => false,
    };
    if errors.iter().all(stored) {
        ApiError::state_conflict(errors)
    } else {
        ApiError::validation(errors)
    }
}

/// Update an employee: any field but id, email and timestamps.
///
/// A changed wallet is what later payouts and retries pay.
#[utoipa::path(patch, path = "/employees/{employee_id}", operation_id = "updateEmployee", tag = "employees",
    params(("employee_id" = String, Path)), request_body = EmployeeUpdate,
    responses((status = 200, description = "The updated employee", body = EmployeeResource)))]
#[tracing::instrument(skip_all, fields(employee_id = %req.param("employee_id")))]
pub async fn update(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut raw = req.json_value()?;
    // Refuse read-only fields with a clear word rather than as unknown fields.
    let mut fixed = Vec::new();
    if let Some(map) = raw.as_object_mut() {
        for field in ["id", "email", "created_at", "updated_at"] {
            if map.remove(field).is_some() {
                fixed.push(FieldError::new(
                    field,
                    if field == "email" {
                        "cannot be changed: create a new employee for a new email address"
                    } else {
                        "read-only"
                    },
                ));
            }
        }
    }
    let patch: Result<EmployeeUpdate, Vec<FieldError>> = if raw.is_object() {
        parse_collecting(raw)
    } else {
        Err(vec![FieldError::new("", "the body must be a JSON object")])
    };
    let patch = match patch {
        Ok(p) if fixed.is_empty() => p,
        Ok(_) => return Err(ApiError::validation(fixed)),
        Err(mut errs) => {
            fixed.append(&mut errs);
            return Err(ApiError::validation(fixed));
        }
    };
    let tx = req.state().db.begin_write().await?;
    let current = find_employee_for_update(&tx, req.param("employee_id")).await?;
    let merged = EmployeeInput {
        name: Some(patch.name.clone().unwrap_or_else(|| current.name.clone())),
        email: Some(current.email.clone()),
        status: Some(patch.status.unwrap_or(current.status)),
        employment_type: Some(patch.employment_type.unwrap_or(current.employment_type)),
        salary_usd_cents: Some(patch.salary_usd_cents.unwrap_or(current.salary_usd_cents)),
        stablecoin: Some(patch.stablecoin.unwrap_or(current.stablecoin)),
        network: Some(patch.network.unwrap_or(current.network)),
        wallet_address: Some(
            patch
                .wallet_address
                .clone()
                .unwrap_or_else(|| current.wallet_address.clone()),
        ),
        contract_start_date: Some(
            patch
                .contract_start_date
                .unwrap_or(current.contract_start_date.map(Day)),
        ),
        contract_end_date: Some(
            patch
                .contract_end_date
                .unwrap_or(current.contract_end_date.map(Day)),
        ),
    };
    let mut errors = Vec::new();
    let Some(valid) = validate(&merged, "", &mut errors) else {
        return Err(refusal_of_patch(&patch, errors));
    };
    let before = EmployeeResource::from(&current);
    let wallet_change = wallet_changes::WalletChange::of(
        &current.id,
        (current.network, &current.wallet_address),
        (valid.network, &valid.wallet_address),
    );
    let mut active = current.into_active_model();
    active.name_lower = Set(valid.name.to_lowercase());
    active.name = Set(valid.name);
    active.status = Set(valid.status);
    active.employment_type = Set(valid.employment_type);
    active.salary_usd_cents = Set(valid.salary_usd_cents);
    active.stablecoin = Set(valid.stablecoin);
    active.network = Set(valid.network);
    active.wallet_address = Set(valid.wallet_address);
    active.contract_start_date = Set(valid.contract_start_date);
    active.contract_end_date = Set(valid.contract_end_date);
    let now = time::now();
    active.updated_at = Set(now);
    if wallet_change.is_some() {
        active.wallet_changed_at = Set(Some(now));
        active.wallet_hold_until = Set(wallet_changes::hold_until(&req, now));
        active.wallet_changed_by_lineage_id =
            Set(req.caller.as_ref().map(|c| c.key_lineage_id.clone()));
    }
    let updated = active.update(&*tx).await?;
    wallet_changes::record(&req, &tx, wallet_change.as_slice(), "updateEmployee").await?;
    let shown = EmployeeResource::from(&updated);
    let record = AuditRecord::new("EMPLOYEE_UPDATED", "employee", &updated.id)
        .details(changes(&before, &shown));
    req.commit::<_, EmployeeResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

/// Deactivate an employee: INACTIVE employees are left out of new runs.
///
/// The employee and their past payouts are kept.
#[utoipa::path(delete, path = "/employees/{employee_id}", operation_id = "deactivateEmployee", tag = "employees",
    params(("employee_id" = String, Path)),
    responses((status = 200, description = "The employee, now INACTIVE (employees are never deleted: runs refer to them)", body = EmployeeResource)))]
#[tracing::instrument(skip_all, fields(employee_id = %req.param("employee_id")))]
pub async fn deactivate(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let tx = req.state().db.begin_write().await?;
    let current = find_employee_for_update(&tx, req.param("employee_id")).await?;
    let before = EmployeeResource::from(&current);
    let updated = if current.status == EmployeeStatus::Inactive {
        current
    } else {
        let mut active = current.into_active_model();
        active.status = Set(EmployeeStatus::Inactive);
        active.updated_at = Set(time::now());
        active.update(&*tx).await?
    };
    let shown = EmployeeResource::from(&updated);
    let record = AuditRecord::new("EMPLOYEE_DEACTIVATED", "employee", &updated.id)
        .details(changes(&before, &shown));
    req.commit::<_, EmployeeResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

/// Lift an employee's wallet-change hold early: their payouts to the new wallet may be
/// confirmed at once.
///
/// Needs another key lineage than the one that changed the wallet (never an agent session):
/// the second person checks the change with the employee first.
#[utoipa::path(post, path = "/employees/{employee_id}/wallet-approvals", operation_id = "approveEmployeeWallet", tag = "employees",
    params(("employee_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The employee, its wallet hold lifted (`wallet_hold_until` null); an employee with no hold answers 409 STATE_CONFLICT", body = EmployeeResource)))]
#[tracing::instrument(skip_all, fields(employee_id = %req.param("employee_id")))]
pub async fn approve_wallet(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let caller = req.caller()?.clone();
    let tx = req.state().db.begin_write().await?;
    let current = find_employee_for_update(&tx, req.param("employee_id")).await?;
    let now = time::now();
    let Some(until) = current.wallet_hold_until.filter(|until| *until > now) else {
        return Err(ApiError::state_conflict(vec![FieldError::new(
            "wallet_hold_until",
            "this employee's wallet is not held: there is nothing to lift",
        )]));
    };
    if caller.session_id.is_some()
        || current.wallet_changed_by_lineage_id.as_deref() == Some(caller.key_lineage_id.as_str())
    {
        return Err(ApiError::new(
            crate::http::error::ErrorCode::ApprovalSelf,
            "A wallet change cannot be approved by the key lineage that made it, or by an agent session.",
        )
        .detail(
            "requested_by",
            serde_json::json!({"key_lineage_id": current.wallet_changed_by_lineage_id}),
        )
        .hint("Ask another person, with their own key holding payroll:approve, to check the change with the employee and lift the hold."));
    }
    let mut active = current.clone().into_active_model();
    active.wallet_hold_until = Set(None);
    active.updated_at = Set(now);
    let updated = active.update(&*tx).await?;
    let shown = EmployeeResource::from(&updated);
    let record = AuditRecord::new("EMPLOYEE_WALLET_HOLD_LIFTED", "employee", &updated.id).details(
        serde_json::json!({
            "network": updated.network,
            "wallet_address": updated.wallet_address,
            "held_until": time::format(&until),
        }),
    );
    req.commit::<_, EmployeeResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}
