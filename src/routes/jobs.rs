//! `/jobs/{job_id}`: the progress of an execution.

use actix_web::HttpResponse;
use payroll_actors::views::JobResource;
use payroll_entities::{ids, job};

use crate::http::{error::ApiError, request::ApiRequest, resource::find_resource};

/// Get an execution job: its status and progress over the run's payouts.
#[utoipa::path(get, path = "/jobs/{job_id}", operation_id = "getJob", tag = "jobs",
    params(("job_id" = String, Path)),
    responses((status = 200, description = "The job with live progress; COMPLETED once every payout it covers is terminal", body = JobResource)))]
#[tracing::instrument(skip_all, fields(job_id = %req.param("job_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let id = req.param("job_id");
    let job =
        find_resource::<job::Entity, _>(&req.state().db.conn, ids::IdKind::Job, "job", id, false)
            .await?;
    req.ok(&JobResource::from(&job))
}
