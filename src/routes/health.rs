//! Liveness and readiness, outside `/api/v1` and without auth.

use actix_web::{HttpResponse, web};
use payroll_entities::{health::Health, time};
use serde_json::json;

use crate::state::AppState;

/// The process is alive (also while the database is away: restarting it would not help).
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The database answers (as its prober last found, at most a second ago) and the actors run;
/// otherwise 503 saying which is not so, and since when.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let health = state.db.health().state();
    let actors = [
        ("audit writer", state.audit.connected()),
        ("run manager", state.runs.connected()),
        ("exchange actor", state.exchange.connected()),
        ("webhook supervisor", state.webhooks.connected()),
    ];
    let stopped = actors.iter().find(|(_, up)| !up).map(|(name, _)| *name);
    let mut body = json!({
        "status": "ready",
        "database": health.label(),
        "actors": stopped.map_or("ok".to_owned(), |name| format!("the {name} is not running")),
        "instance": state.instance_id,
    });
    if health.is_up() && stopped.is_none() {
        return HttpResponse::Ok().json(body);
    }
    body["status"] = json!("unavailable");
    if let Health::Unreachable { since, cause } | Health::RefusingWrites { since, cause, .. } =
        &health
    {
        body["since"] = json!(time::format(since));
        body["cause"] = json!(cause);
    }
    HttpResponse::ServiceUnavailable()
        .insert_header(("Retry-After", "1"))
        .json(body)
}
