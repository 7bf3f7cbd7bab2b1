//! Volume benchmark: a payroll of 100,000 payouts measured against the database's own floor,
//! measured in the same run on the same machine, so the ratios hold from one day to the next.
//!
//! The floor: 100,000 rows of a payout-like table inserted in one transaction, then every row
//! updated twice in 64-row transactions (claimed, then completed), with the service's own
//! connection settings (SQLite WAL, `synchronous=NORMAL`). The service: the release binary as a
//! separate process (unthrottled sandbox, no completion delay) imports 100,000 employees as
//! CSV, creates a run of 100,000 payouts, exports them as CSV, and pays them to terminal; its
//! peak resident memory (`VmHWM`) is read at the end. Prints figures and targets; asserts
//! nothing.
//!
//! ```sh
//! cargo bench --bench volume                             # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench volume
//! ```
//! `PAYROLL_BENCH_PAYOUTS` changes the count (default 100000), `PAYROLL_BENCH_ROUNDS` runs it
//! several times (default 1), `PAYROLL_BENCH_ONLY=sqlite` or `postgres` measures one database,
//! and `PAYROLL_BENCH_TRACE=1` prints the payout summary while the run executes.

mod common;
#[path = "common/floor.rs"]
mod floor;

use common::{fresh_schema, peak_mb, spawn_server, wait_ready};
use floor::floor;

use std::time::{Duration, Instant};

use payroll::{config::Settings, http::auth};
use payroll_entities::db::Db;
use serde_json::{Value, json};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let count = env_number("PAYROLL_BENCH_PAYOUTS", 100_000);
    let rounds = env_number("PAYROLL_BENCH_ROUNDS", 1);
    let mut targets: Vec<(&str, Option<String>)> = vec![("sqlite", None)];
    if let Ok(url) = std::env::var("PAYROLL_BENCH_DATABASE_URL") {
        targets.push(("postgres", Some(url)));
    }
    if let Ok(only) = std::env::var("PAYROLL_BENCH_ONLY") {
        targets.retain(|(name, _)| *name == only);
    }
    actix_web::rt::System::new().block_on(async move {
        for round in 1..=rounds {
            for (name, url) in &targets {
                println!("\n## {name}, {count} payouts, round {round} of {rounds}\n");
                if let Err(err) = run(name, url.clone(), count).await {
                    eprintln!("{name}: {err:#}");
                    std::process::exit(1);
                }
            }
        }
    });
}

async fn run(name: &str, base_url: Option<String>, count: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let floor_seconds = {
        let url = match &base_url {
            Some(url) => fresh_schema(url).await?,
            None => format!(
                "sqlite://{}/floor.db?mode=rwc",
                dir.path().to_string_lossy()
            ),
        };
        let db = Db::connect(&url, 4).await?;
        let seconds = floor(&db, count).await?;
        db.conn.clone().close().await.ok();
        seconds
    };

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
    let max_rows = (count.max(1) * 2).to_string();
    let (mut child, port) = spawn_server(
        dir.path(),
        &settings.database_url(),
        &[
            ("PAYROLL__API__MAX_IMPORT_BYTES", max_import.as_str()),
            ("PAYROLL__API__MAX_IMPORT_ROWS", max_rows.as_str()),
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
        .timeout(Duration::from_secs(900))
        .finish();
    wait_ready(&client, port).await?;
    let call = |method: &str, path: &str, body: Option<(Vec<u8>, &'static str)>| {
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
                Some((bytes, content_type)) => {
                    req.insert_header(("Content-Type", content_type))
                        .send_body(bytes)
                        .await
                }
                None => req.send().await,
            }
            .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
            let bytes = res.body().limit(1 << 30).await?;
            anyhow::ensure!(
                res.status().is_success(),
                "{path}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(2000)])
            );
            Ok::<_, anyhow::Error>(bytes)
        }
    };
    let json_of = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null);

    let mut csv = String::from("name,email,salary_usd_cents,network,wallet_address\n");
    for i in 0..count {
        csv.push_str(&format!(
            "Employee {i},employee{i}@example.com,250000,BASE,0x{:040x}\n",
            i + 1
        ));
    }
    let started = Instant::now();
    call(
        "POST",
        "/employees/import",
        Some((csv.into_bytes(), "text/csv")),
    )
    .await?;
    let import = started.elapsed().as_secs_f64();
    let mut peaks = vec![("import", peak_mb(child.id()))];

    let started = Instant::now();
    let period = json!({"period_start": "2026-03-01", "period_end": "2026-03-31"});
    let run = json_of(
        &call(
            "POST",
            "/payroll-runs",
            Some((period.to_string().into_bytes(), "application/json")),
        )
        .await?,
    );
    let create = started.elapsed().as_secs_f64();
    peaks.push(("create", peak_mb(child.id())));
    let run_id = run["data"]["id"].as_str().unwrap_or_default().to_owned();

    let started = Instant::now();
    let csv = call(
        "GET",
        &format!("/payroll-runs/{run_id}/payouts?format=csv"),
        None,
    )
    .await?;
    let export = started.elapsed().as_secs_f64();
    let lines = csv.iter().filter(|b| **b == b'\n').count();
    anyhow::ensure!(lines == count + 1, "the payouts CSV has {lines} lines");
    drop(csv);
    peaks.push(("csv", peak_mb(child.id())));

    call("POST", &format!("/payroll-runs/{run_id}/confirm"), None).await?;
    call(
        "POST",
        &format!("/payroll-runs/{run_id}/balance-check"),
        None,
    )
    .await?;
    peaks.push(("confirm", peak_mb(child.id())));
    let started = Instant::now();
    call("POST", &format!("/payroll-runs/{run_id}/execute"), None).await?;
    let summary = loop {
        let run = json_of(&call("GET", &format!("/payroll-runs/{run_id}"), None).await?);
        if matches!(run["data"]["status"].as_str(), Some("COMPLETED" | "FAILED")) {
            break run["data"]["payout_summary"].clone();
        }
        if std::env::var_os("PAYROLL_BENCH_TRACE").is_some() {
            eprintln!(
                "{:>7.2}s {}",
                started.elapsed().as_secs_f64(),
                run["data"]["payout_summary"]
            );
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(1800),
            "run did not finish: {run}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    let execute = started.elapsed().as_secs_f64();
    let peak = peak_mb(child.id());
    child.kill().ok();
    child.wait().ok();

    let execute_target = if name == "postgres" { 4.0 } else { 12.0 };
    println!(
        "floor (insert {count} rows in one transaction, update each twice in 64-row transactions): {floor_seconds:.2} s\n"
    );
    println!("| Work | Time | Ratio to floor | Target | Met |");
    println!("|---|---|---|---|---|");
    for (work, seconds, target) in [
        (format!("Import {count} employees (CSV)"), import, 3.0),
        (format!("Create a run of {count} payouts"), create, 3.0),
        ("Payouts CSV of that run".to_owned(), export, 2.0),
        (
            format!("Execute {count} payouts to terminal"),
            execute,
            execute_target,
        ),
    ] {
        let ratio = seconds / floor_seconds;
        println!(
            "| {work} | {seconds:.2} s | {ratio:.2}× | ≤ {target}× | {} |",
            if ratio <= target { "yes" } else { "no" }
        );
    }
    println!(
        "| Server peak RSS (VmHWM), import → execute | {peak:.0} MB | | < 300 MB | {} |",
        if peak < 300.0 { "yes" } else { "no" }
    );
    let peaks: Vec<String> = peaks
        .iter()
        .map(|(phase, mb)| format!("after {phase} {mb:.0} MB"))
        .collect();
    println!("\npeak RSS so far: {}", peaks.join(", "));
    println!("payout summary: {summary}");
    Ok(())
}
