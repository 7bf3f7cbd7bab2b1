//! Every error the API answers: one enum of stable codes (CONTRACT §4), one `ResponseError`
//! that renders the wire body. 5xx bodies are generic; their causes are logged, never shown.

use actix_web::{HttpResponse, ResponseError, http::StatusCode};
use serde::Serialize;
use serde_json::{Map, Value, json};

use payroll_actors::views::API_VERSION;
use payroll_entities::health::{self, Fault, Health};

macro_rules! error_codes {
    ($($variant:ident = ($code:literal, $status:literal, $meaning:literal, $hint:literal)),+ $(,)?) => {
        /// The machine-readable error codes of the API.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorCode { $($variant),+ }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code),+ }
            }

            pub fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::from_u16($status)
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)),+
                }
            }

            /// When the code is answered, for the documentation page.
            pub fn meaning(self) -> &'static str {
                match self { $(ErrorCode::$variant => $meaning),+ }
            }

            /// What to do next, in one sentence, unless the error names something better.
            pub fn default_hint(self) -> &'static str {
                match self { $(ErrorCode::$variant => $hint),+ }
            }
        }
    };
}

error_codes! {
    InvalidRequestBody = ("INVALID_REQUEST_BODY", 400,
        "The request body is not valid JSON or fails validation; details.validation_errors lists every invalid field.",
        "Fix the fields listed in details.validation_errors and send the request again."),
    InvalidQueryParameter = ("INVALID_QUERY_PARAMETER", 400,
        "A query parameter has an invalid value or is unknown.",
        "Fix the query parameters listed in details.validation_errors and send the request again."),
    IdempotencyKeyRequired = ("IDEMPOTENCY_KEY_REQUIRED", 400,
        "A POST, PATCH or DELETE request was sent without an Idempotency-Key header.",
        "Send an Idempotency-Key header with a new UUID v4 and reuse it only to retry this same request."),
    InvalidIdempotencyKey = ("INVALID_IDEMPOTENCY_KEY", 400,
        "The Idempotency-Key header is not a UUID v4.",
        "Send a UUID v4 (for example from `uuidgen`) as the Idempotency-Key header."),
    UnsupportedApiVersion = ("UNSUPPORTED_API_VERSION", 400,
        "The Api-Version header names a version this server does not speak.",
        "Send Api-Version: 2026-03-01 or leave the header out."),
    InvalidApiKey = ("INVALID_API_KEY", 401,
        "The Authorization header is missing or malformed, or the API key is unknown or revoked.",
        "Send Authorization: Bearer mpk_live_… with an active API key."),
    ApiKeyExpired = ("API_KEY_EXPIRED", 401,
        "The API key is past its expiry time or past its rotation grace period.",
        "Use the key that replaced it, or ask an administrator for a new key."),
    InsufficientScope = ("INSUFFICIENT_SCOPE", 403,
        "The API key lacks a scope the operation requires.",
        "Use a key that has one of details.required_scopes, or ask an administrator to issue one."),
    ResourceNotFound = ("RESOURCE_NOT_FOUND", 404,
        "No resource of that type has that id.",
        "Check the id; list the collection to find the right one."),
    RouteNotFound = ("ROUTE_NOT_FOUND", 404,
        "No route matches the method and path.",
        "Check the path against the OpenAPI document at /api/v1/openapi.json."),
    MethodNotAllowed = ("METHOD_NOT_ALLOWED", 405,
        "The path exists but does not accept this method.",
        "Use one of the methods in details.allowed_methods."),
    RequestTimeout = ("REQUEST_TIMEOUT", 408,
        "The request body did not arrive within api.body_read_timeout_ms of its head; the connection is closed and nothing was done.",
        "Send the whole body at once, on a new connection, with the same Idempotency-Key."),
    StateConflict = ("STATE_CONFLICT", 409,
        "A well-formed request that what exists now refuses: it names an employee that does not exist or is INACTIVE, a wallet that does not fit the employee's stored network, a payee twice, a time already past, or a run with no payable employee; details.validation_errors lists each.",
        "Fix what details.validation_errors names (in the request or in the stored records it refers to) and send the request again."),
    InvalidStatusTransition = ("INVALID_STATUS_TRANSITION", 409,
        "The operation is not allowed in the resource's current status.",
        "Check details.current_status and use one of details.allowed_operations."),
    PayrollRunOverlap = ("PAYROLL_RUN_OVERLAP", 409,
        "A regular, non-test payroll run that is not cancelled already covers part of the period.",
        "Choose a period that does not overlap details.existing_run_id, or cancel that run first."),
    CexInsufficientBalance = ("CEX_INSUFFICIENT_BALANCE", 409,
        "The exchange account does not hold enough unreserved funds for the run.",
        "Transfer funds from the treasury wallet to the exchange account and check GET /api/v1/treasury/balance before retrying."),
    TreasuryInsufficientBalance = ("TREASURY_INSUFFICIENT_BALANCE", 409,
        "A transfer asks for more than its source balance holds.",
        "Transfer at most details.available_usd_cents, or fund the source first."),
    EmployeeEmailTaken = ("EMPLOYEE_EMAIL_TAKEN", 409,
        "Another employee already has this email address (compared case-insensitively).",
        "Update the existing employee details.existing_employee_id instead, or use another email."),
    KeyAlreadyRotated = ("KEY_ALREADY_ROTATED", 409,
        "The API key was rotated already; a key has one successor (a leaked key is revoked, not rotated).",
        "Use the key in details.successor_key_id, or revoke this one with DELETE /api/v1/api-keys/{key_id}."),
    WebhookLimitReached = ("WEBHOOK_LIMIT_REACHED", 409,
        "As many webhook endpoints as webhooks.max_endpoints exist already.",
        "Delete an endpoint you no longer need (DELETE /api/v1/webhooks/{webhook_id}), or subscribe an existing one to more events."),
    IdempotencyKeyInUse = ("IDEMPOTENCY_KEY_IN_USE", 409,
        "A request with this Idempotency-Key is still being processed.",
        "Wait a moment and retry with the same Idempotency-Key to receive the first request's answer."),
    ApprovalSelf = ("APPROVAL_SELF", 409,
        "An approval cannot be decided by the key lineage that made the request, or by an agent session.",
        "Ask another person, with their own key holding payroll:approve, to decide it."),
    ApprovalClosed = ("APPROVAL_CLOSED", 409,
        "The approval is no longer PENDING (approved, rejected, expired or failed): it cannot be decided again.",
        "Read the approval (GET /api/v1/approvals/{approval_id}) for its status and result; send the operation again for a new approval."),
    TreasuryTransferUnsupported = ("TREASURY_TRANSFER_UNSUPPORTED", 409,
        "The exchange provider cannot move treasury funds itself.",
        "Send USDC to details.deposit_address on details.network from the treasury wallet."),
    PayloadTooLarge = ("PAYLOAD_TOO_LARGE", 413,
        "The request body is larger than the server accepts.",
        "Send at most details.limit_bytes bytes; split large imports into several requests."),
    UnsupportedMediaType = ("UNSUPPORTED_MEDIA_TYPE", 415,
        "The request body is neither JSON nor, for imports, CSV.",
        "Send Content-Type: application/json (or text/csv for POST /employees/import)."),
    IdempotencyKeyReused = ("IDEMPOTENCY_KEY_REUSED", 422,
        "The Idempotency-Key was already used for a different request (another operation, path or body).",
        "Send a new UUID v4 as Idempotency-Key for a new request."),
    RateLimited = ("RATE_LIMITED", 429,
        "The API key sent more requests than its rate limit allows.",
        "Wait details.retry_after_seconds (the Retry-After header) and send the request again."),
    InternalError = ("INTERNAL_ERROR", 500,
        "An unexpected error on the server; it has been logged.",
        "Retry with the same Idempotency-Key; if it persists, report the request_id."),
    CexConnectionFailed = ("CEX_CONNECTION_FAILED", 502,
        "The exchange could not be reached or answered with an error.",
        "Retry in a few seconds; the exchange's status is shown by GET /api/v1/treasury/balance."),
    ServiceUnavailable = ("SERVICE_UNAVAILABLE", 503,
        "The service cannot take the request now: details.reason is database (unreachable, out of space or failing), shutting_down or overloaded. Nothing was done, or (a commit whose outcome was cut) all of it.",
        "Retry after the Retry-After header's seconds with the same Idempotency-Key: a write that did land is answered from its record, never carried out twice."),
}

/// One invalid field: `field` is a dotted JSON path such as `items[0].amount_usd_cents`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// An error answer of the API.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
    pub hint: Option<String>,
    /// Seconds for the `Retry-After` header of a 429 or 503.
    pub retry_after: Option<u64>,
    /// The database fault behind a 503, for the request gate to report to the database's
    /// health.
    pub fault: Option<Fault>,
    /// The connection is closed after this answer (a body cut short or too slow: what is
    /// left of it on the connection is not a request).
    pub close_connection: bool,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: Map::new(),
            hint: None,
            retry_after: None,
            fault: None,
            close_connection: false,
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> ApiError {
        self.hint = Some(hint.into());
        self
    }

    /// 400 with every invalid field listed.
    pub fn validation(errors: Vec<FieldError>) -> ApiError {
        Self::field_errors(ErrorCode::InvalidRequestBody, "request body", errors)
    }

    /// 409 `STATE_CONFLICT`: a well-formed body that what exists now refuses, each reason
    /// listed as for a 400.
    pub fn state_conflict(errors: Vec<FieldError>) -> ApiError {
        let message = match errors.as_slice() {
            [one] => format!("Refused by what exists now: {}: {}", one.field, one.message),
            many => format!("Refused by what exists now: {} reasons", many.len()),
        };
        ApiError::new(ErrorCode::StateConflict, message).detail("validation_errors", json!(errors))
    }

    /// 400 for bad query parameters.
    pub fn query(errors: Vec<FieldError>) -> ApiError {
        Self::field_errors(ErrorCode::InvalidQueryParameter, "query", errors)
    }

    fn field_errors(code: ErrorCode, what: &str, errors: Vec<FieldError>) -> ApiError {
        let message = match errors.as_slice() {
            [one] => format!("Invalid {what}: {}: {}", one.field, one.message),
            many => format!("Invalid {what}: {} fields are invalid", many.len()),
        };
        ApiError::new(code, message).detail("validation_errors", json!(errors))
    }

    pub fn not_found(resource_type: &str, id: &str) -> ApiError {
        ApiError::new(
            ErrorCode::ResourceNotFound,
            format!("No {resource_type} with id {id}."),
        )
        .detail("resource_type", resource_type)
        .detail("resource_id", id)
    }

    pub fn insufficient_scope(required: &[&str], granted: &[String]) -> ApiError {
        ApiError::new(
            ErrorCode::InsufficientScope,
            format!(
                "This operation requires the scope {}.",
                required.join(" or ")
            ),
        )
        .detail("required_scopes", json!(required))
        .detail("granted_scopes", json!(granted))
    }

    /// 403 for an agent session asking for what only a key (a human) may do (CONTRACT §16).
    pub fn session_refused(what: &str, granted: &[String]) -> ApiError {
        ApiError::new(
            ErrorCode::InsufficientScope,
            format!("An agent session cannot {what}; only an API key (a human) can."),
        )
        .detail("required_scopes", json!([]))
        .detail("granted_scopes", json!(granted))
        .detail("reason", "agent_session")
        .hint("Ask the human whose key created this session to do it.")
    }

    /// 500 for a bug: the cause is logged here and never sent.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(
            ErrorCode::InternalError,
            "An unexpected error occurred on the server.",
        )
    }

    pub fn unavailable(reason: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::ServiceUnavailable, reason)
    }

    /// The wire body, given the request id of the answer.
    pub fn body(&self, request_id: &str) -> Value {
        let code = self.code.as_str();
        json!({
            "error": {
                "code": code,
                "message": self.message,
                "details": self.details,
                "recovery_hint": self.hint.as_deref().unwrap_or(self.code.default_hint()),
                "docs_url": format!("/api/v1/docs#{code}"),
            },
            "api_version": API_VERSION,
            "request_id": request_id,
        })
    }
}

impl std::error::Error for ApiError {}

/// An infrastructure fault of the database is 503 (CONTRACT §4); anything else is a bug.
impl From<sea_orm::DbErr> for ApiError {
    fn from(err: sea_orm::DbErr) -> ApiError {
        if payroll_actors::acknowledgement::taken_over(&err) {
            return ApiError::taken_over();
        }
        match health::classify(&err) {
            Some(fault) => {
                tracing::warn!(fault = fault.as_str(), error = %err, "request not carried out: database fault");
                ApiError::database(fault)
            }
            None => ApiError::internal(err),
        }
    }
}

/// Seconds a client is told to wait after a database fault.
const DATABASE_RETRY_AFTER: u64 = 1;

impl ApiError {
    /// 409 for a request that ran past `idempotency.lock_timeout_ms` while a later request with
    /// its Idempotency-Key took it over: nothing of this one was kept, and the later one's
    /// answer is the key's.
    pub fn taken_over() -> ApiError {
        ApiError::new(
            ErrorCode::IdempotencyKeyInUse,
            "This request ran past the idempotency lock timeout and a later request with the same Idempotency-Key took it over; nothing of this request was kept.",
        )
        .hint("Send the request again with the same Idempotency-Key to get the answer of the request that took it over.")
    }

    /// 503 for a database that is unreachable or failing: nothing was done, or (a commit whose
    /// outcome is unknown) all of it, which the idempotency record tells a retry.
    pub fn database(fault: Fault) -> ApiError {
        let message = match fault {
            Fault::Unreachable => CUT_SHORT,
            Fault::Full => "The database is out of space; the request was not carried out.",
            Fault::Io => {
                "The database failed to read or write its files; the request was not carried out."
            }
            Fault::ReadOnly => {
                "The database accepts no writes now; the request was not carried out."
            }
            Fault::Busy | Fault::Conflict => {
                "The database is too busy to take the request now; it was not carried out."
            }
        };
        let mut err = ApiError::unavailable(message)
            .detail("reason", "database")
            .detail("retry_after_seconds", DATABASE_RETRY_AFTER)
            .hint(format!(
                "Retry in {DATABASE_RETRY_AFTER} s (the Retry-After header) with the same Idempotency-Key: a write that did land is answered from its record, never carried out twice."
            ));
        err.retry_after = Some(DATABASE_RETRY_AFTER);
        err.fault = Some(fault);
        err
    }

    /// 503 while the database is known to be down (or to refuse writes): answered at once,
    /// before any work.
    pub fn database_down(health: &Health) -> ApiError {
        ApiError::database_known(
            health,
            "The database is unreachable; the request was not carried out.",
        )
    }

    /// 503 for a request cut short because the database became unreachable while it ran
    /// ([`CUT_SHORT`]).
    pub fn database_interrupted(health: &Health) -> ApiError {
        ApiError::database_known(health, CUT_SHORT)
    }

    /// [`ApiError::database`] for the fault `health` knows of, with since when; `unreachable`
    /// is the message when that fault is the database being unreachable.
    fn database_known(health: &Health, unreachable: &str) -> ApiError {
        let mut err = match health {
            Health::RefusingWrites { fault, .. } => ApiError::database(*fault),
            _ => ApiError {
                message: unreachable.to_owned(),
                ..ApiError::database(Fault::Unreachable)
            },
        };
        if let Some(since) = health.since() {
            err = err.detail("since", payroll_entities::time::format(&since));
        }
        // Already known: nothing for the gate to report again.
        err.fault = None;
        err
    }
}

impl From<payroll_actors::telemetry::Overloaded> for ApiError {
    fn from(err: payroll_actors::telemetry::Overloaded) -> ApiError {
        tracing::warn!(error = %err, "request refused: an actor's mailbox is full");
        let mut refused = ApiError::unavailable(format!(
            "The service is overloaded ({err}); nothing was done."
        ))
        .detail("reason", "overloaded")
        .detail("retry_after_seconds", 1u64);
        refused.retry_after = Some(1);
        refused
    }
}

/// What a request whose database became unreachable while it ran did: what it wrote rolled
/// back with its connection, unless its commit had gone through just before, which the lost
/// connection could not tell (the retry under the same Idempotency-Key does).
const CUT_SHORT: &str = "The database became unreachable while the request ran: what it wrote \
                         was rolled back, unless its commit had just gone through.";

impl ApiError {
    /// A request that arrived after the server began to stop.
    pub fn shutting_down() -> ApiError {
        let mut refused = ApiError::unavailable(
            "The server is shutting down; nothing was done. Send the request again in a \
             moment: another instance answers it, or this one once it has restarted.",
        )
        .detail("reason", "shutting_down")
        .detail("retry_after_seconds", 1u64);
        refused.retry_after = Some(1);
        refused
    }
}

impl From<actix::MailboxError> for ApiError {
    fn from(err: actix::MailboxError) -> ApiError {
        tracing::error!(error = %err, "actor mailbox unavailable");
        let mut refused = ApiError::unavailable("The service is shutting down or overloaded.")
            .detail("reason", "overloaded")
            .detail("retry_after_seconds", 1u64);
        refused.retry_after = Some(1);
        refused
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    /// The request id is filled in by the request gate, which owns it; a response rendered
    /// outside it carries an empty one.
    fn error_response(&self) -> HttpResponse {
        self.response(None)
    }
}

impl ApiError {
    /// The full error answer; without a request id its body is completed by the gate.
    pub fn response(&self, request_id: Option<&str>) -> HttpResponse {
        let mut builder = HttpResponse::build(self.status_code());
        if self.close_connection {
            builder.force_close();
        }
        if let Some(seconds) = self.retry_after {
            builder.insert_header(("Retry-After", seconds.to_string()));
        }
        if self.code == ErrorCode::MethodNotAllowed
            && let Some(Value::Array(methods)) = self.details.get("allowed_methods")
        {
            let allow: Vec<&str> = methods.iter().filter_map(Value::as_str).collect();
            builder.insert_header(("Allow", allow.join(", ")));
        }
        builder
            .content_type("application/json; charset=utf-8")
            .body(self.body(request_id.unwrap_or_default()).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_hints_are_sentences() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {}", code.as_str());
            assert!(code.default_hint().ends_with('.'));
            assert!(code.status().is_client_error() || code.status().is_server_error());
        }
    }

    #[test]
    fn body_has_the_contract_shape() {
        let err = ApiError::not_found("payroll_run", "run_x");
        let body = err.body("req_1");
        assert_eq!(body["error"]["code"], "RESOURCE_NOT_FOUND");
        assert_eq!(body["error"]["details"]["resource_id"], "run_x");
        assert_eq!(body["error"]["docs_url"], "/api/v1/docs#RESOURCE_NOT_FOUND");
        assert_eq!(body["request_id"], "req_1");
        assert_eq!(body["api_version"], API_VERSION);
    }
}
