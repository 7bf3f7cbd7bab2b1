//! The request as the pipeline hands it to a handler: who calls, the matched route, the body,
//! the idempotency claim, and the answers a handler gives.

use std::rc::Rc;

use actix_web::{
    FromRequest, HttpMessage, HttpRequest, HttpResponse, dev::Payload, http::StatusCode, web,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

pub use crate::http::audit::ApprovalGrant;
use crate::http::{
    body::{parse_collecting, parse_partial},
    envelope::{Pagination, envelope_around, envelope_bytes, json_response},
    error::{ApiError, FieldError},
    query::{Page, Query},
    route::RouteSpec,
};

/// The authenticated caller of a request: a key, or an agent session acting for its key.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key, or the session's creating key (what audit entries name as `api_key_id`).
    pub key_id: String,
    /// The key's lineage (for a session, its creating key's): who is "the same person" when
    /// approvals and wallet holds ask for another one.
    pub key_lineage_id: String,
    pub scopes: Vec<String>,
    /// The agent session the request is made under (CONTRACT §16).
    pub session_id: Option<String>,
}

impl Caller {
    /// What its Idempotency-Keys are scoped to: the key's lineage (a rotated key shares its
    /// predecessor's space), or an agent session's own id.
    pub fn idempotency_space(&self) -> &str {
        self.session_id.as_deref().unwrap_or(&self.key_lineage_id)
    }

    pub fn actor_type(&self) -> payroll_entities::ActorType {
        match self.session_id {
            Some(_) => payroll_entities::ActorType::AgentSession,
            None => payroll_entities::ActorType::ApiKey,
        }
    }
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
    /// An import's place among `api.max_concurrent_imports`, given back when the request ends.
    pub import_permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Set when an approved request is carried out.
    pub approval: Option<ApprovalGrant>,
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

    /// A read answer whose data is already serialized as JSON.
    pub fn ok_serialized(&self, data_json: &[u8]) -> Result<HttpResponse, ApiError> {
        let body = envelope_around(&self.request_id, data_json).map_err(ApiError::internal)?;
        Ok(json_response(StatusCode::OK, body))
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
        serde_json::from_slice(&self.body).map_err(malformed_json)
    }

    /// The query string's parameters.
    pub fn query(&self) -> Result<Query, ApiError> {
        Query::parse(&self.query)
    }
}

impl RequestInfo {
    /// The audit facts of this request.
    pub fn audit_facts(&self, method: &str, path: &str) -> crate::http::audit::RequestFacts {
        let (path, path_truncated) =
            crate::http::audit::stored_path(path, self.state().settings.audit.path_max_chars);
        crate::http::audit::RequestFacts {
            request_id: self.request_id.clone(),
            api_key_id: self.caller.as_ref().map(|c| c.key_id.clone()),
            agent_session_id: self.caller.as_ref().and_then(|c| c.session_id.clone()),
            approval: self.approval.clone(),
            method: method.to_owned(),
            path,
            path_truncated,
            operation: Some(self.route.operation),
            idempotency_key: self.claim.as_ref().map(|c| c.key.clone()),
            peer: None,
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
        record: crate::http::audit::AuditRecord,
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
        let entry = crate::http::audit::request_entry(
            &facts,
            status.as_u16(),
            Some(&record),
            serde_json::json!({}),
        );
        crate::http::audit::insert(&*tx, entry).await?;
        tx.commit().await?;
        let mut response = json_response(status, body);
        response.extensions_mut().insert(AuditRecorded);
        Ok(response)
    }
}

/// A body that is not JSON, in the API's words.
pub fn malformed_json(e: serde_json::Error) -> ApiError {
    ApiError::validation(vec![FieldError::new(
        "",
        format!(
            "malformed JSON at line {} column {}: {}",
            e.line(),
            e.column(),
            e
        ),
    )])
}
