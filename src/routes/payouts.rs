//! `/payouts/{payout_id}`: one payout, and retrying or cancelling it through its run's actor.

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::run::messages::RunCommand;
use payroll_actors::views::PayoutResource;
use payroll_entities::{ids, payout};

use crate::{
    http::{error::ApiError, request::ApiRequest, resource::find_resource},
    routes::{api_keys::EmptyRequest, runs},
};

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

#[utoipa::path(get, path = "/payouts/{payout_id}", operation_id = "getPayout", tag = "payouts",
    params(("payout_id" = String, Path)),
    responses((status = 200, description = "The payout", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let payout = find_payout(&req).await?;
    req.ok(&PayoutResource::from(&payout))
}

#[utoipa::path(post, path = "/payouts/{payout_id}/retry", operation_id = "retryPayout", tag = "payouts",
    params(("payout_id" = String, Path)), request_body(content = Option<EmptyRequest>),
    responses((status = 200, description = "The payout, PENDING again (attempt + 1) to its employee's current wallet; its run is PAYING_OUT with a new job", body = PayoutResource)))]
#[tracing::instrument(skip_all, fields(payout_id = %req.param("payout_id")))]
pub async fn retry(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: EmptyRequest = req.json()?;
    let payout = find_payout(&req).await?;
    let command = RunCommand::RetryPayout {
        payout_id: payout.id,
    };
    runs::send(&req, &payout.payroll_run_id, command, StatusCode::OK).await
}

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
