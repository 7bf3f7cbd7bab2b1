//! `/employees`: payees, their wallets and salaries; CSV or JSON bulk import.

use std::collections::{HashMap, HashSet};

use actix_web::{HttpResponse, http::StatusCode};
use chrono::{DateTime, NaiveDate, Utc};
use payroll_actors::views::Timestamp;
use payroll_entities::{EmployeeStatus, EmploymentType, Network, Stablecoin, employee, ids, time};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect,
    sea_query::{Expr, ExprTrait, LikeExpr, OnConflict},
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::{
    http::{
        audit::AuditRecord,
        body::{merge_errors, parse_collecting, parse_partial},
        dates::Day,
        error::{ApiError, ErrorCode, FieldError},
        request::{ApiRequest, BodyType},
        resource::find_resource,
    },
    routes::api_keys::EmptyRequest,
    wallet,
};

/// An employee as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EmployeeResource {
    pub id: String,
    pub name: String,
    pub email: String,
    pub status: EmployeeStatus,
    pub employment_type: EmploymentType,
    pub salary_usd_cents: i64,
    pub stablecoin: Stablecoin,
    pub network: Network,
    pub wallet_address: String,
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<NaiveDate>,
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<NaiveDate>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&employee::Model> for EmployeeResource {
    fn from(m: &employee::Model) -> EmployeeResource {
        EmployeeResource {
            id: m.id.clone(),
            name: m.name.clone(),
            email: m.email.clone(),
            status: m.status,
            employment_type: m.employment_type,
            salary_usd_cents: m.salary_usd_cents,
            stablecoin: m.stablecoin,
            network: m.network,
            wallet_address: m.wallet_address.clone(),
            contract_start_date: m.contract_start_date,
            contract_end_date: m.contract_end_date,
            created_at: m.created_at.into(),
            updated_at: m.updated_at.into(),
        }
    }
}

/// Deserializes a field that distinguishes "absent" (`None`) from `null` (`Some(None)`).
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// The fields of an employee a client sends: the body of create, and one row of an import.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmployeeInput {
    #[schema(value_type = String)]
    pub name: Option<String>,
    /// Unique, compared case-insensitively.
    #[schema(value_type = String)]
    pub email: Option<String>,
    /// ACTIVE (default) or INACTIVE.
    pub status: Option<EmployeeStatus>,
    /// FTE (default), CONTRACTOR or CONSULTANT.
    pub employment_type: Option<EmploymentType>,
    /// Paid per regular run, in USDC cents (≥ 0).
    #[schema(value_type = i64)]
    pub salary_usd_cents: Option<i64>,
    /// USDC, the default and only value.
    pub stablecoin: Option<Stablecoin>,
    #[schema(value_type = Network)]
    pub network: Option<Network>,
    /// EVM: 0x + 40 hex (EIP-55 checksum if mixed-case); SOLANA: base58 of 32 bytes.
    #[schema(value_type = String)]
    pub wallet_address: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<Option<Day>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<Option<Day>>,
}

/// The body of PATCH: any field but `id`, `email` and the timestamps.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmployeeUpdate {
    pub name: Option<String>,
    pub status: Option<EmployeeStatus>,
    pub employment_type: Option<EmploymentType>,
    pub salary_usd_cents: Option<i64>,
    pub stablecoin: Option<Stablecoin>,
    pub network: Option<Network>,
    pub wallet_address: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_start_date: Option<Option<Day>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = Date)]
    pub contract_end_date: Option<Option<Day>>,
}

/// The answer of an import.
#[derive(Debug, Serialize, ToSchema)]
pub struct ImportResult {
    pub created: u64,
    pub updated: u64,
    pub total: u64,
}

fn is_plausible_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.contains(char::is_whitespace)
        && !domain.contains('@')
        && email.len() <= 254
}

/// A complete, valid set of employee fields.
#[derive(Debug, Clone)]
struct ValidEmployee {
    name: String,
    email: String,
    status: EmployeeStatus,
    employment_type: EmploymentType,
    salary_usd_cents: i64,
    stablecoin: Stablecoin,
    network: Network,
    wallet_address: String,
    contract_start_date: Option<NaiveDate>,
    contract_end_date: Option<NaiveDate>,
}

/// Checks a full set of fields; `prefix` is `rows[3].` for an import row.
fn validate(
    input: &EmployeeInput,
    prefix: &str,
    errors: &mut Vec<FieldError>,
) -> Option<ValidEmployee> {
    let before = errors.len();
    let field = |name: &str| format!("{prefix}{name}");
    let name = input.name.as_deref().map(str::trim).unwrap_or_default();
    if name.is_empty() {
        errors.push(FieldError::new(
            field("name"),
            "required: the employee's name",
        ));
    } else if name.len() > 200 {
        errors.push(FieldError::new(field("name"), "at most 200 characters"));
    }
    let email = input.email.as_deref().map(str::trim).unwrap_or_default();
    if email.is_empty() {
        errors.push(FieldError::new(
            field("email"),
            "required: the employee's email address",
        ));
    } else if !is_plausible_email(email) {
        errors.push(FieldError::new(field("email"), "not an email address"));
    }
    match input.salary_usd_cents {
        None => errors.push(FieldError::new(
            field("salary_usd_cents"),
            "required: the salary per regular run in USDC cents (0 or more)",
        )),
        Some(s) if s < 0 => errors.push(FieldError::new(
            field("salary_usd_cents"),
            "must be 0 or more",
        )),
        Some(_) => {}
    }
    let wallet = input
        .wallet_address
        .as_deref()
        .map(str::trim)
        .unwrap_or_default();
    match (input.network, wallet.is_empty()) {
        (None, _) => errors.push(FieldError::new(
            field("network"),
            format!("required: one of {}", Network::spellings()),
        )),
        (Some(_), true) => errors.push(FieldError::new(field("wallet_address"), "required")),
        (Some(network), false) => {
            if let Err(why) = wallet::validate(network, wallet) {
                errors.push(FieldError::new(
                    field("wallet_address"),
                    format!("{why} (network {network})"),
                ));
            }
        }
    }
    let start = input.contract_start_date.flatten().map(|d| d.0);
    let end = input.contract_end_date.flatten().map(|d| d.0);
    if let (Some(s), Some(e)) = (start, end)
        && e < s
    {
        errors.push(FieldError::new(
            field("contract_end_date"),
            "must not be before contract_start_date",
        ));
    }
    if errors.len() > before {
        return None;
    }
    Some(ValidEmployee {
        name: name.to_owned(),
        email: email.to_owned(),
        status: input.status.unwrap_or(EmployeeStatus::Active),
        employment_type: input.employment_type.unwrap_or(EmploymentType::Fte),
        salary_usd_cents: input.salary_usd_cents.unwrap_or_default(),
        stablecoin: input.stablecoin.unwrap_or(Stablecoin::Usdc),
        network: input.network.unwrap_or(Network::Ethereum),
        wallet_address: wallet.to_owned(),
        contract_start_date: start,
        contract_end_date: end,
    })
}

fn new_model(valid: ValidEmployee, now: DateTime<Utc>) -> employee::Model {
    employee::Model {
        id: ids::new_id(ids::IdKind::Employee),
        email_lower: valid.email.to_lowercase(),
        name_lower: valid.name.to_lowercase(),
        name: valid.name,
        email: valid.email,
        status: valid.status,
        employment_type: valid.employment_type,
        salary_usd_cents: valid.salary_usd_cents,
        stablecoin: valid.stablecoin,
        network: valid.network,
        wallet_address: valid.wallet_address,
        contract_start_date: valid.contract_start_date,
        contract_end_date: valid.contract_end_date,
        test_deduction_balance_usd_cents: 0,
        created_at: now,
        updated_at: now,
    }
}

fn email_taken(existing_id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::EmployeeEmailTaken,
        "Another employee already has this email address.",
    )
    .detail("existing_employee_id", existing_id)
}

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

#[utoipa::path(get, path = "/employees", operation_id = "listEmployees", tag = "employees",
    params(
        ("status" = Option<EmployeeStatus>, Query), ("employment_type" = Option<EmploymentType>, Query),
        ("search" = Option<String>, Query, description = "Name or email substring, case-insensitive"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Employees, newest first", body = Vec<EmployeeResource>)))]
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
    let total = select.clone().count(db).await?;
    let items: Vec<EmployeeResource> = select
        .order_by_desc(employee::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?
        .iter()
        .map(EmployeeResource::from)
        .collect();
    req.list(&items, page, total)
}

fn escape_like(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

#[utoipa::path(post, path = "/employees", operation_id = "createEmployee", tag = "employees",
    request_body = EmployeeInput,
    responses((status = 201, description = "The new employee", body = EmployeeResource)))]
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

#[utoipa::path(get, path = "/employees/{employee_id}", operation_id = "getEmployee", tag = "employees",
    params(("employee_id" = String, Path)),
    responses((status = 200, description = "The employee", body = EmployeeResource)))]
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

#[utoipa::path(patch, path = "/employees/{employee_id}", operation_id = "updateEmployee", tag = "employees",
    params(("employee_id" = String, Path)), request_body = EmployeeUpdate,
    responses((status = 200, description = "The updated employee", body = EmployeeResource)))]
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
        return Err(ApiError::validation(errors));
    };
    let before = EmployeeResource::from(&current);
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
    active.updated_at = Set(time::now());
    let updated = active.update(&*tx).await?;
    let shown = EmployeeResource::from(&updated);
    let record = AuditRecord::new("EMPLOYEE_UPDATED", "employee", &updated.id)
        .details(changes(&before, &shown));
    req.commit::<_, EmployeeResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

#[utoipa::path(delete, path = "/employees/{employee_id}", operation_id = "deactivateEmployee", tag = "employees",
    params(("employee_id" = String, Path)),
    responses((status = 200, description = "The employee, now INACTIVE (employees are never deleted: runs refer to them)", body = EmployeeResource)))]
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

/// The import rows as JSON objects, from a JSON array or a CSV document with a header row.
fn import_rows(req: &ApiRequest) -> Result<Vec<Value>, ApiError> {
    match req.body_type {
        BodyType::Json => match req.json_value()? {
            Value::Array(rows) => Ok(rows),
            _ => Err(ApiError::validation(vec![FieldError::new(
                "",
                "the body must be a JSON array of employees (or CSV with Content-Type: text/csv)",
            )])),
        },
        BodyType::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .trim(csv::Trim::All)
                .from_reader(req.body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&req.body));
            let headers = reader
                .headers()
                .map_err(|e| {
                    ApiError::validation(vec![FieldError::new("", format!("CSV header row: {e}"))])
                })?
                .clone();
            let mut rows = Vec::new();
            for (i, record) in reader.records().enumerate() {
                let record = record.map_err(|e| {
                    ApiError::validation(vec![FieldError::new(
                        format!("rows[{i}]"),
                        format!("CSV: {e}"),
                    )])
                })?;
                let mut row = Map::new();
                for (header, value) in headers.iter().zip(record.iter()) {
                    if value.is_empty() {
                        continue;
                    }
                    let value = if header == "salary_usd_cents" {
                        value
                            .parse::<i64>()
                            .map(Value::from)
                            .unwrap_or_else(|_| Value::String(value.to_owned()))
                    } else {
                        Value::String(value.to_owned())
                    };
                    row.insert(header.to_owned(), value);
                }
                rows.push(Value::Object(row));
            }
            Ok(rows)
        }
    }
}

/// Optional fields a row may leave out; on update they keep their stored value.
const OPTIONAL_FIELDS: [(&str, employee::Column); 5] = [
    ("status", employee::Column::Status),
    ("employment_type", employee::Column::EmploymentType),
    ("stablecoin", employee::Column::Stablecoin),
    ("contract_start_date", employee::Column::ContractStartDate),
    ("contract_end_date", employee::Column::ContractEndDate),
];

#[utoipa::path(post, path = "/employees/import", operation_id = "importEmployees", tag = "employees",
    request_body(content = Vec<EmployeeInput>, description = "A JSON array of employees, or text/csv whose header row names the same fields. Every row is validated before anything is written; rows upsert by email.",
        content_type = "application/json"),
    responses((status = 200, description = "How many employees were created and updated", body = ImportResult)))]
pub async fn import(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let rows = import_rows(&req)?;
    let mut errors = Vec::new();
    let mut valid_rows = Vec::with_capacity(rows.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, row) in rows.into_iter().enumerate() {
        let prefix = format!("rows[{i}].");
        let present: u8 = OPTIONAL_FIELDS
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| row.get(*name).is_some())
            .fold(0, |mask, (bit, _)| mask | (1 << bit));
        if !row.is_object() {
            errors.push(FieldError::new(
                format!("rows[{i}]"),
                "each row must be a JSON object",
            ));
            continue;
        }
        let (input, type_errors) = parse_partial::<EmployeeInput>(row);
        let mut row_errors: Vec<FieldError> = type_errors
            .into_iter()
            .map(|e| FieldError::new(format!("{prefix}{}", e.field), e.message))
            .collect();
        let Some(input) = input else {
            errors.append(&mut row_errors);
            continue;
        };
        let mut checks = Vec::new();
        let valid = validate(&input, &prefix, &mut checks);
        merge_errors(&mut row_errors, checks);
        let had_errors = !row_errors.is_empty();
        errors.append(&mut row_errors);
        if let Some(valid) = valid.filter(|_| !had_errors) {
            let key = valid.email.to_lowercase();
            if let Some(first) = seen.insert(key, i) {
                errors.push(FieldError::new(
                    format!("{prefix}email"),
                    format!("the same email as rows[{first}]"),
                ));
            }
            valid_rows.push((valid, present));
        }
        if errors.len() >= 1000 {
            errors.push(FieldError::new(
                "",
                "too many errors; the first 1000 are listed",
            ));
            break;
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    if valid_rows.is_empty() {
        return Err(ApiError::validation(vec![FieldError::new(
            "",
            "the import holds no rows",
        )]));
    }

    let now = time::now();
    let tx = req.state().db.begin_write().await?;
    let existing: HashSet<String> = employee::Entity::find()
        .select_only()
        .column(employee::Column::EmailLower)
        .into_tuple::<String>()
        .all(&*tx)
        .await?
        .into_iter()
        .collect();
    let total = valid_rows.len() as u64;
    let updated = valid_rows
        .iter()
        .filter(|(v, _)| existing.contains(&v.email.to_lowercase()))
        .count() as u64;
    // Grouped by which optional fields the rows name; converted to SQL a chunk at a time.
    let mut groups: HashMap<u8, Vec<employee::Model>> = HashMap::new();
    let mut first_ids = Vec::new();
    for (valid, present) in valid_rows {
        let model = new_model(valid, now);
        if first_ids.len() < 20 {
            first_ids.push(model.email.clone());
        }
        groups.entry(present).or_default().push(model);
    }
    for (present, models) in groups {
        let mut update_columns = vec![
            employee::Column::Name,
            employee::Column::NameLower,
            employee::Column::Email,
            employee::Column::SalaryUsdCents,
            employee::Column::Network,
            employee::Column::WalletAddress,
            employee::Column::UpdatedAt,
        ];
        for (bit, (_, column)) in OPTIONAL_FIELDS.iter().enumerate() {
            if present & (1 << bit) != 0 {
                update_columns.push(*column);
            }
        }
        let on_conflict = OnConflict::column(employee::Column::EmailLower)
            .update_columns(update_columns)
            .to_owned();
        let mut models = models.into_iter().peekable();
        while models.peek().is_some() {
            let chunk: Vec<employee::ActiveModel> = models
                .by_ref()
                .take(1000)
                .map(IntoActiveModel::into_active_model)
                .collect();
            employee::Entity::insert_many(chunk)
                .on_conflict(on_conflict.clone())
                .exec_without_returning(&*tx)
                .await?;
        }
    }
    let first_ids: Vec<String> = employee::Entity::find()
        .select_only()
        .column(employee::Column::Id)
        .filter(employee::Column::EmailLower.is_in(first_ids.iter().map(|e| e.to_lowercase())))
        .into_tuple()
        .all(&*tx)
        .await?;
    let result = ImportResult {
        created: total - updated,
        updated,
        total,
    };
    let record = AuditRecord::new("EMPLOYEES_IMPORTED", "employee", "*").details(json!({
        "created": result.created,
        "updated": result.updated,
        "total": result.total,
        "first_employee_ids": first_ids,
    }));
    req.commit::<_, ImportResult>(tx, StatusCode::OK, &result, None, record)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_checked_loosely() {
        assert!(is_plausible_email("ada@example.com"));
        assert!(!is_plausible_email("ada@example"));
        assert!(!is_plausible_email("ada example@x.com"));
        assert!(!is_plausible_email("@x.com"));
    }

    #[test]
    fn validation_lists_every_missing_field() {
        let mut errors = Vec::new();
        assert!(validate(&EmployeeInput::default(), "rows[2].", &mut errors).is_none());
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rows[2].name",
                "rows[2].email",
                "rows[2].salary_usd_cents",
                "rows[2].network"
            ]
        );
    }
}
