//! Every route of the API in one table: method, path, operationId, required scopes and body
//! kind. The gate authorises from it, `configure` registers from it, and the OpenAPI document
//! is checked against it. Run routes exist under `/payroll-runs` and the `/runs` alias.

pub mod agent_sessions;
pub mod api_keys;
pub mod approvals;
pub mod audit_log;
pub mod docs;
pub mod employees;
pub mod events;
pub mod health;
pub mod html;
pub mod jobs;
pub mod payouts;
pub mod prometheus;
pub mod runs;
pub mod status;
pub mod treasury;
pub mod webhooks;

use actix_web::{HttpRequest, http::Method, web};
use serde_json::json;

use crate::http::{
    auth::Scope,
    error::{ApiError, ErrorCode},
    route::{Access, BodyKind, PathParams, RouteSpec, Segments, any, match_segments, segments},
};

use Scope::*;

#[rustfmt::skip]
pub static ROUTES: &[RouteSpec] = &[
    RouteSpec { method: Method::GET, path: "/openapi.json", operation: "getOpenApiDocument", access: Access::Public, body: BodyKind::None, handler: |r| r.to(docs::openapi_document) },
    RouteSpec { method: Method::GET, path: "/docs", operation: "getApiDocs", access: Access::Public, body: BodyKind::None, handler: |r| r.to(docs::docs_page) },
    RouteSpec { method: Method::GET, path: "/api-keys", operation: "listApiKeys", access: any(&[KeysManage]), body: BodyKind::None, handler: |r| r.to(api_keys::list) },
    RouteSpec { method: Method::POST, path: "/api-keys", operation: "createApiKey", access: any(&[KeysManage]), body: BodyKind::Json, handler: |r| r.to(api_keys::create) },
    RouteSpec { method: Method::GET, path: "/api-keys/current", operation: "getCurrentApiKey", access: Access::AnyKey, body: BodyKind::None, handler: |r| r.to(api_keys::current) },
    RouteSpec { method: Method::GET, path: "/api-keys/{key_id}", operation: "getApiKey", access: any(&[KeysManage]), body: BodyKind::None, handler: |r| r.to(api_keys::get) },
    RouteSpec { method: Method::DELETE, path: "/api-keys/{key_id}", operation: "revokeApiKey", access: any(&[KeysManage]), body: BodyKind::Json, handler: |r| r.to(api_keys::revoke) },
    RouteSpec { method: Method::POST, path: "/api-keys/{key_id}/rotate", operation: "rotateApiKey", access: any(&[KeysManage]), body: BodyKind::Json, handler: |r| r.to(api_keys::rotate) },
    RouteSpec { method: Method::GET, path: "/employees", operation: "listEmployees", access: any(&[EmployeesRead]), body: BodyKind::None, handler: |r| r.to(employees::list) },
    RouteSpec { method: Method::POST, path: "/employees", operation: "createEmployee", access: any(&[EmployeesWrite]), body: BodyKind::Json, handler: |r| r.to(employees::create) },
    RouteSpec { method: Method::POST, path: "/employees/import", operation: "importEmployees", access: any(&[EmployeesWrite]), body: BodyKind::Import, handler: |r| r.to(employees::bulk_import::import) },
    RouteSpec { method: Method::GET, path: "/employees/{employee_id}", operation: "getEmployee", access: any(&[EmployeesRead]), body: BodyKind::None, handler: |r| r.to(employees::get) },
    RouteSpec { method: Method::PATCH, path: "/employees/{employee_id}", operation: "updateEmployee", access: any(&[EmployeesWrite]), body: BodyKind::Json, handler: |r| r.to(employees::update) },
    RouteSpec { method: Method::DELETE, path: "/employees/{employee_id}", operation: "deactivateEmployee", access: any(&[EmployeesWrite]), body: BodyKind::Json, handler: |r| r.to(employees::deactivate) },
    RouteSpec { method: Method::POST, path: "/employees/{employee_id}/wallet-approvals", operation: "approveEmployeeWallet", access: any(&[PayrollApprove]), body: BodyKind::Json, handler: |r| r.to(employees::approve_wallet) },
    RouteSpec { method: Method::GET, path: "/payroll-runs", operation: "listPayrollRuns", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(runs::list) },
    RouteSpec { method: Method::POST, path: "/payroll-runs", operation: "createPayrollRun", access: any(&[PayrollWrite]), body: BodyKind::Json, handler: |r| r.to(runs::create) },
    RouteSpec { method: Method::GET, path: "/payroll-runs/{run_id}", operation: "getPayrollRun", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(runs::get) },
    RouteSpec { method: Method::GET, path: "/payroll-runs/{run_id}/payouts", operation: "getPayrollRunPayouts", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(runs::payouts) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/balance-check", operation: "checkPayrollRunBalance", access: any(&[TreasuryRead]), body: BodyKind::Json, handler: |r| r.to(runs::balance_check) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/confirm", operation: "confirmPayrollRun", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(runs::confirm) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/execute", operation: "executePayrollRun", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(runs::execute) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/sync", operation: "syncPayrollRun", access: any(&[PayrollRead, PayrollWrite, PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(runs::sync) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/retry-failed", operation: "retryFailedPayouts", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(runs::retry_failed) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/cancel", operation: "cancelPayrollRun", access: any(&[PayrollWrite, PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(runs::cancel) },
    RouteSpec { method: Method::POST, path: "/payroll-runs/{run_id}/archive", operation: "archivePayrollRun", access: any(&[PayrollWrite]), body: BodyKind::Json, handler: |r| r.to(runs::archive) },
    RouteSpec { method: Method::GET, path: "/payouts/{payout_id}", operation: "getPayout", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(payouts::get) },
    RouteSpec { method: Method::POST, path: "/payouts/{payout_id}/retry", operation: "retryPayout", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(payouts::retry) },
    RouteSpec { method: Method::POST, path: "/payouts/{payout_id}/cancel", operation: "cancelPayout", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(payouts::cancel) },
    RouteSpec { method: Method::POST, path: "/payouts/{payout_id}/resolve", operation: "resolvePayout", access: any(&[PayrollExecute]), body: BodyKind::Json, handler: |r| r.to(payouts::resolve) },
    RouteSpec { method: Method::GET, path: "/jobs/{job_id}", operation: "getJob", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(jobs::get) },
    RouteSpec { method: Method::GET, path: "/treasury/balance", operation: "getTreasuryBalance", access: any(&[TreasuryRead]), body: BodyKind::None, handler: |r| r.to(treasury::balance) },
    RouteSpec { method: Method::POST, path: "/treasury/transfers", operation: "createTreasuryTransfer", access: any(&[TreasuryWrite]), body: BodyKind::Json, handler: |r| r.to(treasury::create_transfer) },
    RouteSpec { method: Method::GET, path: "/treasury/transfers", operation: "listTreasuryTransfers", access: any(&[TreasuryRead]), body: BodyKind::None, handler: |r| r.to(treasury::list_transfers) },
    RouteSpec { method: Method::POST, path: "/webhooks", operation: "createWebhook", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::create) },
    RouteSpec { method: Method::GET, path: "/webhooks", operation: "listWebhooks", access: any(&[WebhooksManage]), body: BodyKind::None, handler: |r| r.to(webhooks::list) },
    RouteSpec { method: Method::GET, path: "/webhooks/{webhook_id}", operation: "getWebhook", access: any(&[WebhooksManage]), body: BodyKind::None, handler: |r| r.to(webhooks::get) },
    RouteSpec { method: Method::DELETE, path: "/webhooks/{webhook_id}", operation: "deleteWebhook", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::delete) },
    RouteSpec { method: Method::POST, path: "/webhooks/{webhook_id}/enable", operation: "enableWebhook", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::enable) },
    RouteSpec { method: Method::POST, path: "/webhooks/{webhook_id}/rotate-secret", operation: "rotateWebhookSecret", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::rotate_secret) },
    RouteSpec { method: Method::POST, path: "/webhooks/{webhook_id}/test", operation: "testWebhook", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::test) },
    RouteSpec { method: Method::GET, path: "/webhooks/{webhook_id}/deliveries", operation: "listWebhookDeliveries", access: any(&[WebhooksManage]), body: BodyKind::None, handler: |r| r.to(webhooks::deliveries) },
    RouteSpec { method: Method::POST, path: "/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", operation: "retryWebhookDelivery", access: any(&[WebhooksManage]), body: BodyKind::Json, handler: |r| r.to(webhooks::retry_delivery) },
    RouteSpec { method: Method::GET, path: "/events", operation: "listEvents", access: any(&[PayrollRead]), body: BodyKind::None, handler: |r| r.to(events::list) },
    RouteSpec { method: Method::POST, path: "/agent-sessions", operation: "createAgentSession", access: Access::AnyKey, body: BodyKind::Json, handler: |r| r.to(agent_sessions::create) },
    RouteSpec { method: Method::GET, path: "/agent-sessions", operation: "listAgentSessions", access: Access::AnyKey, body: BodyKind::None, handler: |r| r.to(agent_sessions::list) },
    RouteSpec { method: Method::GET, path: "/agent-sessions/{session_id}", operation: "getAgentSession", access: Access::AnyKey, body: BodyKind::None, handler: |r| r.to(agent_sessions::get) },
    RouteSpec { method: Method::DELETE, path: "/agent-sessions/{session_id}", operation: "revokeAgentSession", access: Access::AnyKey, body: BodyKind::Json, handler: |r| r.to(agent_sessions::revoke) },
    RouteSpec { method: Method::GET, path: "/approvals", operation: "listApprovals", access: any(&[PayrollRead, PayrollApprove]), body: BodyKind::None, handler: |r| r.to(approvals::list) },
    RouteSpec { method: Method::GET, path: "/approvals/{approval_id}", operation: "getApproval", access: any(&[PayrollRead, PayrollApprove]), body: BodyKind::None, handler: |r| r.to(approvals::get) },
    RouteSpec { method: Method::POST, path: "/approvals/{approval_id}/approve", operation: "approveApproval", access: any(&[PayrollApprove]), body: BodyKind::Json, handler: |r| r.to(approvals::approve) },
    RouteSpec { method: Method::POST, path: "/approvals/{approval_id}/reject", operation: "rejectApproval", access: any(&[PayrollApprove]), body: BodyKind::Json, handler: |r| r.to(approvals::reject) },
    RouteSpec { method: Method::GET, path: "/audit-log", operation: "listAuditEntries", access: any(&[AuditRead]), body: BodyKind::None, handler: |r| r.to(audit_log::list) },
];

/// The route for `method` and `path`, preferring literal segments over parameters;
/// 404 `ROUTE_NOT_FOUND` or 405 `METHOD_NOT_ALLOWED` otherwise.
pub fn match_route(
    method: &Method,
    path: &str,
) -> Result<(&'static RouteSpec, PathParams), ApiError> {
    // A path matches the most literal pattern it can: `/employees/import` is that route, not
    // the employee `import`, for every method.
    let split: Vec<&str> = path.split('/').collect();
    let mut matches: Vec<(&'static RouteSpec, PathParams)> = Vec::new();
    for (spec, (canonical, alias)) in ROUTES.iter().zip(patterns()) {
        let params = match_segments(canonical, &split)
            .or_else(|| alias.as_deref().and_then(|a| match_segments(a, &split)));
        if let Some(params) = params {
            matches.push((spec, params));
        }
    }
    let fewest = matches.iter().map(|(_, p)| p.len()).min().unwrap_or(0);
    matches.retain(|(_, p)| p.len() == fewest);
    let mut allowed: Vec<&str> = Vec::new();
    for (spec, params) in matches {
        if spec.method == *method {
            return Ok((spec, params));
        }
        if !allowed.contains(&spec.method.as_str()) {
            allowed.push(spec.method.as_str());
        }
    }
    if allowed.is_empty() {
        Err(route_not_found(method.as_str(), &format!("/api/v1{path}")))
    } else {
        Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not allowed on this path."),
        )
        .detail("allowed_methods", json!(allowed)))
    }
}

/// Each route's pattern split at `/`, and its alias's ([`RouteSpec::alias`]), in the order of
/// [`ROUTES`]. Made once per process; the alias patterns live as long as it.
fn patterns() -> &'static [(Segments, Option<Segments>)] {
    static PATTERNS: std::sync::LazyLock<Vec<(Segments, Option<Segments>)>> =
        std::sync::LazyLock::new(|| {
            ROUTES
                .iter()
                .map(|spec| {
                    let alias = spec
                        .alias()
                        .map(|alias| segments(Box::leak(alias.into_boxed_str())));
                    (segments(spec.path), alias)
                })
                .collect()
        });
    &PATTERNS
}

fn route_not_found(method: &str, path: &str) -> ApiError {
    ApiError::new(
        ErrorCode::RouteNotFound,
        format!("No route {method} {path}."),
    )
    .detail("method", method)
    .detail("path", path)
}

/// Registers every route (and every alias) under `/api/v1`, one resource per path, in one
/// scope per first segment (`/payroll-runs`, `/employees`, …): a request is matched against
/// the patterns of its own scope only, not of the whole API.
pub fn configure(cfg: &mut web::ServiceConfig) {
    crate::http::route::install_matcher(match_route);
    let mut paths: Vec<String> = Vec::new();
    for spec in ROUTES {
        for path in std::iter::once(spec.path.to_owned()).chain(spec.alias()) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    // Literal paths first, so `/employees/import` is not taken for `/employees/{employee_id}`.
    paths.sort_by_key(|p| p.matches('{').count());
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for path in paths {
        let (first, rest) = split_first_segment(&path);
        match groups.iter_mut().find(|(g, _)| g == first) {
            Some((_, rests)) => rests.push(rest.to_owned()),
            None => groups.push((first.to_owned(), vec![rest.to_owned()])),
        }
    }
    let mut api = web::scope("/api/v1");
    for (first, rests) in groups {
        let mut scope = web::scope(&first);
        for rest in rests {
            let path = format!("{first}{rest}");
            let mut resource = web::resource(rest.as_str());
            for spec in ROUTES {
                if spec.path == path || spec.alias().as_deref() == Some(path.as_str()) {
                    resource = resource.route((spec.handler)(web::method(spec.method.clone())));
                }
            }
            scope = scope.service(resource);
        }
        api = api.service(scope);
    }
    cfg.service(api);
}

/// `/payroll-runs/{run_id}/payouts` → (`/payroll-runs`, `/{run_id}/payouts`); the first
/// segment is always literal.
fn split_first_segment(path: &str) -> (&str, &str) {
    let end = path[1..].find('/').map_or(path.len(), |i| i + 1);
    path.split_at(end)
}

/// Answers every request no route took.
pub async fn not_found(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(route_not_found(req.method().as_str(), req.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_with_params_and_aliases() {
        let (spec, params) = match_route(&Method::GET, "/payroll-runs/run_1").expect("matches");
        assert_eq!(spec.operation, "getPayrollRun");
        assert_eq!(params, vec![("run_id", "run_1".to_owned())]);
        let (spec, _) = match_route(&Method::GET, "/runs/run_1/payouts").expect("alias");
        assert_eq!(spec.operation, "getPayrollRunPayouts");
        let (spec, _) = match_route(&Method::POST, "/employees/import").expect("literal");
        assert_eq!(spec.operation, "importEmployees");
    }

    #[test]
    fn unknown_routes_and_methods() {
        let err = match_route(&Method::GET, "/nope").expect_err("404");
        assert_eq!(err.code, ErrorCode::RouteNotFound);
        let err = match_route(&Method::PUT, "/employees").expect_err("405");
        assert_eq!(err.code, ErrorCode::MethodNotAllowed);
        assert_eq!(err.details["allowed_methods"], json!(["GET", "POST"]));
        assert!(match_route(&Method::GET, "/employees/").is_err());
        // A literal segment is its own resource: its methods, not those of `{employee_id}`.
        let err = match_route(&Method::OPTIONS, "/employees/import").expect_err("405");
        assert_eq!(err.details["allowed_methods"], json!(["POST"]));
        let err = match_route(&Method::DELETE, "/api-keys/current").expect_err("405");
        assert_eq!(err.details["allowed_methods"], json!(["GET"]));
    }

    #[test]
    fn operation_ids_are_unique_camel_case() {
        let mut seen = std::collections::HashSet::new();
        for spec in ROUTES {
            assert!(seen.insert(spec.operation), "duplicate {}", spec.operation);
            assert!(
                spec.operation
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase())
            );
        }
    }
}
