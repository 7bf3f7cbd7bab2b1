//! `/payouts/{payout_id}`: one payout, and retrying or cancelling it through its run's actor.

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::run::messages::{Resolution, RunCommand};
use payroll_actors::views::PayoutResource;
use payroll_entities::{ids, payout};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::{
    http::{
        body::merge_errors,
        error::{ApiError, FieldError},
        request::ApiRequest,
        resource::find_resource,
    },
    routes::{api_keys::EmptyRequest, runs},
};

/// What an operator found at the exchange for a stuck payout.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResolvedOutcome {
    /// The exchange paid it.
    Completed,
    /// The exchange holds no withdrawal for it: no money left.
    Failed,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolvePayoutRequest {
    /// `completed` or `failed`.
    #[schema(value_type = ResolvedOutcome, required)]
    pub outcome: Option<ResolvedOutcome>,
    /// With `completed`: the transaction hash, where known, in its chain's form: `0x` and 64
    /// hex digits on an EVM chain, the base58 of a 64-byte signature on Solana (else 400).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub on_chain_tx_hash: Option<String>,
    /// What was found, for the audit log (and the failed reason).
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub note: Option<String>,
}

async fn find_payout(req: &ApiRequest) -> Result<payout::Model, ApiError> {
    let id = req.param("payout_id");
    find_resource::<payout::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::Payout,
        "payout",
        id,
        false,
    )
    .await
}

/// Get one payout.
#[utoipa::path(get, path = "/payouts/{payout_id}", operation_id = "getPayout", tag = "payouts",
    params(("payout_id" = String, Path)),
    responses((status = 200, description = "The payout", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let payout = find_payout(&req).await?;
    req.ok(&PayoutResource::from(&payout))
}

/// Retry one FAILED payout (FAILED → PENDING, attempt + 1) to the employee's current wallet.
///
/// Moves money: the run goes PAYING_OUT again with a new job.
#[utoipa::path(post, path = "/payouts/{payout_id}/retry", operation_id = "retryPayout", tag = "payouts",
    params(("payout_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The payout, PENDING again (attempt + 1) to its employee's current wallet; its run is PAYING_OUT with a new job", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn retry(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let payout = find_payout(&req).await?;
    if let Some(held) = crate::http::approvals::hold(&req, Some(&payout.id)).await? {
        return Ok(held);
    }
    let command = RunCommand::RetryPayout {
        payout_id: payout.id,
    };
    runs::send(&req, &payout.payroll_run_id, command, StatusCode::OK).await
}

/// Cancel one PENDING payout that has not been sent to the exchange (PENDING → CANCELLED).
#[utoipa::path(post, path = "/payouts/{payout_id}/cancel", operation_id = "cancelPayout", tag = "payouts",
    params(("payout_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The payout, CANCELLED (only while PENDING and not yet handed to the exchange)", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn cancel(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let payout = find_payout(&req).await?;
    let command = RunCommand::CancelPayout {
        payout_id: payout.id,
    };
    runs::send(&req, &payout.payroll_run_id, command, StatusCode::OK).await
}

/// Resolve a stuck payout once the exchange's records are checked: completed or failed.
///
/// Acts only on a payout with `stuck_since` set.
#[utoipa::path(post, path = "/payouts/{payout_id}/resolve", operation_id = "resolvePayout", tag = "payouts",
    params(("payout_id" = String, Path)), request_body = ResolvePayoutRequest,
    responses((status = 200, description = "The payout, COMPLETED or FAILED as resolved; only a stuck payout (`stuck_since` set) can be resolved, any other answers 409 INVALID_STATUS_TRANSITION", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn resolve(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let (body, mut errors) = req.json_partial::<ResolvePayoutRequest>()?;
    let mut checks = Vec::new();
    if body.outcome.is_none() && !errors.iter().any(|e| e.field == "outcome") {
        checks.push(FieldError::new(
            "outcome",
            "required: completed (the exchange paid it) or failed (no withdrawal exists)",
        ));
    }
    match (&body.on_chain_tx_hash, body.outcome) {
        (Some(hash), _) if hash.trim().is_empty() || hash.chars().count() > 200 => {
            checks.push(FieldError::new("on_chain_tx_hash", "1 to 200 characters"))
        }
        (Some(_), Some(ResolvedOutcome::Failed)) => checks.push(FieldError::new(
            "on_chain_tx_hash",
            "only with outcome completed",
        )),
        _ => {}
    }
    crate::http::body::check_text(&mut checks, "note", body.note.as_deref(), 1000);
    merge_errors(&mut errors, checks);
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let payout = find_payout(&req).await?;
    // A hash goes into links, exports and webhooks: only one in the payout's chain's form.
    if let Some(hash) = body.on_chain_tx_hash.as_deref().map(str::trim)
        && !payroll_actors::exchange::valid_tx_hash(payout.network, hash)
    {
        let form = if payout.network.is_evm() {
            "0x and 64 hex digits"
        } else {
            "the base58 of a 64-byte signature"
        };
        return Err(ApiError::validation(vec![FieldError::new(
            "on_chain_tx_hash",
            format!(
                "not a transaction hash of {}: {form}",
                payout.network.as_str()
            ),
        )]));
    }
    if let Some(held) = crate::http::approvals::hold(&req, Some(&payout.id)).await? {
        return Ok(held);
    }
    let resolution = match body.outcome {
        Some(ResolvedOutcome::Failed) => Resolution::Failed { note: body.note },
        _ => Resolution::Completed {
            on_chain_tx_hash: body.on_chain_tx_hash.map(|h| h.trim().to_owned()),
            note: body.note,
        },
    };
    let command = RunCommand::ResolvePayout {
        payout_id: payout.id,
        resolution,
    };
    runs::send(&req, &payout.payroll_run_id, command, StatusCode::OK).await
}
