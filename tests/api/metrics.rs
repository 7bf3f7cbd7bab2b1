//! `GET /metrics`: Prometheus text that moves as the service works. The recorder is global to
//! the test process and other tests run beside this one, so figures are compared before and
//! after (they must move), never against absolute values.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use serde_json::json;

use crate::{
    helpers::{TestApp, new_key, spawn_app_with},
    receiver::Receiver,
};

/// One sample: metric name, labels, value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the Prometheus text format strictly: every line is a comment (`# HELP`, `# TYPE`),
/// empty, or `name{label="value",…} value`. Panics on anything else.
pub fn parse_prometheus(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line}"));
                (name, parse_labels(body, line))
            }
        };
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !name.starts_with(|c: char| c.is_ascii_digit()),
            "bad metric name: {line}"
        );
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad label name in {line}"
        );
        assert_eq!(chars.next(), Some('"'), "unquoted label value in {line}");
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => panic!("dangling escape in {line}"),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => panic!("unterminated label value in {line}"),
            }
        }
        labels.insert(key, value);
        match chars.next() {
            Some(',') | None => {}
            Some(c) => panic!("unexpected {c:?} after a label in {line}"),
        }
    }
    labels
}

/// Sum of the samples named `name` whose labels include every pair of `labels`.
pub fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

pub async fn scrape(app: &TestApp) -> (String, Vec<Sample>) {
    let res = app.send("GET", "/metrics", None, None, None, &[]).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(
        res.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{:?}",
        res.header("content-type")
    );
    let samples = parse_prometheus(&res.text);
    (res.text, samples)
}

/// Scrapes until `moved` holds, or panics after `seconds`.
async fn scrape_until(
    app: &TestApp,
    seconds: u64,
    what: &str,
    moved: impl Fn(&[Sample]) -> bool,
) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let (text, samples) = scrape(app).await;
        if moved(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what} did not move:\n{text}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates `n` payees and a DEPOSITED regular run for them; returns the run id.
pub async fn funded_run(app: &TestApp, n: usize, label: &str) -> String {
    for i in 1..=n {
        app.create_employee(
            &format!("Payee {i}"),
            &format!("payee{i}@example.com"),
            1000 * i as i64,
        )
        .await;
    }
    app.fund(1_000_000).await;
    app.deposited_run(
        json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "label": label}),
    )
    .await
}

#[actix_web::test]
async fn metrics_move_as_a_run_is_paid() {
    let app = spawn_app_with(|s| {
        s.webhooks.allow_http = true;
        s.webhooks.allow_private_networks = true;
    })
    .await;
    let receiver = Receiver::start().await;
    let res = app
        .post(
            "/api/v1/webhooks",
            json!({"url": receiver.url("/ok"), "events": ["*"]}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);

    let (_, before) = scrape(&app).await;
    let execute = [
        ("method", "POST"),
        ("route", "/api/v1/payroll-runs/{run_id}/execute"),
        ("status", "200"),
    ];

    let run_id = funded_run(&app, 3, "Metrics").await;
    let exec = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(exec.status, 200, "{}", exec.text);
    app.wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;

    // An idempotent POST sent twice: the second is a replay.
    let idem = new_key();
    let body = serde_json::to_vec(&json!({
        "name": "Replayed Payee",
        "email": "replayed@example.com",
        "salary_usd_cents": 1000,
        "wallet_address": crate::helpers::evm_address("replayed"),
        "network": "BASE"
    }))
    .expect("json");
    let first = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&idem),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    let again = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&idem),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let moved = |after: &[Sample], name: &str, labels: &[(&str, &str)], by: f64| {
        total(after, name, labels) - total(&before, name, labels) >= by
    };
    let after = scrape_until(&app, 20, "emails and webhook deliveries", |s| {
        moved(s, "payroll_emails_total", &[("outcome", "sent")], 3.0)
            && moved(
                s,
                "payroll_webhook_deliveries_total",
                &[("outcome", "succeeded")],
                1.0,
            )
    })
    .await;
    let (text, _) = scrape(&app).await;

    assert!(moved(&after, "payroll_http_requests_total", &execute, 1.0));
    assert!(moved(
        &after,
        "payroll_http_request_duration_seconds_count",
        &[("route", "/api/v1/payroll-runs/{run_id}/execute")],
        1.0
    ));
    assert!(
        total(&after, "payroll_http_request_duration_seconds_bucket", &[]) > 0.0,
        "latency histogram has buckets"
    );
    // Route patterns only: no id of this run appears in any label.
    assert!(!text.contains(&run_id), "a raw path leaked into the labels");

    assert!(moved(
        &after,
        "payroll_withdrawals_total",
        &[("outcome", "accepted")],
        3.0
    ));
    assert!(moved(
        &after,
        "payroll_exchange_rate_limit_wait_seconds_count",
        &[],
        1.0
    ));
    for message in ["RunRequest", "WithdrawalResults"] {
        assert!(
            moved(
                &after,
                "payroll_actor_messages_handled_total",
                &[("actor", "RunActor"), ("message", message)],
                1.0
            ),
            "RunActor {message}"
        );
    }
    assert!(moved(
        &after,
        "payroll_actor_messages_handled_total",
        &[("actor", "ExchangeActor"), ("message", "Submit")],
        1.0
    ));
    assert!(moved(
        &after,
        "payroll_actor_handler_duration_seconds_count",
        &[("actor", "RunManager")],
        1.0
    ));
    assert!(moved(
        &after,
        "payroll_idempotent_replays_total",
        &[("operation", "createEmployee")],
        1.0
    ));
    for actor in [
        "RunManager",
        "ExchangeActor",
        "WebhookSupervisor",
        "Mailer",
        "AuditWriter",
    ] {
        assert!(
            total(&after, "payroll_actors_alive", &[("actor", actor)]) >= 1.0,
            "{actor} alive:\n{text}"
        );
        assert!(
            after.iter().any(|s| s.name == "payroll_actor_mailbox_depth"
                && s.labels.get("actor").map(String::as_str) == Some(actor)),
            "{actor} mailbox depth:\n{text}"
        );
    }
    for gauge in [
        "payroll_webhook_deliveries_pending",
        "payroll_webhook_endpoints_disabled",
        "payroll_email_outbox_pending",
        "payroll_exchange_rate_limit_tokens",
        "payroll_db_pool_max_connections",
    ] {
        assert!(after.iter().any(|s| s.name == gauge), "{gauge}:\n{text}");
    }
    assert!(total(&after, "payroll_db_pool_connections", &[]) >= 1.0);
}

#[actix_web::test]
async fn metrics_need_no_key_and_count_refusals_by_pattern() {
    let app = spawn_app_with(|_| {}).await;
    let (_, before) = scrape(&app).await;
    let res = app
        .send(
            "GET",
            "/api/v1/payroll-runs/run_unknown",
            None,
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(res.status, 401);
    let (text, after) = scrape(&app).await;
    let labels = [
        ("method", "GET"),
        ("route", "/api/v1/payroll-runs/{run_id}"),
        ("status", "401"),
    ];
    assert!(
        total(&after, "payroll_http_requests_total", &labels)
            - total(&before, "payroll_http_requests_total", &labels)
            >= 1.0,
        "{text}"
    );
    assert!(!text.contains("run_unknown"));
}

/// Label values come from closed sets (CONTRACT §13): a thousand requests with made-up methods
/// (and paths no route has) leave the number of series as it was. The service runs as a
/// process of its own, so its series are its own.
#[actix_web::test]
async fn made_up_methods_and_paths_grow_no_series() {
    let setup = crate::process::Setup::on_database(None).await;
    let server = setup.start(1).await;
    let client = awc::Client::default();
    let series = || async {
        let mut res = client
            .get(format!("{}/metrics", server.base))
            .send()
            .await
            .expect("metrics");
        let body = res.body().limit(64 << 20).await.expect("body");
        let text = String::from_utf8_lossy(&body).into_owned();
        let names: std::collections::BTreeSet<String> = text
            .lines()
            // Requests' series; the actors' (message types, a closed set of their own) may
            // gain one as the audit writer's batches fill.
            .filter(|l| l.starts_with("payroll_http_"))
            .filter_map(|l| l.rsplit_once(' ').map(|(name, _)| name.to_owned()))
            .collect();
        (names, text.len())
    };
    let made_up = |i: usize| {
        let method = format!("X{}Y", ulid::Ulid::new().to_string().to_uppercase());
        let path = if i.is_multiple_of(2) {
            "/healthz".to_owned()
        } else {
            format!("/api/v1/nowhere-{i}")
        };
        (method, path)
    };
    let send_made_up = |i: usize| {
        let (method, path) = made_up(i);
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let request = client.request(method, format!("{}{path}", server.base));
        async move {
            let _ = request.send().await;
        }
    };
    // The first ones make the `other` and `unmatched` series.
    for i in 0..4 {
        send_made_up(i).await;
    }
    // A scrape is counted once it is answered: the next shows the series of scrapes.
    series().await;
    let (before, bytes_before) = series().await;
    for i in 0..1000 {
        send_made_up(i).await;
    }
    let (after, bytes_after) = series().await;
    let grown: Vec<&String> = after.difference(&before).collect();
    assert!(grown.is_empty(), "new series: {grown:#?}");
    assert!(
        bytes_after < bytes_before + 4096,
        "{bytes_before} → {bytes_after} bytes"
    );
}
