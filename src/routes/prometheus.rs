//! `GET /metrics`: the process's metrics in the Prometheus text format, outside `/api/v1` and
//! without a key (like `/healthz`; the server listens on loopback by default). Figures that
//! live in the database (pending webhook deliveries, the email outbox, disabled endpoints)
//! are counted at scrape time, a few indexed COUNTs per scrape rather than a write per payout.
//! The runs paying out now have series of their own ([`runs`]).

mod runs;

use actix_web::{HttpResponse, web};
use payroll_entities::{
    DeliveryStatus, EmailStatus, PayoutStatus, RunStatus, WebhookStatus, email_outbox,
    health::Health, payout, payroll_run, webhook_delivery, webhook_endpoint,
};
use sea_orm::{
    ColumnTrait, DatabaseBackend, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect,
};

use crate::{http::error::ApiError, state::AppState, telemetry};

pub async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let Some(handle) = telemetry::metrics_handle() else {
        return Err(ApiError::unavailable(
            "Metrics are not available: another metrics recorder is installed.",
        ));
    };
    let database_read = refresh(&state).await;
    let mut text = handle.render();
    if database_read {
        match runs::render(&state.db.conn).await {
            Ok(runs) => text.push_str(&runs),
            Err(err) => tracing::debug!(error = %err, "metrics: runs paying out not read"),
        }
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}

/// Brings the figures of this process up to date without a query: database up (as the health
/// watch knows it), the pool's and the mailboxes'.
pub fn refresh_in_process(state: &AppState) {
    let health = state.db.health().state();
    metrics::gauge!("payroll_database_up").set(if health.is_up() { 1.0 } else { 0.0 });
    refresh_pool_gauges(state);
    payroll_actors::telemetry::publish_mailbox_depths();
}

/// Brings the figures read at scrape time up to date: those of this process and those kept in
/// the database. False when the database's could not be read (they keep their last value).
pub async fn refresh(state: &AppState) -> bool {
    refresh_in_process(state);
    let health = state.db.health().state();
    // While the database is unreachable the figures kept there keep their last value; the
    // scrape is answered at once rather than after the pool's timeout.
    if matches!(health, Health::Unreachable { .. }) {
        return false;
    }
    match refresh_database_gauges(state).await {
        Ok(()) => true,
        Err(err) => {
            // The rest of the figures are still worth having; these keep their last value.
            tracing::debug!(error = %err, "metrics: database figures not refreshed");
            false
        }
    }
}

async fn refresh_database_gauges(state: &AppState) -> Result<(), sea_orm::DbErr> {
    let conn = &state.db.conn;
    let pending_deliveries = webhook_delivery::Entity::find()
        .filter(webhook_delivery::Column::Status.eq(DeliveryStatus::Pending))
        .count(conn)
        .await?;
    let disabled_endpoints = webhook_endpoint::Entity::find()
        .filter(webhook_endpoint::Column::Status.eq(WebhookStatus::Disabled))
        .filter(webhook_endpoint::Column::DeletedAt.is_null())
        .count(conn)
        .await?;
    let pending_emails = email_outbox::Entity::find()
        .filter(email_outbox::Column::Status.eq(EmailStatus::Pending))
        .count(conn)
        .await?;
    metrics::gauge!("payroll_webhook_deliveries_pending").set(pending_deliveries as f64);
    metrics::gauge!("payroll_webhook_endpoints_disabled").set(disabled_endpoints as f64);
    metrics::gauge!("payroll_email_outbox_pending").set(pending_emails as f64);
    // A payout is stuck only while its run pays: the unfinished payouts of the runs paying
    // out, through the index on run and status, never the history of every run paid. (No
    // index names stuck_since: writing it must stay a heap-only update on PostgreSQL.)
    let stuck = payout::Entity::find()
        .filter(payout::Column::StuckSince.is_not_null())
        .filter(payout::Column::Status.is_in([PayoutStatus::Pending, PayoutStatus::Processing]))
        .filter(
            payout::Column::PayrollRunId.in_subquery(
                sea_orm::sea_query::Query::select()
                    .column(payroll_run::Column::Id)
                    .from(payroll_run::Entity)
                    .and_where(payroll_run::Column::Status.eq(RunStatus::PayingOut))
                    .to_owned(),
            ),
        )
        .count(conn)
        .await?;
    metrics::gauge!("payroll_payouts_stuck").set(stuck as f64);
    let by_status: Vec<(RunStatus, i64)> = payroll_run::Entity::find()
        .select_only()
        .column(payroll_run::Column::Status)
        .column_as(payroll_run::Column::Id.count(), "runs")
        .group_by(payroll_run::Column::Status)
        .into_tuple()
        .all(conn)
        .await?;
    for status in RunStatus::ALL {
        let runs = by_status
            .iter()
            .find(|(s, _)| s == status)
            .map_or(0, |(_, n)| *n);
        metrics::gauge!("payroll_runs", "status" => status.as_str()).set(runs as f64);
    }
    Ok(())
}

/// Connections of the database pool, open and idle, and its configured maximum.
fn refresh_pool_gauges(state: &AppState) {
    let conn = &state.db.conn;
    let (open, idle) = match conn.get_database_backend() {
        DatabaseBackend::Sqlite => {
            let pool = conn.get_sqlite_connection_pool();
            (pool.size(), pool.num_idle())
        }
        DatabaseBackend::Postgres => {
            let pool = conn.get_postgres_connection_pool();
            (pool.size(), pool.num_idle())
        }
        _ => return,
    };
    let idle = u32::try_from(idle).unwrap_or(u32::MAX).min(open);
    metrics::gauge!("payroll_db_pool_connections", "state" => "idle").set(f64::from(idle));
    metrics::gauge!("payroll_db_pool_connections", "state" => "in_use").set(f64::from(open - idle));
    metrics::gauge!("payroll_db_pool_max_connections")
        .set(f64::from(state.settings.database.max_connections));
}
