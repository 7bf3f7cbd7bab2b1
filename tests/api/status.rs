//! `GET /status`: the operator page. Who may see it and what, escaping of user data, its charts
//! and a run's own page (in a browser: `browser.rs`).

use std::time::Duration;

use base64::Engine as _;
use serde_json::json;

use crate::{
    helpers::{TestApp, spawn_app_with},
    metrics::funded_run,
    receiver::Receiver,
};

async fn page(app: &TestApp, headers: &[(&str, &str)]) -> crate::helpers::Resp {
    app.send("GET", "/status", None, None, None, headers).await
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

#[actix_web::test]
async fn the_status_page_asks_for_a_key_and_shows_what_its_scopes_allow() {
    let app = spawn_app_with(|s| {
        s.webhooks.allow_http = true;
        s.webhooks.allow_private_networks = true;
    })
    .await;
    let res = app
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/hook?token=s3cret", "events": ["*"]}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let run_id = funded_run(&app, 2, "<script>alert('x')</script> & co").await;

    // An agent's request waiting for a human (CONTRACT §16).
    let session = app
        .post(
            "/api/v1/agent-sessions",
            json!({"description": "agent", "scopes": ["treasury:read", "payroll:execute"]}),
        )
        .await;
    let token = session.data()["token"].as_str().expect("token").to_owned();
    let held = app
        .write_as(
            &token,
            "POST",
            &format!("/api/v1/payroll-runs/{run_id}/execute"),
            json!({}),
        )
        .await;
    assert_eq!(held.status, 202, "{}", held.text);
    let approval_id = held.data()["id"].as_str().expect("approval").to_owned();

    // No key: 401 with a Basic challenge, so a browser prompts for the key.
    let res = page(&app, &[]).await;
    assert_eq!(res.status, 401, "{}", res.text);
    assert_eq!(res.code(), "INVALID_API_KEY");
    assert!(
        res.header("www-authenticate")
            .is_some_and(|h| h.starts_with("Basic ")),
        "{:?}",
        res.headers
    );
    let res = page(&app, &[("Authorization", "Bearer mpk_live_nope")]).await;
    assert_eq!(res.status, 401);

    // A key with every scope, as a Bearer header.
    let res = page(&app, &[("Authorization", &bearer(&app.key))]).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(
        res.header("content-type")
            .is_some_and(|c| c.starts_with("text/html"))
    );
    let html = &res.text;
    assert!(html.contains(&run_id), "{html}");
    assert!(html.contains("0 / 2 done"), "{html}");
    assert!(html.contains("DEPOSITED"), "{html}");
    assert!(html.contains("RunManager"), "{html}");
    assert!(html.contains("Available balance"), "{html}");
    assert!(html.contains("http://127.0.0.1:9/hook"), "{html}");
    assert!(html.contains("Pending approvals"), "{html}");
    assert!(
        html.contains(&format!("data-approval-id=\"{approval_id}\"")),
        "{html}"
    );
    // User data is escaped; secrets in URLs are not shown.
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co"),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
    assert!(
        !html.contains("hunter2") && !html.contains("s3cret"),
        "{html}"
    );

    // The same key as the password of HTTP Basic, as a browser sends it.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("operator:{}", app.key))
    );
    let res = page(&app, &[("Authorization", &basic)]).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.text.contains(&run_id));

    // A key without payroll:read, treasury:read or webhooks:manage sees the actors only.
    let (narrow, _) = app.key_with(&["employees:read"]).await;
    let res = page(&app, &[("Authorization", &bearer(&narrow))]).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(!res.text.contains(&run_id));
    assert!(!res.text.contains("Available balance"));
    assert!(!res.text.contains("127.0.0.1:9"));
    for scope in ["payroll:read", "treasury:read", "webhooks:manage"] {
        assert!(res.text.contains(scope), "{scope}: {}", res.text);
    }
    assert!(res.text.contains("RunManager"));
}

#[actix_web::test]
async fn a_public_status_page_needs_no_key() {
    let app = spawn_app_with(|s| {
        s.server.status_page_public = true;
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
    let run_id = funded_run(&app, 1, "Public").await;
    receiver.wait_for("/ok", 10, |got| !got.is_empty()).await;

    // Its last success shows once the delivery is recorded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let html = loop {
        let res = page(&app, &[]).await;
        assert_eq!(res.status, 200, "{}", res.text);
        if !res.text.contains(">never<") {
            break res.text;
        }
        assert!(std::time::Instant::now() < deadline, "{}", res.text);
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(html.contains(&run_id));
    assert!(html.contains("Available balance"));
    assert!(html.contains(&receiver.url("/ok")), "{html}");
    assert!(html.contains(">ACTIVE<"), "{html}");
}

/// The points of the series named `name` in the page's charts, if it is drawn.
pub fn series_points(html: &str, name: &str) -> Option<usize> {
    html.split("<polyline class=\"series\"")
        .skip(1)
        .find_map(|chart| {
            let title = format!("<title>{name}</title>");
            let end = chart.find("</polyline>")?;
            let one = &chart[..end];
            one.contains(&title).then(|| {
                let points = one.split("points=\"").nth(1).unwrap_or("");
                points
                    .split('"')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .count()
            })
        })
}

#[actix_web::test]
async fn the_last_hour_is_drawn_from_samples_of_the_metrics() {
    let app = spawn_app_with(|s| s.server.status_page_public = true).await;
    let run_id = funded_run(&app, 3, "Charts").await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    // Samples are taken every 10 s from what /metrics exports: within two of them the
    // withdrawals just answered are drawn.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let html = loop {
        let res = page(&app, &[]).await;
        assert_eq!(res.status, 200, "{}", res.text);
        if series_points(&res.text, "accepted").is_some()
            && series_points(&res.text, "up").is_some()
        {
            break res.text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no chart drawn: {}",
            res.text
        );
        actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(html.contains("<h2>Last hour</h2>"));
    assert_eq!(html.matches("<svg role=\"img\"").count(), 8, "{html}");
    assert!(html.contains("Withdrawals answered, by outcome"));
    assert!(!html.contains("<script"));
}

#[actix_web::test]
async fn a_run_has_its_own_page() {
    let app = spawn_app_with(|s| {
        s.exchange.withdrawals_per_second = 50;
        s.exchange.burst = 50;
    })
    .await;
    let run_id = funded_run(&app, 3, "Own page").await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    let auth = bearer(&app.key);
    let path = format!("/status/runs/{run_id}");
    // The run rows of /status link here.
    let status = page(&app, &[("Authorization", &auth)]).await;
    assert!(
        status.text.contains(&format!("href=\"{path}\"")),
        "{}",
        status.text
    );
    let res = app
        .send("GET", &path, None, None, None, &[("Authorization", &auth)])
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(
        res.header("content-security-policy"),
        Some(payroll::routes::html::CONTENT_SECURITY_POLICY)
    );
    let html = &res.text;
    assert!(html.contains("3 / 3 done"), "{html}");
    assert!(html.contains("<table id=\"job\">"), "{html}");
    assert!(html.contains("payroll.run.completed"), "{html}");
    assert!(
        html.contains("No stuck payouts") || html.contains("id=\"stuck\""),
        "{html}"
    );
    assert_eq!(html.matches("<svg role=\"img\"").count(), 2, "{html}");
    assert!(series_points(html, "completed").is_some(), "{html}");
    assert!(html.contains("completed: 3 payouts"), "{html}");
    assert!(series_points(html, "limit").is_some(), "{html}");
    assert!(!html.contains("<script"));
    // Same access rule as /status: no key, a key without payroll:read, an unknown run.
    let res = app.send("GET", &path, None, None, None, &[]).await;
    assert_eq!(res.status, 401);
    let (narrow, _) = app.key_with(&["treasury:read"]).await;
    let res = app
        .send(
            "GET",
            &path,
            None,
            None,
            None,
            &[("Authorization", &bearer(&narrow))],
        )
        .await;
    assert_eq!(res.status, 200);
    assert!(res.text.contains("payroll:read"), "{}", res.text);
    assert!(!res.text.contains("3 / 3 done"), "{}", res.text);
    let res = app
        .send(
            "GET",
            "/status/runs/run_nope",
            None,
            None,
            None,
            &[("Authorization", &auth)],
        )
        .await;
    assert_eq!(res.status, 404, "{}", res.text);
}
