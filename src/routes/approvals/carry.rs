//! Carrying an approved request out (CONTRACT §16): its handler runs as the requester (their
//! key or session, their scopes as they asked), on the stored method, path and body, under the
//! approval's own Idempotency-Key, so it runs at most once however often approve is sent or
//! resumed. Its answer becomes the approval's `result`: APPROVED for a 2xx, FAILED for a
//! refusal (4xx), the refusal also kept under that Idempotency-Key so that no second carrying
//! out tries again. An infrastructure failure (5xx) records nothing: approve sent again
//! carries it on (see `approve`).

use std::rc::Rc;

use actix_web::{HttpResponse, http::Method, http::StatusCode};
use payroll_actors::{
    approvals::{ApprovalResource, approval_event},
    events,
};
use payroll_entities::{ApprovalStatus, approval, time};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
use serde_json::{Value, json};

use crate::{
    http::{
        audit::AuditRecord,
        auth,
        error::{ApiError, ErrorCode},
        idempotency::{self, Verdict},
        request::{ApiRequest, ApprovalGrant, BodyType, Caller, IdempotencyClaim, RequestInfo},
    },
    routes::{payouts, runs, treasury},
};

/// Carries `model` (APPROVED, no result yet) out, records its result and answers 200 with the
/// approval.
pub async fn finish(req: &ApiRequest, model: approval::Model) -> Result<HttpResponse, ApiError> {
    let CarriedOut {
        status,
        body,
        refused_claim,
    } = carry_out(req, &model).await?;
    let now = time::now();
    let failed = !(200..300).contains(&status);
    let (kind, action, final_status) = if failed {
        ("approval.failed", "APPROVAL_FAILED", ApprovalStatus::Failed)
    } else {
        (
            "approval.approved",
            "APPROVAL_APPROVED",
            ApprovalStatus::Approved,
        )
    };
    let tx = req.state().db.begin_write().await?;
    // A refusal is kept under the approval's claim with the result: a second carrying out (a
    // resume racing this one) replays it rather than trying again.
    if let Some(claim) = &refused_claim {
        payroll_actors::acknowledgement::complete_idempotency(
            &*tx,
            &claim.target(),
            status,
            body.to_string(),
        )
        .await?;
    }
    let recorded = approval::Entity::update_many()
        .col_expr(approval::Column::Status, Expr::value(final_status.as_str()))
        .col_expr(
            approval::Column::ResultStatus,
            Expr::value(i32::from(status)),
        )
        .col_expr(approval::Column::ResultBody, Expr::value(body.to_string()))
        .filter(approval::Column::Id.eq(model.id.as_str()))
        .filter(approval::Column::ResultStatus.is_null())
        .exec(&*tx)
        .await?
        .rows_affected
        == 1;
    let model = approval::Entity::find_by_id(model.id.as_str())
        .one(&*tx)
        .await?
        .ok_or_else(|| ApiError::not_found("approval", &model.id))?;
    if !recorded {
        // Another carrying out recorded the result first: it stands, told once.
        drop(tx);
        return req.ok(&ApprovalResource::new(&model, now));
    }
    events::insert_events(&tx, vec![approval_event(kind, &model)]).await?;
    let record = AuditRecord::new(action, "approval", &model.id).details(json!({
        "operation": model.operation,
        "resource_id": model.resource_id,
        "requested_by_key_id": model.requester_key_id,
        "requested_by_agent_session_id": model.requester_session_id,
        "result_status": status,
    }));
    let shown = ApprovalResource::new(&model, now);
    req.commit::<_, ApprovalResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}

/// What carrying an approved request out gave.
struct CarriedOut {
    status: u16,
    body: Value,
    /// The claim of a refused operation, still held: completed with the refusal and the
    /// approval's result in one transaction.
    refused_claim: Option<IdempotencyClaim>,
}

/// Runs the approved request's handler as its requester; its status and body. An error of
/// the infrastructure (5xx) is answered to the approver instead, recording nothing.
async fn carry_out(req: &ApiRequest, model: &approval::Model) -> Result<CarriedOut, ApiError> {
    let state = req.state();
    let method = Method::from_bytes(model.method.as_bytes()).map_err(ApiError::internal)?;
    let api_path = model
        .path
        .strip_prefix("/api/v1")
        .ok_or_else(|| ApiError::internal("an approval's path outside /api/v1"))?;
    let (route, params) = crate::http::route::match_stored(&method, api_path)?;
    let body = actix_web::web::Bytes::from(model.body.clone().into_bytes());
    let mut claim = IdempotencyClaim {
        // The approval's own space: the requester's keys never collide with it.
        lineage_id: model.id.clone(),
        key: model.operation_idempotency_key.clone(),
        fingerprint: idempotency::fingerprint(route.operation, &params, &body),
        locked_until: None,
    };
    match idempotency::claim(&state.db, &state.settings.idempotency, &mut claim).await? {
        Verdict::Proceed => {}
        // Carried out before (the approve that did it was cut short): its answer stands.
        Verdict::Replay { status, body } => {
            return Ok(CarriedOut {
                status,
                body: serde_json::from_str(&body).unwrap_or(Value::Null),
                refused_claim: None,
            });
        }
        verdict => {
            return Err(idempotency::verdict_error(&verdict).unwrap_or_else(|| {
                ApiError::new(
                    ErrorCode::IdempotencyKeyInUse,
                    "This approval is being carried out right now.",
                )
            }));
        }
    }
    let caller = Caller {
        key_id: model.requester_key_id.clone(),
        key_lineage_id: model.requester_lineage_id.clone(),
        scopes: auth::parse_scope_list(&model.requester_scopes),
        session_id: model.requester_session_id.clone(),
    };
    let approver = req.caller()?.key_id.clone();
    let approved = ApiRequest(Rc::new(RequestInfo {
        request_id: req.request_id.clone(),
        route,
        params,
        caller: Some(caller),
        claim: Some(claim.clone()),
        body,
        body_type: BodyType::Json,
        query: String::new(),
        path: model.path.clone(),
        state: req.state.clone(),
        import_permit: None,
        approval: Some(ApprovalGrant {
            approval_id: model.id.clone(),
            approved_by_key_id: approver,
        }),
    }));
    let answer = match route.operation {
        "executePayrollRun" => runs::execute(approved).await,
        "retryFailedPayouts" => runs::retry_failed(approved).await,
        "retryPayout" => payouts::retry(approved).await,
        "resolvePayout" => payouts::resolve(approved).await,
        "createTreasuryTransfer" => treasury::create_transfer(approved).await,
        other => Err(ApiError::internal(format!(
            "an approval of {other}, which needs none"
        ))),
    };
    let (status, body) = match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = actix_web::body::to_bytes(response.into_body())
                .await
                .map_err(|_| ApiError::internal("an approved operation's answer unread"))?;
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }
        Err(err) => (err.code.status().as_u16(), err.body(&req.request_id)),
    };
    if status >= 500 {
        // Nothing was done: the claim goes, so that approve sent again carries it out.
        if let Err(err) = idempotency::release(&state.db, &claim).await {
            tracing::warn!(error = %err, "an approved operation's claim not released; it expires by itself");
        }
        let code = body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut err = ApiError::new(
            ErrorCode::ALL
                .iter()
                .copied()
                .find(|c| c.as_str() == code)
                .unwrap_or(ErrorCode::InternalError),
            "The approved operation could not be carried out now; the approval stays APPROVED without a result.",
        )
        .detail("approval_id", model.id.as_str())
        .hint("Send approve again once the service is healthy: it carries the operation out once.");
        if let Some(details) = body["error"]["details"].as_object() {
            for (k, v) in details {
                err.details.insert(k.clone(), v.clone());
            }
        }
        if status == 503 {
            err.retry_after = Some(1);
        }
        return Err(err);
    }
    let refused_claim = (!(200..300).contains(&status)).then_some(claim);
    Ok(CarriedOut {
        status,
        body,
        refused_claim,
    })
}
