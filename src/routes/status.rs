//! `GET /status`: the operator page, server-rendered HTML without scripts. It shows live runs
//! with their progress, the actors of this process, the last hour of its figures as charts, the exchange (balance and withdrawal rate
//! limit) and the webhook endpoints with their health.
//!
//! Access: with `server.status_page_public = true` anyone who reaches the server sees it all.
//! Otherwise it asks for an API key (`Authorization: Bearer …`, or HTTP Basic with the key as
//! password, which a browser prompts for), and each section follows the scope the API asks for
//! the same data: runs `payroll:read`, the exchange `treasury:read`, webhooks
//! `webhooks:manage`; the actor figures need only a valid key. Everything shown is escaped;
//! no secret (webhook secrets, URL credentials or query strings) is rendered.

use std::{fmt::Write as _, time::Duration};

use actix_web::{
    HttpRequest, HttpResponse,
    http::header::{self, HeaderMap, HeaderValue},
    web,
};
use base64::Engine as _;
use chrono::Utc;
use payroll_actors::{
    exchange::actor::{ExchangeState, GetBalances, GetState},
    run::{manager::LiveRuns, store},
    telemetry::{self, CountedSend},
};
use payroll_entities::{Cents, RunStatus, health::Health, payout, payroll_run, time};
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

mod endpoints;
pub mod history;
mod pending;
pub mod run;

use super::html::{escape, page};
use crate::{
    http::{
        auth::{self, Scope},
        callers,
        error::{ApiError, ErrorCode},
        pipeline,
    },
    state::AppState,
};

/// Runs shown at most.
const MAX_RUNS: u64 = 50;
/// How long the page waits for the exchange.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the viewer may see.
struct Sections {
    runs: bool,
    exchange: bool,
    webhooks: bool,
}

/// What the viewer may see, or the answer to give instead: the login prompt for a missing or
/// refused key, the health-only 503 page while the key cannot be checked.
async fn viewer(
    req: &HttpRequest,
    state: &AppState,
) -> Result<Result<Sections, HttpResponse>, ApiError> {
    Ok(Ok(if state.settings.server.status_page_public {
        Sections {
            runs: true,
            exchange: true,
            webhooks: true,
        }
    } else {
        let caller = match authenticate(state, req.headers()).await {
            Ok(caller) => caller,
            Err(err)
                if matches!(
                    err.code,
                    ErrorCode::InvalidApiKey | ErrorCode::ApiKeyExpired
                ) =>
            {
                // A browser shows its login prompt; the key goes in the password field.
                let mut res = HttpResponse::from_error(err);
                res.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Basic realm="payroll status", charset="UTF-8""#),
                );
                return Ok(Err(res));
            }
            // The key cannot be checked while the database is away: the page says so.
            Err(err) if err.code == ErrorCode::ServiceUnavailable => {
                let mut html = String::with_capacity(2048);
                page_head(&mut html);
                render_health(&mut html, state, None);
                html.push_str(
                    "<p class=\"muted\">The API key could not be checked; the rest of the page \
                     shows once the database answers.</p></main></body></html>\n",
                );
                let mut res = page(html);
                *res.status_mut() = actix_web::http::StatusCode::SERVICE_UNAVAILABLE;
                return Ok(Err(res));
            }
            Err(err) => return Err(err),
        };
        Sections {
            runs: auth::grants(&caller.scopes, Scope::PayrollRead),
            exchange: auth::grants(&caller.scopes, Scope::TreasuryRead),
            webhooks: auth::grants(&caller.scopes, Scope::WebhooksManage),
        }
    }))
}

pub async fn status_page(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sections = match viewer(&req, &state).await? {
        Ok(sections) => sections,
        Err(answer) => return Ok(answer),
    };

    let mut html = String::with_capacity(16 * 1024);
    page_head(&mut html);
    let _ = write!(
        html,
        "<p class=\"muted\">Generated {} · refreshes every 10 s</p>",
        escape(&time::format(&time::now()))
    );

    let db_down = state.db.health().unreachable_since().is_some();
    let backlog = if db_down {
        None
    } else {
        email_backlog(&state).await
    };
    if let Some(pending) = backlog {
        // What the chart of the last hour samples between scrapes of /metrics.
        metrics::gauge!("payroll_email_outbox_pending").set(pending as f64);
    }
    render_health(&mut html, &state, backlog);

    html.push_str("<h2>Runs</h2>");
    if db_down {
        database_away(&mut html);
    } else if sections.runs {
        match live_runs(&state).await {
            Ok(runs) => render_runs(&mut html, &runs),
            Err(err) => {
                tracing::warn!(error = %err, "status page: runs not read");
                html.push_str(
                    "<p class=\"error\">The runs could not be read from the database.</p>",
                );
            }
        }
    } else {
        needs_scope(&mut html, Scope::PayrollRead);
    }

    html.push_str("<h2>Stuck payouts</h2>");
    if db_down {
        database_away(&mut html);
    } else if sections.runs {
        match store::stuck_of(&state.db.conn, None, MAX_RUNS).await {
            Ok(stuck) => render_stuck(&mut html, &stuck),
            Err(err) => {
                tracing::warn!(error = %err, "status page: stuck payouts not read");
                html.push_str(
                    "<p class=\"error\">The stuck payouts could not be read from the database.</p>",
                );
            }
        }
    } else {
        needs_scope(&mut html, Scope::PayrollRead);
    }

    html.push_str("<h2>Pending approvals</h2>");
    if db_down {
        database_away(&mut html);
    } else if sections.runs {
        pending::render(&mut html, &state).await;
    } else {
        needs_scope(&mut html, Scope::PayrollRead);
    }

    html.push_str("<h2>Actors</h2>");
    render_actors(&mut html);

    html.push_str("<h2>Last hour</h2>");
    history::render(
        &mut html,
        &history::samples(),
        Utc::now().timestamp_millis(),
    );

    html.push_str("<h2>Exchange</h2>");
    if sections.exchange {
        render_exchange(&mut html, &state).await;
    } else {
        needs_scope(&mut html, Scope::TreasuryRead);
    }

    html.push_str("<h2>Webhook endpoints</h2>");
    if db_down {
        database_away(&mut html);
    } else if sections.webhooks {
        match endpoints::endpoints(&state).await {
            Ok(list) => endpoints::render_endpoints(&mut html, &list),
            Err(err) => {
                tracing::warn!(error = %err, "status page: endpoints not read");
                html.push_str(
                    "<p class=\"error\">The webhook endpoints could not be read from the database.</p>",
                );
            }
        }
    } else {
        needs_scope(&mut html, Scope::WebhooksManage);
    }
    html.push_str("</main></body></html>\n");

    Ok(page(html))
}

/// The database and the mail transport: up, or down since when and why; and the emails
/// waiting in the outbox (`backlog`, when it could be counted).
fn render_health(html: &mut String, state: &AppState, backlog: Option<u64>) {
    html.push_str("<h2>Health</h2><table id=\"health\">");
    let database = state.db.health().state();
    match database.since() {
        None => html
            .push_str("<tr id=\"health-database\"><th>Database</th><td class=\"ok\">ok</td></tr>"),
        Some(since) => {
            let _ = write!(
                html,
                concat!(
                    "<tr id=\"health-database\"><th>Database</th><td class=\"bad\">{label} since {since}",
                    " ({secs} s): {cause}. {refused} are answered 503; work resumes by itself",
                    " when it answers again.</td></tr>"
                ),
                refused = if matches!(database, Health::Unreachable { .. }) {
                    "API requests"
                } else {
                    "Writes"
                },
                label = escape(&database.label().replace('_', " ")),
                since = escape(&time::format(&since)),
                secs = (time::now() - since).num_seconds().max(0),
                cause = escape(database.cause().unwrap_or("")),
            );
        }
    }
    match state.mail_transport.down_since() {
        None => html.push_str(
            "<tr id=\"health-email\"><th>Email transport</th><td class=\"ok\">ok</td></tr>",
        ),
        Some((since, cause)) => {
            let _ = write!(
                html,
                concat!(
                    "<tr id=\"health-email\"><th>Email transport</th><td class=\"bad\">failing since {since}",
                    ": {cause}. Emails wait in the outbox and are sent when it works again.</td></tr>"
                ),
                since = escape(&time::format(&since)),
                cause = escape(&cause),
            );
        }
    }
    if let Some(pending) = backlog {
        let _ = write!(
            html,
            "<tr id=\"health-email-backlog\"><th>Emails waiting</th><td>{pending}</td></tr>"
        );
    }
    html.push_str("</table>");
}

fn database_away(html: &mut String) {
    html.push_str("<p class=\"error\">Not shown: the database is unreachable.</p>");
}

/// Emails in the outbox not yet sent.
async fn email_backlog(state: &AppState) -> Option<u64> {
    use sea_orm::PaginatorTrait as _;
    payroll_entities::email_outbox::Entity::find()
        .filter(
            payroll_entities::email_outbox::Column::Status
                .eq(payroll_entities::EmailStatus::Pending),
        )
        .count(&state.db.conn)
        .await
        .ok()
}

/// A Bearer key, or HTTP Basic with the key as password (any user name).
async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<crate::http::request::Caller, ApiError> {
    let basic_key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, encoded)| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|pair| pair.split_once(':').map(|(_, key)| key.to_owned()));
    let caller = match basic_key {
        Some(key) => {
            let mut bearer = HeaderMap::new();
            let value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ApiError::new(ErrorCode::InvalidApiKey, "The API key is malformed.")
            })?;
            bearer.insert(header::AUTHORIZATION, value);
            callers::authenticate(state, &bearer).await?
        }
        None => callers::authenticate(state, headers).await?,
    };
    pipeline::rate_limit(state, &caller.key_id)?;
    Ok(caller)
}

fn page_head(html: &mut String) {
    html.push_str(concat!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"refresh\" content=\"10\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        "<title>Payroll status</title><style>",
        "body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}",
        "header{background:#1d2330;color:#fff;padding:12px 24px}header h1{margin:0;font-size:20px}",
        "main{padding:8px 24px 24px}h2{font-size:16px;margin:20px 0 8px}",
        "table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}",
        "th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e3e6ea;vertical-align:top}",
        "th{background:#eef0f3;font-weight:600}code{font-size:12px}",
        ".bar{background:#e3e6ea;border-radius:4px;height:10px;width:160px;overflow:hidden}",
        ".bar span{display:block;height:100%;background:#2f9e44}",
        ".muted{color:#6b7280}.error{color:#b42318;font-weight:600}",
        ".ok{color:#2f9e44;font-weight:600}.bad{color:#b42318;font-weight:600}",
        ".charts{display:flex;flex-wrap:wrap;gap:12px}.chart{margin:0;background:#fff;padding:8px;",
        "box-shadow:0 1px 2px #0002;max-width:100%}.chart svg{max-width:100%;height:auto}",
        ".legend{font-size:12px}.key{margin-right:8px;white-space:nowrap}",
        "</style></head><body><header><h1>Payroll status</h1></header><main>",
    ));
}

fn needs_scope(html: &mut String, scope: Scope) {
    let _ = write!(
        html,
        "<p class=\"muted\">Shown to keys with the <code>{}</code> scope.</p>",
        scope.as_str()
    );
}

/// Runs with a live actor in this process, and every run funded or paying out.
async fn live_runs(state: &AppState) -> Result<Vec<payroll_run::Model>, ApiError> {
    let live: Vec<String> = state.runs.counted_send(LiveRuns).await.unwrap_or_default();
    let mut condition = Condition::any().add(payroll_run::Column::Status.is_in([
        RunStatus::Confirmed,
        RunStatus::Deposited,
        RunStatus::PayingOut,
    ]));
    if !live.is_empty() {
        condition = condition.add(payroll_run::Column::Id.is_in(live));
    }
    Ok(payroll_run::Entity::find()
        .filter(condition)
        .order_by_desc(payroll_run::Column::CreatedAt)
        .limit(MAX_RUNS)
        .all(&state.db.conn)
        .await?)
}

fn render_runs(html: &mut String, runs: &[payroll_run::Model]) {
    if runs.is_empty() {
        html.push_str("<p class=\"muted\">No live runs.</p>");
        return;
    }
    html.push_str(concat!(
        "<table id=\"runs\"><tr><th>Run</th><th>Label</th><th>Status</th><th>Progress</th>",
        "<th>Completed</th><th>Failed</th><th>Processing</th><th>Pending</th><th>Cancelled</th></tr>"
    ));
    for run in runs {
        let total = run.pending_count
            + run.processing_count
            + run.completed_count
            + run.failed_count
            + run.cancelled_count;
        let done = run.completed_count + run.failed_count + run.cancelled_count;
        let percent = if total > 0 { done * 100 / total } else { 0 };
        let _ = write!(
            html,
            concat!(
                "<tr class=\"run\" data-run-id=\"{id}\"><td><a href=\"/status/runs/{id}\"><code>{id}</code></a>{test}</td><td>{label}</td>",
                "<td>{status}</td><td><span class=\"progress\">{done} / {total} done</span>",
                "<div class=\"bar\"><span style=\"width:{percent}%\"></span></div></td>",
                "<td>{completed}</td><td>{failed}</td><td>{processing}</td><td>{pending}</td>",
                "<td>{cancelled}</td></tr>"
            ),
            id = escape(&run.id),
            test = if run.is_test_run { " (test)" } else { "" },
            label = escape(run.label.as_deref().unwrap_or("")),
            status = escape(run.status.as_str()),
            done = done,
            total = total,
            percent = percent.clamp(0, 100),
            completed = run.completed_count,
            failed = run.failed_count,
            processing = run.processing_count,
            pending = run.pending_count,
            cancelled = run.cancelled_count,
        );
    }
    html.push_str("</table>");
}

/// Payouts whose outcome nobody knows: an operator checks the exchange and resolves each.
fn render_stuck(html: &mut String, stuck: &[payout::Model]) {
    if stuck.is_empty() {
        html.push_str("<p class=\"muted\">No stuck payouts.</p>");
        return;
    }
    html.push_str(concat!(
        "<p>Check each at the exchange by its client withdrawal id, then ",
        "<code>POST /api/v1/payouts/{payout_id}/resolve</code> ",
        "(<code>payroll payouts resolve</code>).</p>",
        "<table id=\"stuck\"><tr><th>Payout</th><th>Run</th><th>Status</th><th>Stuck since</th>",
        "<th>Sends</th><th>Client withdrawal id</th><th>Amount (USD)</th></tr>"
    ));
    for p in stuck {
        let _ = write!(
            html,
            concat!(
                "<tr class=\"stuck\" data-payout-id=\"{id}\"><td><code>{id}</code></td>",
                "<td><code>{run}</code></td><td>{status}</td><td>{since}</td><td>{sends}</td>",
                "<td><code>{client}</code></td><td>{amount}</td></tr>"
            ),
            id = escape(&p.id),
            run = escape(&p.payroll_run_id),
            status = escape(p.status.as_str()),
            since = escape(&p.stuck_since.as_ref().map(time::format).unwrap_or_default()),
            sends = p.send_count,
            client = escape(p.client_withdrawal_id.as_deref().unwrap_or("")),
            amount = Cents(p.amount_usd_cents).display_usd(),
        );
    }
    html.push_str("</table>");
}

fn render_actors(html: &mut String) {
    html.push_str(concat!(
        "<table id=\"actors\"><tr><th>Actor</th><th>Alive</th>",
        "<th>Mailbox depth</th></tr>"
    ));
    for figures in telemetry::actor_figures() {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            figures.kind.as_str(),
            figures.alive,
            figures.mailbox_depth.max(0)
        );
    }
    html.push_str(concat!(
        "</table><p class=\"muted\">Actors of this process. The mailbox depth counts messages ",
        "sent and not yet picked up.</p>"
    ));
}

async fn render_exchange(html: &mut String, state: &AppState) {
    let _ = write!(
        html,
        "<table id=\"exchange\"><tr><th>Provider</th><td>{}</td></tr>",
        escape(state.exchange_provider)
    );
    let balances =
        actix_web::rt::time::timeout(EXCHANGE_TIMEOUT, state.exchange.counted_send(GetBalances))
            .await;
    match balances {
        Ok(Ok(Ok(balances))) => {
            let _ = write!(
                html,
                "<tr><th>Available balance</th><td>{} USDC</td></tr>",
                balances.available.display_usd()
            );
        }
        Ok(Ok(Err(err))) => {
            tracing::warn!(error = %err, "status page: exchange balance not read");
            html.push_str(
                "<tr><th>Available balance</th><td class=\"error\">The exchange did not answer; see the server log.</td></tr>",
            );
        }
        Ok(Err(_)) | Err(_) => {
            html.push_str(
                "<tr><th>Available balance</th><td class=\"error\">The exchange actor did not answer in time.</td></tr>",
            );
        }
    }
    match actix_web::rt::time::timeout(EXCHANGE_TIMEOUT, state.exchange.counted_send(GetState))
        .await
    {
        Ok(Ok(exchange)) => render_rate_limit(html, &exchange),
        _ => html.push_str(
            "<tr><th>Rate limit</th><td class=\"error\">The exchange actor did not answer in time.</td></tr>",
        ),
    }
    html.push_str("</table>");
}

/// A figure for people: two decimals at most, none when it is whole (the limiter's rate is
/// kept as an interval, so 6 a second reads back as 5.99999…).
fn rounded(x: f64) -> String {
    let r = (x * 100.0).round() / 100.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r}")
    }
}

fn render_rate_limit(html: &mut String, exchange: &ExchangeState) {
    let limit = if exchange.rate_per_second > 0.0 {
        format!(
            "{} of {} tokens available · {} withdrawals per second",
            rounded(exchange.tokens),
            rounded(exchange.burst),
            rounded(exchange.rate_per_second)
        )
    } else {
        "no limit".to_owned()
    };
    let _ = write!(
        html,
        concat!(
            "<tr><th>Rate limit</th><td>{limit}{paused}</td></tr>",
            "<tr><th>Withdrawals waiting for a token</th><td>{queued}</td></tr>",
            "<tr><th>Withdrawals sent since start</th><td>{sent}</td></tr>"
        ),
        limit = escape(&limit),
        paused = if exchange.paused {
            " · <span class=\"bad\">backing off (the exchange said rate limited)</span>"
        } else {
            ""
        },
        queued = exchange.queued,
        sent = exchange.sent,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_rounded_for_people() {
        assert_eq!(rounded(5.999988000024), "6");
        assert_eq!(rounded(2.5), "2.5");
        assert_eq!(rounded(0.333333), "0.33");
    }
}
