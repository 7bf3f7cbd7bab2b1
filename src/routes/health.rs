//! Liveness and readiness, outside `/api/v1` and without auth.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::{error::ApiError, state::AppState};

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
    if !state.audit.connected() {
        return Err(
            ApiError::unavailable("The audit writer is not running.").detail("reason", "actors")
        );
    }
    Ok(HttpResponse::Ok().json(json!({"status": "ready", "database": "ok", "actors": "ok"})))
}
