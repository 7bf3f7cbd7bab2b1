//! `/jobs/{job_id}`: the progress of an execution.

use actix_web::HttpResponse;
use payroll_entities::{ids, job, views::JobResource};
use sea_orm::EntityTrait;

use crate::{api::ApiRequest, error::ApiError};

#[utoipa::path(get, path = "/jobs/{job_id}", operation_id = "getJob", tag = "jobs",
    params(("job_id" = String, Path)),
    responses((status = 200, description = "The job with live progress; COMPLETED once every payout it covers is terminal", body = JobResource)))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let id = req.param("job_id");
    let not_found = || ApiError::not_found("job", id);
    if !ids::is_well_formed(ids::IdKind::Job, id) {
        return Err(not_found());
    }
    let job = job::Entity::find_by_id(id.to_owned())
        .one(&req.state().db.conn)
        .await?
        .ok_or_else(not_found)?;
    req.ok(&JobResource::from(&job))
}
