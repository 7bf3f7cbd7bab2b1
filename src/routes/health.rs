//! Liveness and readiness, outside `/api/v1` and without auth.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::{http::error::ApiError, state::AppState};

/// The process is alive.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The database answers and the actors run.
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if let Err(err) = state.db.ping().await {
        tracing::warn!(error = %err, "readiness: database unreachable");
        return Err(
            ApiError::unavailable("The database is unreachable.").detail("reason", "database")
        );
    }
    let actors = [
        ("audit writer", state.audit.connected()),
        ("run manager", state.runs.connected()),
        ("exchange actor", state.exchange.connected()),
        ("webhook supervisor", state.webhooks.connected()),
    ];
    if let Some((name, _)) = actors.iter().find(|(_, up)| !up) {
        return Err(ApiError::unavailable(format!("The {name} is not running."))
            .detail("reason", "actors")
            .detail("actor", *name));
    }
    Ok(HttpResponse::Ok().json(json!({
        "status": "ready",
        "database": "ok",
        "actors": "ok",
        "instance": state.instance_id,
    })))
}
