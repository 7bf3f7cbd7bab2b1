//! Sends a client's command to its run's actor and answers with what the actor committed: the
//! actor stores the answer under the Idempotency-Key and the audit entry in the same
//! transaction as the change, rendering the answer with the function handed over here.

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::telemetry::{CountedSend, MAILBOX_LIMIT};
use payroll_actors::{
    acknowledgement::{Acknowledgement, Outcome},
    run::{
        messages::{RunCommand, RunError, RunRequest},
        transitions,
    },
    views::{PayoutResource, RunResource, Timestamp},
};
use payroll_entities::RunStatus;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::http::{
    audit,
    envelope::{envelope_bytes, json_response},
    error::{ApiError, ErrorCode},
    request::{ApiRequest, AuditRecorded},
};

/// The answer of a balance check (CONTRACT §5, §7).
#[derive(Debug, Serialize, ToSchema)]
pub struct BalanceCheckResource {
    /// False: a human must move funds from the treasury wallet to the exchange account.
    pub sufficient: bool,
    /// Σ amount + fee of the run's pending payouts.
    pub required_usdc_cents: i64,
    /// What the exchange holds for this run: available minus what other runs reserved.
    pub available_usdc_cents: i64,
    pub deficit_usdc_cents: i64,
    /// The run's status after the check (DEPOSITED once a CONFIRMED run is covered).
    pub run_status: RunStatus,
    pub checked_at: Timestamp,
}

/// The answer's body for an outcome, with the same field order as every other answer.
fn render(request_id: &str, outcome: &Outcome) -> serde_json::Result<Vec<u8>> {
    match outcome {
        Outcome::Run { run, job } => {
            envelope_bytes(request_id, &RunResource::new(run, job.as_ref()), None)
        }
        Outcome::Payout(p) => envelope_bytes(request_id, &PayoutResource::from(p), None),
        Outcome::BalanceCheck(c) => envelope_bytes(
            request_id,
            &BalanceCheckResource {
                sufficient: c.sufficient,
                required_usdc_cents: c.required,
                available_usdc_cents: c.available,
                deficit_usdc_cents: c.deficit,
                run_status: c.run.status,
                checked_at: c.checked_at.into(),
            },
            None,
        ),
    }
}

/// What a request to a run actor commits with its change: the idempotency record and the
/// audit entry, and how the answer with status `status` is rendered.
pub fn acknowledgement(req: &ApiRequest, status: StatusCode) -> Acknowledgement {
    let request_id = req.request_id.clone();
    let facts = req.audit_facts(req.route.method.as_str(), &req.path);
    Acknowledgement {
        idempotency: req.claim.as_ref().map(|c| c.target()),
        status: status.as_u16(),
        audit: audit::request_entry(&facts, status.as_u16(), None, json!({})),
        render: Box::new(move |outcome| render(&request_id, outcome).map_err(|e| e.to_string())),
    }
}

/// The answer an actor committed, its audit entry written already.
pub fn committed(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    let mut response = json_response(status, body);
    response.extensions_mut().insert(AuditRecorded);
    response
}

/// Sends `command` to run `run_id`; answers `status` with the committed outcome.
pub async fn send(
    req: &ApiRequest,
    run_id: &str,
    command: RunCommand,
    status: StatusCode,
) -> Result<HttpResponse, ApiError> {
    let message = RunRequest {
        run_id: run_id.to_owned(),
        command,
        ack: acknowledgement(req, status),
    };
    let reply = req
        .state()
        .runs
        .bounded_send(message, MAILBOX_LIMIT)?
        .await?
        .map_err(|err| run_error(req, run_id, err))?;
    Ok(committed(status, reply.body))
}

/// A run actor's refusal in the API's words.
pub fn run_error(req: &ApiRequest, run_id: &str, err: RunError) -> ApiError {
    match err {
        RunError::NotFound => ApiError::not_found("payroll_run", run_id),
        RunError::PayoutNotFound(id) => ApiError::not_found("payout", &id),
        RunError::Refused { refused, operation, hint } => {
            let err = transition_refused(refused, operation);
            match hint {
                Some(hint) => err.hint(hint.replace("{run_id}", run_id)),
                None => err,
            }
        }
        RunError::NotYetDeposited { refused } => {
            transition_refused(refused, "executed").hint(format!(
                "The run is covered but not yet DEPOSITED: call POST /api/v1/payroll-runs/{run_id}/balance-check, then execute."
            ))
        }
        RunError::PayoutRefused { payout_id, refused, operation, hint } => ApiError::new(
            ErrorCode::InvalidStatusTransition,
            format!("Payout {payout_id} is {} and cannot be {operation}.", refused.current),
        )
        .detail("current_status", refused.current.as_str())
        .detail("allowed_operations", json!(refused.allowed_operations))
        .detail(
            "allowed_transitions",
            json!(refused.allowed_transitions.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        )
        .hint(hint),
        RunError::Overlap { existing_run_id, existing_status } => ApiError::new(
            ErrorCode::PayrollRunOverlap,
            format!("Regular run {existing_run_id} ({existing_status}) already covers part of this period."),
        )
        .detail("existing_run_id", existing_run_id.as_str())
        .detail("existing_run_status", existing_status.as_str()),
        RunError::InsufficientFunds { required, available, deficit } => ApiError::new(
            ErrorCode::CexInsufficientBalance,
            format!("The exchange account is {deficit} cents short of the {required} cents this run needs."),
        )
        .detail("required_usdc_cents", required)
        .detail("available_usdc_cents", available)
        .detail("deficit_usdc_cents", deficit),
        RunError::ScopeRequired(scope) => {
            let granted = req.caller.as_ref().map(|c| c.scopes.clone()).unwrap_or_default();
            ApiError::insufficient_scope(&[scope], &granted).hint(
                "A confirmed run has funds committed to it: a key with payroll:execute (a human) must do this.",
            )
        }
        RunError::Invalid(errors) => ApiError::state_conflict(
            errors
                .into_iter()
                .map(|(field, message)| crate::http::error::FieldError::new(field, message))
                .collect(),
        ),
        RunError::Exchange(reason) | RunError::ExchangePaused(reason) => {
            exchange_failed(req, &reason)
        }
        RunError::Stale | RunError::Unavailable(_) => {
            tracing::warn!(run_id, error = %err, "run command not carried out");
            let mut err = ApiError::unavailable("The run is being reloaded; nothing was changed.")
                .detail("reason", "overloaded")
                .detail("retry_after_seconds", 1u64)
                .hint("Retry in a moment with the same Idempotency-Key.");
            err.retry_after = Some(1);
            err
        }
        RunError::Superseded(answer) => run_error(req, run_id, *answer),
        RunError::Database(fault, cause) => {
            tracing::warn!(run_id, fault = fault.as_str(), error = %cause, "run command not carried out: database fault");
            ApiError::database(fault)
        }
        RunError::Db(cause) => ApiError::internal(cause),
        RunError::TakenOver => ApiError::taken_over(),
    }
}

/// 502 for an exchange that cannot be reached or errs.
pub fn exchange_failed(req: &ApiRequest, reason: &str) -> ApiError {
    tracing::warn!(reason, "exchange call failed");
    ApiError::new(
        ErrorCode::CexConnectionFailed,
        "The exchange could not be reached or answered with an error.",
    )
    .detail("cex_provider", req.state().exchange_provider)
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
