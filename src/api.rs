//! What every handler shares: the success envelope, the request context the gate hands over,
//! JSON body parsing that lists every invalid field, query parsing and pagination.

use std::{collections::HashMap, rc::Rc};

use actix_web::{
    FromRequest, HttpMessage, HttpRequest, HttpResponse, dev::Payload, http::StatusCode, web,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::{
    error::{ApiError, FieldError},
    routes::RouteSpec,
};

/// The API version every response names (CONTRACT §1).
pub use payroll_actors::views::API_VERSION;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    /// Idempotency keys are scoped to this: a rotated key shares its predecessor's space.
    pub lineage_id: String,
    pub scopes: Vec<String>,
}

/// The claim this request holds on its Idempotency-Key while it runs.
#[derive(Debug, Clone)]
pub struct IdempotencyClaim {
    pub lineage_id: String,
    pub key: String,
    pub fingerprint: String,
    /// Set when the claim is taken; it identifies this claim, so a request whose claim was
    /// taken over (it ran past the lock timeout) can neither complete nor release it.
    pub locked_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl IdempotencyClaim {
    pub fn target(&self) -> payroll_actors::acknowledgement::IdempotencyTarget {
        payroll_actors::acknowledgement::IdempotencyTarget {
            lineage_id: self.lineage_id.clone(),
            key: self.key.clone(),
            locked_until: self.locked_until,
        }
    }
}

/// The media type of a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    Json,
    Csv,
}

/// Everything the request gate learned about an admitted request.
#[derive(Debug)]
pub struct RequestInfo {
    pub request_id: String,
    pub route: &'static RouteSpec,
    pub params: Vec<(&'static str, String)>,
    pub caller: Option<Caller>,
    pub claim: Option<IdempotencyClaim>,
    pub body: web::Bytes,
    pub body_type: BodyType,
    pub query: String,
    /// The full request path, as audited.
    pub path: String,
    pub state: web::Data<crate::state::AppState>,
}

/// The request context handlers take as an argument.
#[derive(Debug, Clone)]
pub struct ApiRequest(pub Rc<RequestInfo>);

impl std::ops::Deref for ApiRequest {
    type Target = RequestInfo;

    fn deref(&self) -> &RequestInfo {
        &self.0
    }
}

impl FromRequest for ApiRequest {
    type Error = ApiError;
    type Future = std::future::Ready<Result<ApiRequest, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(
            req.extensions()
                .get::<ApiRequest>()
                .cloned()
                .ok_or_else(|| ApiError::internal("handler reached without the request gate")),
        )
    }
}

/// Marks a response whose audit entry was committed with its write, so the gate does not
/// record a second one.
#[derive(Debug, Clone, Copy)]
pub struct AuditRecorded;

/// `{"total", "limit", "offset", "has_more"}` of a list answer.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Pagination {
    pub total: u64,
    pub limit: u64,
    pub offset: u64,
    pub has_more: bool,
}

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    data: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    pagination: Option<Pagination>,
    api_version: &'static str,
    request_id: &'a str,
}

/// The resource `id` of entity `E`, or 404 naming `resource_type`. An id of another kind or
/// form never reaches the database. `for_update` row-locks it on PostgreSQL (SQLite writers
/// are serialised already), for reads inside a write transaction.
pub async fn find_resource<E, C>(
    conn: &C,
    kind: payroll_entities::ids::IdKind,
    resource_type: &str,
    id: &str,
    for_update: bool,
) -> Result<E::Model, ApiError>
where
    E: sea_orm::EntityTrait,
    C: sea_orm::ConnectionTrait,
    String: Into<<E::PrimaryKey as sea_orm::PrimaryKeyTrait>::ValueType>,
{
    use sea_orm::QuerySelect;
    let not_found = || ApiError::not_found(resource_type, id);
    if !payroll_entities::ids::is_well_formed(kind, id) {
        return Err(not_found());
    }
    let mut select = E::find_by_id(id.to_owned());
    if for_update && conn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        select = select.lock_exclusive();
    }
    select.one(conn).await?.ok_or_else(not_found)
}

/// `{"data", "pagination"?, "api_version", "request_id"}` as bytes.
pub fn envelope_bytes<T: Serialize>(
    request_id: &str,
    data: &T,
    pagination: Option<Pagination>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Envelope {
        data,
        pagination,
        api_version: API_VERSION,
        request_id,
    })
}

impl RequestInfo {
    pub fn state(&self) -> &crate::state::AppState {
        &self.state
    }

    /// The path parameter `name` (the route table guarantees it exists).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    /// The caller; every non-public route has one.
    pub fn caller(&self) -> Result<&Caller, ApiError> {
        self.caller
            .as_ref()
            .ok_or_else(|| ApiError::internal("authenticated route without a caller"))
    }

    /// The success envelope as bytes.
    pub fn envelope<T: Serialize>(
        &self,
        data: &T,
        pagination: Option<Pagination>,
    ) -> Result<Vec<u8>, ApiError> {
        envelope_bytes(&self.request_id, data, pagination).map_err(ApiError::internal)
    }

    /// A read answer.
    pub fn ok<T: Serialize>(&self, data: &T) -> Result<HttpResponse, ApiError> {
        Ok(json_response(StatusCode::OK, self.envelope(data, None)?))
    }

    /// A list answer with pagination.
    pub fn list<T: Serialize>(
        &self,
        items: &[T],
        page: Page,
        total: u64,
    ) -> Result<HttpResponse, ApiError> {
        let pagination = Pagination {
            total,
            limit: page.limit,
            offset: page.offset,
            has_more: page.offset + (items.len() as u64) < total,
        };
        Ok(json_response(
            StatusCode::OK,
            self.envelope(&items, Some(pagination))?,
        ))
    }

    /// Parses the JSON body into `T` (an empty body counts as `{}`), listing every invalid
    /// field rather than the first.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let value = self.json_value()?;
        if !value.is_object() {
            return Err(ApiError::validation(vec![FieldError::new(
                "",
                "the body must be a JSON object",
            )]));
        }
        parse_collecting(value).map_err(ApiError::validation)
    }

    /// Parses the JSON body as far as it goes: `T` without its mistyped fields, and their
    /// errors. Handlers add their own checks with [`merge_errors`].
    pub fn json_partial<T: DeserializeOwned>(&self) -> Result<(T, Vec<FieldError>), ApiError> {
        let value = self.json_value()?;
        if !value.is_object() {
            return Err(ApiError::validation(vec![FieldError::new(
                "",
                "the body must be a JSON object",
            )]));
        }
        match parse_partial(value) {
            (Some(parsed), errors) => Ok((parsed, errors)),
            (None, errors) => Err(ApiError::validation(errors)),
        }
    }

    /// The body as a JSON value (an empty body is `{}`).
    pub fn json_value(&self) -> Result<Value, ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            ApiError::validation(vec![FieldError::new(
                "",
                format!(
                    "malformed JSON at line {} column {}: {}",
                    e.line(),
                    e.column(),
                    e
                ),
            )])
        })
    }

    /// The query string's parameters.
    pub fn query(&self) -> Result<Query, ApiError> {
        Query::parse(&self.query)
    }
}

pub fn json_response(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json; charset=utf-8")
        .body(body)
}

/// Deserializes `value` into `T`, failing with every invalid field.
pub fn parse_collecting<T: DeserializeOwned>(value: Value) -> Result<T, Vec<FieldError>> {
    match parse_partial(value) {
        (Some(parsed), errors) if errors.is_empty() => Ok(parsed),
        (_, errors) => Err(errors),
    }
}

/// Deserializes `value` into `T`; on a type error records it, removes the offending top-level
/// field and tries again. Returns what parsed without the bad fields (so that further checks
/// can run on the rest) and the type errors.
pub fn parse_partial<T: DeserializeOwned>(mut value: Value) -> (Option<T>, Vec<FieldError>) {
    let mut errors = Vec::new();
    for _ in 0..64 {
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(parsed) => return (Some(parsed), errors),
            Err(err) => {
                let path = err.path().to_string();
                let path = if path == "." { String::new() } else { path };
                errors.push(FieldError::new(
                    &path,
                    describe_serde_error(&err.inner().to_string()),
                ));
                let top = err.path().iter().next().and_then(|seg| match seg {
                    serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                    _ => None,
                });
                let removed = match (top, value.as_object_mut()) {
                    (Some(key), Some(map)) => map.remove(&key).is_some(),
                    _ => false,
                };
                if !removed {
                    return (None, errors);
                }
            }
        }
    }
    (None, errors)
}

/// Adds `more` to `errors`, skipping fields that already have an error (or one inside them).
pub fn merge_errors(errors: &mut Vec<FieldError>, more: Vec<FieldError>) {
    for error in more {
        let covered = errors.iter().any(|e| {
            e.field == error.field
                || e.field
                    .strip_prefix(error.field.as_str())
                    .is_some_and(|rest| rest.starts_with('[') || rest.starts_with('.'))
        });
        if !covered {
            errors.push(error);
        }
    }
}

/// serde's messages, made plainer for people and agents.
fn describe_serde_error(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field ") {
        return format!("unknown field {rest}");
    }
    if message.contains("expected i64") || message.contains("expected u64") {
        return format!("{message} (a whole number of cents or a count)");
    }
    message.to_owned()
}

/// Query parameters, taken one by one so that unknown ones can be reported.
#[derive(Debug, Default)]
pub struct Query {
    values: HashMap<String, String>,
    errors: Vec<FieldError>,
}

/// `limit` and `offset` of a list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: u64,
    pub offset: u64,
}

impl Query {
    pub fn parse(raw: &str) -> Result<Query, ApiError> {
        let pairs = web::Query::<Vec<(String, String)>>::from_query(raw).map_err(|e| {
            ApiError::query(vec![FieldError::new(
                "",
                format!("malformed query string: {e}"),
            )])
        })?;
        let mut query = Query::default();
        for (key, value) in pairs.into_inner() {
            if query.values.insert(key.clone(), value).is_some() {
                query
                    .errors
                    .push(FieldError::new(key, "given more than once"));
            }
        }
        Ok(query)
    }

    pub fn str(&mut self, name: &str) -> Option<String> {
        self.values.remove(name)
    }

    /// A value that must be one of a closed set.
    pub fn parsed<T>(
        &mut self,
        name: &str,
        parse: impl Fn(&str) -> Option<T>,
        valid: &str,
    ) -> Option<T> {
        let raw = self.values.remove(name)?;
        match parse(&raw) {
            Some(v) => Some(v),
            None => {
                self.errors
                    .push(FieldError::new(name, format!("must be one of {valid}")));
                None
            }
        }
    }

    pub fn bool(&mut self, name: &str) -> Option<bool> {
        self.parsed(
            name,
            |s| match s {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            },
            "true, false",
        )
    }

    pub fn datetime(&mut self, name: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        let raw = self.values.remove(name)?;
        match crate::dates::parse_instant(&raw, crate::dates::DayEdge::Start) {
            Ok(ts) => Some(ts),
            Err(msg) => {
                self.errors.push(FieldError::new(name, msg));
                None
            }
        }
    }

    fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.values.remove(name) else {
            return default;
        };
        match raw.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => n,
            _ => {
                let range = if max == u64::MAX {
                    format!("a whole number of at least {min}")
                } else {
                    format!("a whole number from {min} to {max}")
                };
                self.errors
                    .push(FieldError::new(name, format!("must be {range}")));
                default
            }
        }
    }

    /// `limit` (1–200, default 25) and `offset` (≥ 0, default 0).
    pub fn page(&mut self) -> Page {
        Page {
            limit: self.number("limit", 25, 1, 200),
            offset: self.number("offset", 0, 0, i64::MAX as u64),
        }
    }

    /// Fails with every bad or unknown parameter; `known` names the ones this route takes.
    pub fn finish(mut self, known: &[&str]) -> Result<(), ApiError> {
        let mut unknown: Vec<String> = self.values.into_keys().collect();
        unknown.sort();
        for key in unknown {
            let message = if known.is_empty() {
                "unknown parameter; this operation takes no query parameters".to_owned()
            } else {
                format!("unknown parameter; known ones are {}", known.join(", "))
            };
            self.errors.push(FieldError::new(key, message));
        }
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::query(self.errors))
        }
    }
}

impl RequestInfo {
    /// The audit facts of this request.
    pub fn audit_facts(&self, method: &str, path: &str) -> crate::audit::RequestFacts {
        crate::audit::RequestFacts {
            request_id: self.request_id.clone(),
            api_key_id: self.caller.as_ref().map(|c| c.key_id.clone()),
            method: method.to_owned(),
            path: path.to_owned(),
            operation: Some(self.route.operation),
            idempotency_key: self.claim.as_ref().map(|c| c.key.clone()),
        }
    }

    /// Finishes a successful write: stores the idempotency record (with `stored` in place of
    /// `data` when the answer holds a secret that must not be kept) and the audit entry in the
    /// operation's transaction `tx`, commits, and answers.
    pub async fn commit<T: Serialize, S: Serialize>(
        &self,
        tx: payroll_entities::db::WriteTx,
        status: StatusCode,
        data: &T,
        stored: Option<&S>,
        record: crate::audit::AuditRecord,
    ) -> Result<HttpResponse, ApiError> {
        let body = self.envelope(data, None)?;
        if let Some(claim) = &self.claim {
            let kept = match stored {
                Some(redacted) => self.envelope(redacted, None)?,
                None => body.clone(),
            };
            let kept = String::from_utf8(kept).map_err(ApiError::internal)?;
            payroll_actors::acknowledgement::complete_idempotency(
                &*tx,
                &claim.target(),
                status.as_u16(),
                kept,
            )
            .await?;
        }
        let facts = self.audit_facts(self.route.method.as_str(), &self.path);
        let entry = crate::audit::request_entry(
            &facts,
            status.as_u16(),
            Some(&record),
            serde_json::json!({}),
        );
        crate::audit::insert(&*tx, entry).await?;
        tx.commit().await?;
        let mut response = json_response(status, body);
        response.extensions_mut().insert(AuditRecorded);
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        amount: Option<i64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: Option<String>,
        count: Option<i64>,
        items: Option<Vec<Item>>,
    }

    #[test]
    fn every_invalid_field_is_listed() {
        let value =
            serde_json::json!({"name": 1, "count": "x", "extra": true, "items": [{"amount": "y"}]});
        let errors = parse_collecting::<Body>(value).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields.len(), 4, "{errors:?}");
        for f in ["name", "count", "extra", "items[0].amount"] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn valid_bodies_parse() {
        let body: Body = parse_collecting(serde_json::json!({"name": "a"})).expect("valid");
        assert_eq!(body.name.as_deref(), Some("a"));
    }

    #[test]
    fn query_pages_are_bounded() {
        let mut q = Query::parse("limit=0&offset=-1").expect("parses");
        q.page();
        let err = q.finish(&["limit", "offset"]).expect_err("bad page");
        assert_eq!(
            err.details["validation_errors"].as_array().map(Vec::len),
            Some(2)
        );

        let mut q = Query::parse("limit=200").expect("parses");
        assert_eq!(
            q.page(),
            Page {
                limit: 200,
                offset: 0
            }
        );
        assert!(q.finish(&["limit", "offset"]).is_ok());

        let q = Query::parse("bogus=1").expect("parses");
        assert!(q.finish(&["limit"]).is_err());
    }
}
