//! Holding a money-moving request for approval (CONTRACT §16): called by an agent session, or
//! by any key while `approvals.required`, it answers 202 with a PENDING approval and does
//! nothing else; `/approvals` decides it.

use actix_web::{HttpResponse, http::StatusCode};
use chrono::Duration;
use payroll_actors::{
    approvals::{ApprovalResource, approval_event, new_approval_id},
    events,
};
use payroll_entities::{ApprovalStatus, approval, time};
use sea_orm::{EntityTrait, IntoActiveModel};
use serde_json::json;

use crate::http::{audit::AuditRecord, error::ApiError, request::ApiRequest};

/// The money-moving operations (canonical operationIds): held for approval when called by an
/// agent session, or by any key while `approvals.required`.
pub const MONEY_MOVING: &[&str] = &[
    "executePayrollRun",
    "retryFailedPayouts",
    "retryPayout",
    "resolvePayout",
    "createTreasuryTransfer",
];

/// Holds a money-moving request for approval when it must be (an agent session's, or any
/// while `approvals.required`): answers 202 with the PENDING approval, and does nothing else.
/// `None`: the request acts now (no approval needed, or it is the approved one carried out).
pub async fn hold(
    req: &ApiRequest,
    resource_id: Option<&str>,
) -> Result<Option<HttpResponse>, ApiError> {
    if req.approval.is_some() {
        return Ok(None);
    }
    let caller = req.caller()?;
    let state = req.state();
    if caller.session_id.is_none() && !state.settings.approvals.required {
        return Ok(None);
    }
    let now = time::now();
    let model = approval::Model {
        id: new_approval_id(),
        status: ApprovalStatus::Pending,
        operation: req.route.operation.to_owned(),
        method: req.route.method.as_str().to_owned(),
        path: req.path.clone(),
        body: String::from_utf8_lossy(&req.body).into_owned(),
        resource_id: resource_id.map(str::to_owned),
        requester_actor_type: caller.actor_type(),
        requester_key_id: caller.key_id.clone(),
        requester_lineage_id: caller.key_lineage_id.clone(),
        requester_session_id: caller.session_id.clone(),
        requester_scopes: caller.scopes.join(","),
        operation_idempotency_key: uuid::Uuid::new_v4().to_string(),
        reason: None,
        decided_by_key_id: None,
        decided_at: None,
        result_status: None,
        result_body: None,
        expires_at: now + Duration::hours(state.settings.approvals.ttl_hours as i64),
        created_at: now,
    };
    let tx = state.db.begin_write().await?;
    approval::Entity::insert(model.clone().into_active_model())
        .exec_without_returning(&*tx)
        .await?;
    events::insert_events(&tx, vec![approval_event("approval.requested", &model)]).await?;
    let record = AuditRecord::new("APPROVAL_REQUESTED", "approval", &model.id).details(json!({
        "operation": model.operation,
        "resource_id": model.resource_id,
    }));
    let shown = ApprovalResource::new(&model, now);
    req.commit::<_, ApprovalResource>(tx, StatusCode::ACCEPTED, &shown, None, record)
        .await
        .map(Some)
}
