//! `/approvals` (CONTRACT §16): a money-moving request made by an agent session, or by any key
//! while `approvals.required`, is held as a PENDING approval (`http::approvals::hold`); a human
//! key with `payroll:approve` of another lineage approves it (it is carried out then, as the
//! requester, [`carry`]) or rejects it.

pub mod carry;

use actix_web::{HttpResponse, http::StatusCode};
use payroll_actors::{
    approvals::{ApprovalResource, approval_event, status_at},
    events,
};
use payroll_entities::{ApprovalStatus, approval, ids, time};
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::http::{
    audit::AuditRecord,
    error::{ApiError, ErrorCode, FieldError},
    query::fetch_page,
    request::ApiRequest,
    resource::find_resource,
};

async fn find_approval(req: &ApiRequest) -> Result<approval::Model, ApiError> {
    find_resource::<approval::Entity, _>(
        &req.state().db.conn,
        ids::IdKind::Approval,
        "approval",
        req.param("approval_id"),
        false,
    )
    .await
}

/// List approvals, newest first, filtered by status, operation or resource.
#[utoipa::path(get, path = "/approvals", operation_id = "listApprovals", tag = "approvals",
    params(
        ("status" = Option<ApprovalStatus>, Query), ("operation" = Option<String>, Query, description = "an operationId, e.g. executePayrollRun"),
        ("resource_id" = Option<String>, Query, description = "the run or payout the request names"),
        ("limit" = Option<u64>, Query, description = "1–200, default 25"), ("offset" = Option<u64>, Query, description = "default 0")),
    responses((status = 200, description = "Approvals, newest first", body = Vec<ApprovalResource>)))]
#[tracing::instrument(skip_all)]
pub async fn list(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let mut query = req.query()?;
    let status = query.str("status");
    let operation = query.str("operation");
    let resource_id = query.str("resource_id");
    let page = query.page();
    query.finish(&["status", "operation", "resource_id", "limit", "offset"])?;
    let now = time::now();
    let mut select = approval::Entity::find();
    if let Some(raw) = status {
        let Some(status) = ApprovalStatus::parse(&raw) else {
            return Err(ApiError::query(vec![FieldError::new(
                "status",
                format!("one of {}", ApprovalStatus::spellings()),
            )]));
        };
        // PENDING ones past their expiry are EXPIRED already, whether or not marked so yet.
        select = match status {
            ApprovalStatus::Pending => select
                .filter(approval::Column::Status.eq(status))
                .filter(approval::Column::ExpiresAt.gt(now)),
            ApprovalStatus::Expired => select.filter(
                Condition::any()
                    .add(approval::Column::Status.eq(status))
                    .add(
                        Condition::all()
                            .add(approval::Column::Status.eq(ApprovalStatus::Pending))
                            .add(approval::Column::ExpiresAt.lte(now)),
                    ),
            ),
            other => select.filter(approval::Column::Status.eq(other)),
        };
    }
    if let Some(operation) = operation {
        select = select.filter(approval::Column::Operation.eq(operation));
    }
    if let Some(resource_id) = resource_id {
        select = select.filter(approval::Column::ResourceId.eq(resource_id));
    }
    let db = &req.state().db.conn;
    let (rows, total) = fetch_page(db, select.order_by_desc(approval::Column::Id), page).await?;
    let items: Vec<ApprovalResource> = rows.iter().map(|m| ApprovalResource::new(m, now)).collect();
    req.list(&items, page, total)
}

/// Get one approval: its request, who asked, and once decided, the decision and the result.
#[utoipa::path(get, path = "/approvals/{approval_id}", operation_id = "getApproval", tag = "approvals",
    params(("approval_id" = String, Path)),
    responses((status = 200, description = "The approval", body = ApprovalResource)))]
#[tracing::instrument(skip_all, fields(approval_id = %req.param("approval_id")))]
pub async fn get(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    req.query()?.finish(&[])?;
    let model = find_approval(&req).await?;
    req.ok(&ApprovalResource::new(&model, time::now()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {}

/// Most characters in a rejection's reason.
pub const REASON_MAX: usize = 1000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectRequest {
    /// Why the request is refused (1–1000 characters), shown to the requester.
    #[schema(value_type = String)]
    pub reason: Option<String>,
}

/// 409 `APPROVAL_SELF` unless the caller may decide this approval: a key (never a session)
/// of another lineage than the requesting key's; a session's request may be decided by its
/// creator.
fn may_decide(req: &ApiRequest, model: &approval::Model) -> Result<(), ApiError> {
    let caller = req.caller()?;
    let own = caller.session_id.is_some()
        || (model.requester_session_id.is_none()
            && caller.key_lineage_id == model.requester_lineage_id);
    if !own {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::ApprovalSelf,
        "A request cannot be approved or rejected by the key (or key lineage) that made it.",
    )
    .detail(
        "requested_by",
        json!(ApprovalResource::new(model, time::now()).requested_by),
    )
    .hint("Ask another person, with their own key holding payroll:approve, to decide it."))
}

/// Takes the decision `status` on approval `id` in `tx`, by `key_id`: only if it is still
/// PENDING and not expired, by one conditional update, so of two deciders at once one wins.
async fn decide(
    tx: &payroll_entities::db::WriteTx,
    id: &str,
    key_id: &str,
    status: ApprovalStatus,
    reason: Option<&str>,
) -> Result<bool, sea_orm::DbErr> {
    use sea_orm::sea_query::Expr;
    let now = time::now();
    let mut update = approval::Entity::update_many()
        .col_expr(approval::Column::Status, Expr::value(status.as_str()))
        .col_expr(
            approval::Column::DecidedByKeyId,
            Expr::value(key_id.to_owned()),
        )
        .col_expr(approval::Column::DecidedAt, Expr::value(now));
    if let Some(reason) = reason {
        update = update.col_expr(approval::Column::Reason, Expr::value(reason.to_owned()));
    }
    Ok(update
        .filter(approval::Column::Id.eq(id))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending))
        .filter(approval::Column::ExpiresAt.gt(now))
        .exec(&**tx)
        .await?
        .rows_affected
        == 1)
}

/// 409 `APPROVAL_CLOSED` for an approval no longer PENDING (an expired one is marked so).
async fn closed(req: &ApiRequest, model: &approval::Model) -> ApiError {
    let now = time::now();
    let status = status_at(model, now);
    if status == ApprovalStatus::Expired && model.status == ApprovalStatus::Pending {
        // Marked EXPIRED now, with its event, rather than at the janitor's next pass.
        let marked = async {
            let tx = req.state().db.begin_write().await?;
            payroll_actors::approvals::expire(&tx, &model.id, now).await?;
            tx.commit().await
        }
        .await;
        if let Err(err) = marked {
            tracing::warn!(error = %err, approval_id = %model.id, "expired approval not marked");
        }
    }
    ApiError::new(
        ErrorCode::ApprovalClosed,
        format!(
            "Approval {} is {status}: it can no longer be decided.",
            model.id
        ),
    )
    .detail("status", status.as_str())
}

/// Approve a PENDING approval: the operation is carried out now, as the requester, with the
/// state checks of this moment.
///
/// Moves money. APPROVED with the operation's `result` if it succeeded, FAILED with the
/// refusal as `result` if it was refused (say the run is no longer DEPOSITED).
#[utoipa::path(post, path = "/approvals/{approval_id}/approve", operation_id = "approveApproval", tag = "approvals",
    params(("approval_id" = String, Path)), request_body(content = Option<ApproveRequest>),
    responses((status = 200, description = "The approval, APPROVED (the operation succeeded) or FAILED (it was refused), with the operation's answer as `result`", body = ApprovalResource)))]
#[tracing::instrument(skip_all, fields(approval_id = %req.param("approval_id")))]
pub async fn approve(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let _: ApproveRequest = req.json()?;
    let model = find_approval(&req).await?;
    may_decide(&req, &model)?;
    let caller = req.caller()?;
    let tx = req.state().db.begin_write().await?;
    let won = decide(
        &tx,
        &model.id,
        &caller.key_id,
        ApprovalStatus::Approved,
        None,
    )
    .await?;
    tx.commit().await?;
    let model = approval::Entity::find_by_id(model.id.as_str())
        .one(&req.state().db.conn)
        .await?
        .ok_or_else(|| ApiError::not_found("approval", &model.id))?;
    // Approve sent again for one whose carrying out was cut (a crash, a 503) carries it on:
    // by its approver at once, by any key that may decide it once the carrying out's claim
    // has lapsed (`idempotency.lock_timeout_ms`; before, the decision is simply closed to
    // them), and only while the operation's record is kept (`idempotency.retention_seconds`
    // from the decision). The operation's own Idempotency-Key keeps it to one run.
    let settings = &req.state().settings.idempotency;
    let since = model.decided_at.map(|at| time::now() - at);
    let lapsed =
        since.is_some_and(|s| s >= chrono::Duration::milliseconds(settings.lock_timeout_ms as i64));
    let kept =
        since.is_some_and(|s| s < chrono::Duration::seconds(settings.retention_seconds as i64));
    let own = model.decided_by_key_id.as_deref() == Some(caller.key_id.as_str());
    let resumable = model.status == ApprovalStatus::Approved
        && model.result_status.is_none()
        && kept
        && (own || lapsed);
    if !won && !resumable {
        return Err(closed(&req, &model).await);
    }
    carry::finish(&req, model).await
}

/// Reject a PENDING approval with a reason: nothing is carried out.
#[utoipa::path(post, path = "/approvals/{approval_id}/reject", operation_id = "rejectApproval", tag = "approvals",
    params(("approval_id" = String, Path)), request_body = RejectRequest,
    responses((status = 200, description = "The approval, REJECTED; the request is never carried out", body = ApprovalResource)))]
#[tracing::instrument(skip_all, fields(approval_id = %req.param("approval_id")))]
pub async fn reject(req: ApiRequest) -> Result<HttpResponse, ApiError> {
    let body: RejectRequest = req.json()?;
    let mut errors = Vec::new();
    match body.reason.as_deref() {
        Some(reason) if !reason.trim().is_empty() => {
            crate::http::body::check_text(&mut errors, "reason", Some(reason), REASON_MAX);
        }
        _ => errors.push(FieldError::new(
            "reason",
            "required: why the request is refused (1 to 1000 characters)",
        )),
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let reason = body.reason.unwrap_or_default().trim().to_owned();
    let model = find_approval(&req).await?;
    may_decide(&req, &model)?;
    let caller = req.caller()?;
    let now = time::now();
    let tx = req.state().db.begin_write().await?;
    let won = decide(
        &tx,
        &model.id,
        &caller.key_id,
        ApprovalStatus::Rejected,
        Some(&reason),
    )
    .await?;
    if !won {
        drop(tx);
        return Err(closed(&req, &model).await);
    }
    let model = approval::Entity::find_by_id(model.id.as_str())
        .one(&*tx)
        .await?
        .ok_or_else(|| ApiError::not_found("approval", &model.id))?;
    events::insert_events(&tx, vec![approval_event("approval.rejected", &model)]).await?;
    let record = AuditRecord::new("APPROVAL_REJECTED", "approval", &model.id).details(json!({
        "operation": model.operation,
        "resource_id": model.resource_id,
        "reason": reason,
    }));
    let shown = ApprovalResource::new(&model, now);
    req.commit::<_, ApprovalResource>(tx, StatusCode::OK, &shown, None, record)
        .await
}
