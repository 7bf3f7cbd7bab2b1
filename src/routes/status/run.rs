//! `GET /status/runs/{run_id}`: one run for an operator, under the access rule of `/status`
//! (a key with `payroll:read`, unless the page is public): its progress, its payouts by status
//! over time since execute, its send rate against the withdrawal limit, its stuck payouts with
//! what to do, its job and its last 50 events. Server-rendered, no scripts.

use std::{collections::BTreeMap, fmt::Write as _};

use actix_web::{HttpRequest, HttpResponse, web};
use payroll_entities::{PayoutStatus, event, job, payout, payroll_run};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::{
    history::{Chart, render_chart},
    needs_scope, page_head, render_runs, render_stuck, viewer,
};
use crate::{
    http::{auth::Scope, error::ApiError},
    routes::html::{escape, page},
    state::AppState,
};

/// Events shown at most.
const MAX_EVENTS: u64 = 50;
/// Stuck payouts shown at most.
const MAX_STUCK: u64 = 50;
/// Points of each line of the run's charts.
const BUCKETS: i64 = 60;

pub async fn run_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sections = match viewer(&req, &state).await? {
        Ok(sections) => sections,
        Err(answer) => return Ok(answer),
    };
    let run_id = path.into_inner();
    let mut html = String::with_capacity(16 * 1024);
    page_head(&mut html);
    let _ = write!(
        html,
        "<p><a href=\"/status\">← Status</a></p><h2>Run <code>{}</code></h2>",
        escape(&run_id)
    );
    if !sections.runs {
        needs_scope(&mut html, Scope::PayrollRead);
        html.push_str("</main></body></html>\n");
        return Ok(page(html));
    }
    if !payroll_entities::ids::is_well_formed(payroll_entities::ids::IdKind::Run, &run_id) {
        return Err(ApiError::not_found("payroll run", &run_id));
    }
    let conn = &state.db.conn;
    let Some(run) = payroll_run::Entity::find_by_id(run_id.clone())
        .one(conn)
        .await?
    else {
        return Err(ApiError::not_found("payroll run", &run_id));
    };
    render_runs(&mut html, std::slice::from_ref(&run));

    html.push_str("<h2>Job</h2>");
    let job = job::Entity::find()
        .filter(job::Column::PayrollRunId.eq(run.id.clone()))
        .order_by_desc(job::Column::CreatedAt)
        .one(conn)
        .await?;
    match job {
        Some(job) => {
            let _ = write!(
                html,
                "<table id=\"job\"><tr><th>Job</th><td><code>{}</code></td></tr>\
                 <tr><th>Status</th><td>{}</td></tr><tr><th>Payouts</th><td>{} completed, {} failed, \
                 {} processing, {} pending of {}</td></tr><tr><th>Failure</th><td>{}</td></tr></table>",
                escape(&job.id),
                escape(job.status.as_str()),
                job.completed_count,
                job.failed_count,
                job.processing_count,
                job.pending_count,
                job.total,
                escape(job.failed_reason.as_deref().unwrap_or("—")),
            );
        }
        None => html.push_str("<p class=\"muted\">Not executed yet.</p>"),
    }

    html.push_str("<h2>Since execute</h2>");
    match run.executed_at {
        Some(executed) => {
            let rows: Vec<PayoutTimes> = payout::Entity::find()
                .select_only()
                .columns([
                    payout::Column::Status,
                    // The send's stamp, taken as the withdrawal's rate-limit token is (a claim
                    // into the run's window comes earlier, up to a window ahead).
                    payout::Column::LastSentAt,
                    payout::Column::CompletedAt,
                    payout::Column::UpdatedAt,
                ])
                .filter(payout::Column::PayrollRunId.eq(run.id.clone()))
                .into_tuple()
                .all(conn)
                .await?;
            let end = run
                .completed_at
                .unwrap_or_else(chrono::Utc::now)
                .timestamp_millis()
                .max(executed.timestamp_millis() + 1000);
            let limit_per_min = f64::from(state.settings.exchange.withdrawals_per_second) * 60.0;
            render_progress(
                &mut html,
                &rows,
                executed.timestamp_millis(),
                end,
                limit_per_min,
            );
        }
        None => html.push_str("<p class=\"muted\">Not executed yet.</p>"),
    }

    html.push_str("<h2>Stuck payouts</h2>");
    match payroll_actors::run::store::stuck_of(conn, Some(&run.id), MAX_STUCK).await {
        Ok(stuck) => render_stuck(&mut html, &stuck),
        Err(err) => {
            tracing::warn!(run_id = %run.id, error = %err, "status: stuck payouts not read");
            html.push_str("<p class=\"error\">The stuck payouts could not be read now.</p>");
        }
    }

    html.push_str("<h2>Last events</h2>");
    // Event ids sort by time: the walk back from the newest stops at the run's creation.
    let since = ulid::Ulid::from_parts(
        u64::try_from(run.created_at.timestamp_millis() - 1000).unwrap_or(0),
        0,
    );
    let events = event::Entity::find()
        .filter(event::Column::ResourceId.eq(run.id.clone()))
        .filter(event::Column::Id.gte(format!("evt_{since}")))
        .order_by_desc(event::Column::Id)
        .limit(MAX_EVENTS)
        .all(conn)
        .await?;
    if events.is_empty() {
        html.push_str("<p class=\"muted\">No events.</p>");
    } else {
        html.push_str("<table id=\"events\"><tr><th>When</th><th>Event</th><th>Id</th></tr>");
        for e in &events {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape(&payroll_entities::time::format(&e.created_at)),
                escape(&e.event_type),
                escape(&e.id)
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</main></body></html>\n");
    Ok(page(html))
}

type PayoutTimes = (
    PayoutStatus,
    Option<chrono::DateTime<chrono::Utc>>,
    Option<chrono::DateTime<chrono::Utc>>,
    chrono::DateTime<chrono::Utc>,
);

/// Two charts over `[start, end]`: payouts sent, completed and failed so far (cumulative), and
/// sends per minute against the withdrawal limit.
fn render_progress(
    html: &mut String,
    rows: &[PayoutTimes],
    start: i64,
    end: i64,
    limit_per_min: f64,
) {
    let width = ((end - start) / BUCKETS).max(1);
    let bucket = |at: i64| ((at - start) / width).clamp(0, BUCKETS - 1) as usize;
    let mut sent = vec![0f64; BUCKETS as usize];
    let mut completed = vec![0f64; BUCKETS as usize];
    let mut failed = vec![0f64; BUCKETS as usize];
    for (status, sent_at, done, updated) in rows {
        if let Some(at) = sent_at {
            sent[bucket(at.timestamp_millis())] += 1.0;
        }
        match status {
            PayoutStatus::Completed => {
                let at = done.unwrap_or(*updated);
                completed[bucket(at.timestamp_millis())] += 1.0;
            }
            PayoutStatus::Failed => failed[bucket(updated.timestamp_millis())] += 1.0,
            _ => {}
        }
    }
    let at = |i: usize| start + width * (i as i64 + 1);
    let cumulative = |counts: &[f64]| -> Vec<(i64, f64)> {
        let mut total = 0.0;
        counts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                total += c;
                (at(i), total)
            })
            .collect()
    };
    let mut progress = BTreeMap::new();
    progress.insert("sent", cumulative(&sent));
    progress.insert("completed", cumulative(&completed));
    progress.insert("failed", cumulative(&failed));
    let minutes = width as f64 / 60_000.0;
    let mut rate = BTreeMap::new();
    rate.insert(
        "sent",
        sent.iter()
            .enumerate()
            .map(|(i, c)| (at(i), c / minutes))
            .collect(),
    );
    if limit_per_min > 0.0 {
        rate.insert("limit", vec![(start, limit_per_min), (end, limit_per_min)]);
    }
    html.push_str("<div class=\"charts\">");
    let window = (start, end, "execute");
    render_chart(
        html,
        &Chart {
            title: "Payouts by status",
            unit: "payouts",
        },
        &progress,
        window,
    );
    render_chart(
        html,
        &Chart {
            title: "Sends against the limit",
            unit: "/min",
        },
        &rate,
        window,
    );
    html.push_str("</div>");
}
