//! `POST /employees/import`: CSV or JSON rows, every row validated before anything is written,
//! upserted by email.

use std::collections::HashMap;

use actix_web::{HttpResponse, http::StatusCode};
use payroll_entities::{Network, employee, time};
use sea_orm::{
    ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, QuerySelect, sea_query::OnConflict,
};
use serde::{
    Deserialize,
    de::{DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor},
};
use serde_json::{Map, Value, json};

use super::input::*;
use crate::http::{
    audit::AuditRecord,
    body::{merge_errors, parse_partial},
    error::{ApiError, ErrorCode, FieldError},
    request::{ApiRequest, BodyType, malformed_json},
};

/// The rows of an import as they are read, one at a time: each is validated and kept only in
/// its checked form (never the whole document as JSON values), so an import holds its body and
/// its employees, nothing more. All or nothing still holds: every row is checked before any is
/// written.
struct Rows {
    cap: usize,
    count: usize,
    valid: Vec<(ValidEmployee, u8)>,
    errors: Vec<FieldError>,
    /// Rows by lower-cased email, to name a duplicate's first row.
    seen: HashMap<String, usize>,
    /// More than `cap` rows: the rest is not read.
    too_many: bool,
}

/// At most this many errors are listed; the rows after them are not checked.
const MAX_ERRORS: usize = 1000;

impl Rows {
    fn new(cap: usize) -> Rows {
        Rows {
            cap,
            count: 0,
            valid: Vec::new(),
            errors: Vec::new(),
            seen: HashMap::new(),
            too_many: false,
        }
    }

    /// Whether the next row is still checked: the error list is not full. Rows past it are
    /// only counted, so that an import over the row limit is refused as such (413 before 400).
    fn checks_more(&self) -> bool {
        self.errors.len() < MAX_ERRORS
    }

    /// Counts the next row; `false` (and `too_many`) when it is one over the cap.
    fn count_one(&mut self) -> bool {
        if self.count == self.cap {
            self.too_many = true;
            return false;
        }
        self.count += 1;
        true
    }

    /// Takes the next row: counted, then checked; `false` once no more rows are to be read.
    fn take(&mut self, row: Value) -> bool {
        let i = self.count;
        if !self.count_one() {
            return false;
        }
        self.check(i, row);
        if !self.checks_more() {
            self.errors.push(FieldError::new(
                "",
                "too many errors; the first 1000 are listed",
            ));
        }
        true
    }

    fn check(&mut self, i: usize, row: Value) {
        let prefix = format!("rows[{i}].");
        if !row.is_object() {
            self.errors.push(FieldError::new(
                format!("rows[{i}]"),
                "each row must be a JSON object",
            ));
            return;
        }
        let present: u8 = OPTIONAL_FIELDS
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| row.get(*name).is_some())
            .fold(0, |mask, (bit, _)| mask | (1 << bit));
        let (input, type_errors) = parse_partial::<EmployeeInput>(row);
        let mut row_errors: Vec<FieldError> = type_errors
            .into_iter()
            .map(|e| FieldError::new(format!("{prefix}{}", e.field), e.message))
            .collect();
        let Some(input) = input else {
            self.errors.append(&mut row_errors);
            return;
        };
        let mut checks = Vec::new();
        let valid = validate(&input, &prefix, &mut checks);
        merge_errors(&mut row_errors, checks);
        let had_errors = !row_errors.is_empty();
        self.errors.append(&mut row_errors);
        if let Some(valid) = valid.filter(|_| !had_errors) {
            if let Some(first) = self.seen.insert(valid.email.to_lowercase(), i) {
                self.errors.push(FieldError::new(
                    format!("{prefix}email"),
                    format!("the same email as rows[{first}]"),
                ));
            }
            self.valid.push((valid, present));
        }
    }
}

/// Reads the import's rows (a JSON array, or CSV with a header row) one at a time into
/// `Rows`; more than `api.max_import_rows` rows is refused without reading the rest.
fn read_rows(req: &ApiRequest) -> Result<Rows, ApiError> {
    let cap = req.state().settings.api.max_import_rows;
    let mut rows = Rows::new(cap);
    match req.body_type {
        BodyType::Json => {
            let starts_as_array = req
                .body
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_some_and(|b| *b == b'[');
            if !starts_as_array {
                // Not an array: its syntax is checked (and any fault named) without building
                // it in memory.
                if !req.body.iter().all(u8::is_ascii_whitespace) {
                    let mut deserializer = serde_json::Deserializer::from_slice(&req.body);
                    IgnoredAny::deserialize(&mut deserializer)
                        .and_then(|_| deserializer.end())
                        .map_err(malformed_json)?;
                }
                return Err(ApiError::validation(vec![FieldError::new(
                    "",
                    "the body must be a JSON array of employees (or CSV with Content-Type: text/csv)",
                )]));
            }
            let mut deserializer = serde_json::Deserializer::from_slice(&req.body);
            EachRow(&mut rows)
                .deserialize(&mut deserializer)
                .and_then(|()| deserializer.end())
                .map_err(malformed_json)?;
        }
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
            let mut record = csv::StringRecord::new();
            loop {
                let i = rows.count;
                match reader.read_record(&mut record) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        return Err(ApiError::validation(vec![FieldError::new(
                            format!("rows[{i}]"),
                            format!("CSV: {e}"),
                        )]));
                    }
                }
                if !rows.checks_more() {
                    if !rows.count_one() {
                        break;
                    }
                    continue;
                }
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
                if !rows.take(Value::Object(row)) {
                    break;
                }
            }
        }
    }
    if rows.too_many {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "The import holds more than {cap} rows; split it into imports of at most {cap} rows."
            ),
        )
        .detail("limit_rows", cap as u64)
        .detail("limit_bytes", req.state().settings.api.max_import_bytes as u64));
    }
    Ok(rows)
}

/// Reads a JSON array an element at a time into [`Rows`]; rows past a full error list are
/// counted unread into memory, and past the cap the rest is skipped (its syntax still checked).
struct EachRow<'a>(&'a mut Rows);

impl<'de> DeserializeSeed<'de> for EachRow<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EachRow<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of employees")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let rows = self.0;
        loop {
            let more = if rows.checks_more() {
                match seq.next_element::<Value>()? {
                    Some(row) => rows.take(row),
                    None => return Ok(()),
                }
            } else {
                match seq.next_element::<IgnoredAny>()? {
                    Some(_) => rows.count_one(),
                    None => return Ok(()),
                }
            };
            if !more {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(());
            }
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

/// Emails looked up per query when an import checks who exists already (within the bind
/// limits of both databases).
const EXISTING_CHUNK: usize = 1000;

/// Import employees from a JSON array or CSV, all or nothing, upserting by email.
#[utoipa::path(post, path = "/employees/import", operation_id = "importEmployees", tag = "employees",
    request_body(content = Vec<EmployeeInput>, description = "A JSON array of employees, or text/csv whose header row names the same fields. Every row is validated before anything is written; rows upsert by email.",
        content_type = "application/json"),
    responses((status = 200, description = "How many employees were created and updated", body = ImportResult)))]
#[tracing::instrument(skip_all)]
pub async fn import(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let Rows {
        valid: valid_rows,
        errors,
        ..
    } = read_rows(&req)?;
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
    // No employee is created or changed by another writer while the import reads who exists
    // and writes (PostgreSQL; SQLite has one writer): every wallet it changes is seen changing.
    if sea_orm::ConnectionTrait::get_database_backend(&*tx) == sea_orm::DatabaseBackend::Postgres {
        sea_orm::ConnectionTrait::execute_unprepared(
            &*tx,
            "LOCK TABLE employees IN SHARE ROW EXCLUSIVE MODE",
        )
        .await?;
    }
    // Each employee of the import already there, with the wallet it has: an import that
    // changes one leaves an entry of its own with both addresses (`wallet_changes`). Looked up
    // by the import's own emails, a chunk at a time, so memory follows the import, not the
    // number of employees.
    let total = valid_rows.len() as u64;
    let mut updated = 0u64;
    let mut wallet_changes = Vec::new();
    for chunk in valid_rows.chunks(EXISTING_CHUNK) {
        let emails: Vec<String> = chunk
            .iter()
            .map(|(valid, _)| valid.email.to_lowercase())
            .collect();
        let existing: HashMap<String, (String, Network, String)> = employee::Entity::find()
            .select_only()
            .column(employee::Column::EmailLower)
            .column(employee::Column::Id)
            .column(employee::Column::Network)
            .column(employee::Column::WalletAddress)
            .filter(employee::Column::EmailLower.is_in(emails.iter().cloned()))
            .into_tuple::<(String, String, Network, String)>()
            .all(&*tx)
            .await?
            .into_iter()
            .map(|(email, id, network, wallet)| (email, (id, network, wallet)))
            .collect();
        for ((valid, _), email) in chunk.iter().zip(&emails) {
            if let Some((id, network, wallet)) = existing.get(email) {
                updated += 1;
                wallet_changes.extend(super::wallet_changes::WalletChange::of(
                    id,
                    (*network, wallet),
                    (valid.network, &valid.wallet_address),
                ));
            }
        }
    }
    // Grouped by which optional fields the rows name; made into models and SQL a chunk at a
    // time, each chunk's memory given back once it is written.
    let first_ids: Vec<String> = valid_rows
        .iter()
        .take(20)
        .map(|(valid, _)| valid.email.to_lowercase())
        .collect();
    let mut groups: HashMap<u8, Vec<ValidEmployee>> = HashMap::new();
    for (valid, present) in valid_rows {
        groups.entry(present).or_default().push(valid);
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
                .map(|valid| new_model(valid, now).into_active_model())
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
        .filter(employee::Column::EmailLower.is_in(first_ids))
        .into_tuple()
        .all(&*tx)
        .await?;
    let result = ImportResult {
        created: total - updated,
        updated,
        total,
    };
    super::wallet_changes::record(&req, &tx, &wallet_changes, "importEmployees").await?;
    let record = AuditRecord::new("EMPLOYEES_IMPORTED", "employee", "*").details(json!({
        "created": result.created,
        "updated": result.updated,
        "total": result.total,
        "wallets_changed": wallet_changes.len(),
        "first_employee_ids": first_ids,
    }));
    let db = req.state().db.clone();
    let response = req
        .commit::<_, ImportResult>(tx, StatusCode::OK, &result, None, record)
        .await?;
    // A run over everybody walks the employees in pages, by id: with statistics that still
    // take them for a few rows, PostgreSQL read all of them for each page.
    db.analyze_after("employees", result.total).await;
    Ok(response)
}
