//! Execution benchmark: a run of 100,000 payouts from execute to every payout terminal, with an
//! unlimited withdrawal rate and zero settlement delay at the sandbox, against the release
//! binary as a separate process (so its peak memory is the service's alone). Prints figures;
//! asserts nothing.
//!
//! ```sh
//! cargo bench --bench execution                          # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench execution
//! ```
//! `PAYROLL_BENCH_PAYOUTS` changes the count (default 100000).

mod common;

use common::{fresh_schema, peak_mb, spawn_server, wait_ready};

use std::time::{Duration, Instant};

use payroll::{config::Settings, http::auth};
use serde_json::{Value, json};

fn main() {
    let count: usize = std::env::var("PAYROLL_BENCH_PAYOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut targets: Vec<(&str, Option<String>)> = vec![("sqlite", None)];
    if let Ok(url) = std::env::var("PAYROLL_BENCH_DATABASE_URL") {
        targets.push(("postgres", Some(url)));
    }
    actix_web::rt::System::new().block_on(async move {
        for (name, url) in targets {
            if let Err(err) = run(name, url, count).await {
                eprintln!("{name}: {err:#}");
                std::process::exit(1);
            }
        }
    });
}

async fn run(name: &str, base_url: Option<String>, count: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::defaults()?;
    settings.data.dir = dir.path().to_path_buf();
    if let Some(url) = &base_url {
        settings.database.url = payroll::config::Secret::new(fresh_schema(url).await?);
    }
    let key = payroll::cli::admin::create_key(&settings, "bench", &auth::all_scope_names(), None)
        .await?
        .key
        .flatten()
        .unwrap_or_default();
    let max_import = (256u64 << 20).to_string();
    let (mut child, port) = spawn_server(
        dir.path(),
        &settings.database_url(),
        &[
            ("PAYROLL__API__MAX_IMPORT_BYTES", max_import.as_str()),
            ("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "0"),
            ("PAYROLL__EXCHANGE__SANDBOX__COMPLETION_DELAY_MS", "0"),
            (
                "PAYROLL__EXCHANGE__SANDBOX__EXCHANGE_INITIAL_USD_CENTS",
                "100000000000000",
            ),
            ("PAYROLL__RUNS__POLL_INTERVAL_MS", "200"),
        ],
    )?;
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(600))
        .finish();
    wait_ready(&client, port).await?;
    let call = |method: &str, path: &str, body: Option<Value>| {
        let client = client.clone();
        let url = format!("{base}{path}");
        let path = path.to_owned();
        let key = key.clone();
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        async move {
            let mut req = client
                .request(method.clone(), url)
                .insert_header(("Authorization", format!("Bearer {key}")));
            if method != awc::http::Method::GET {
                req = req.insert_header(("Idempotency-Key", uuid::Uuid::new_v4().to_string()));
            }
            let mut res = match body {
                Some(b) => req.send_json(&b).await,
                None => req.send().await,
            }
            .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
            let bytes = res.body().limit(1 << 30).await?;
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            anyhow::ensure!(res.status().is_success(), "{path}: {json}");
            Ok::<Value, anyhow::Error>(json)
        }
    };
    let rows: Vec<Value> = (0..count)
        .map(|i| {
            json!({"name": format!("Employee {i}"), "email": format!("employee{i}@example.com"),
                   "salary_usd_cents": 250_000, "network": "BASE", "wallet_address": format!("0x{:040x}", i + 1)})
        })
        .collect();
    call("POST", "/employees/import", Some(json!(rows))).await?;
    let run = call(
        "POST",
        "/payroll-runs",
        Some(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"})),
    )
    .await?;
    let run_id = run["data"]["id"].as_str().unwrap_or_default().to_owned();
    let confirm_started = Instant::now();
    call("POST", &format!("/payroll-runs/{run_id}/confirm"), None).await?;
    let confirm = confirm_started.elapsed();
    call(
        "POST",
        &format!("/payroll-runs/{run_id}/balance-check"),
        None,
    )
    .await?;

    let started = Instant::now();
    call("POST", &format!("/payroll-runs/{run_id}/execute"), None).await?;
    let execute_answer = started.elapsed();
    let summary = loop {
        let run = call("GET", &format!("/payroll-runs/{run_id}"), None).await?;
        if matches!(run["data"]["status"].as_str(), Some("COMPLETED" | "FAILED")) {
            break run["data"]["payout_summary"].clone();
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "run did not finish: {run}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    };
    let elapsed = started.elapsed();
    let peak = peak_mb(child.id());
    child.kill().ok();
    child.wait().ok();
    println!(
        "{name:<9} payouts={count:<7} confirm={:>6.2}s  execute_answer={:>6.2}s  execute_to_terminal={:>7.2}s ({:.0} payouts/s)  peak_rss={peak:.0} MB  summary={summary}",
        confirm.as_secs_f64(),
        execute_answer.as_secs_f64(),
        elapsed.as_secs_f64(),
        count as f64 / elapsed.as_secs_f64(),
    );
    Ok(())
}
