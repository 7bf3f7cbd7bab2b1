//! Foundation benchmark: import 100,000 employees, create a regular run over them, and stream
//! its payouts as CSV, through the real HTTP API. Prints figures; asserts nothing.
//!
//! ```sh
//! cargo bench --bench foundation                          # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench foundation
//! ```
//! `PAYROLL_BENCH_EMPLOYEES` changes the count (default 100000).

mod common;

use common::{drop_schema, fresh_schema};

use std::time::{Duration, Instant};

use payroll::{config::Settings, http::auth, startup::Application};
use serde_json::{Value, json};

struct Target {
    name: &'static str,
    url: Option<String>,
}

fn main() {
    let count: usize = std::env::var("PAYROLL_BENCH_EMPLOYEES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut targets = vec![Target {
        name: "sqlite",
        url: None,
    }];
    if let Ok(url) = std::env::var("PAYROLL_BENCH_DATABASE_URL") {
        targets.push(Target {
            name: "postgres",
            url: Some(url),
        });
    }
    actix_web::rt::System::new().block_on(async move {
        for target in targets {
            if let Err(err) = run(&target, count).await {
                eprintln!("{}: {err:#}", target.name);
                std::process::exit(1);
            }
        }
    });
}

async fn run(target: &Target, count: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::defaults()?;
    settings.server.port = 0;
    settings.data.dir = dir.path().to_path_buf();
    settings.auth.bootstrap_key = false;
    settings.log.level = "warn".into();
    settings.api.max_import_bytes = 256 * 1024 * 1024;
    if let Some(url) = &target.url {
        settings.database.url = payroll::config::Secret::new(fresh_schema(url).await?);
    }
    let database_url = settings.database_url();
    let key = payroll::cli::admin::create_key(&settings, "bench", &auth::all_scope_names(), None)
        .await?
        .key
        .flatten()
        .unwrap_or_default();
    let app = Application::build(settings).await?;
    let base = format!("http://127.0.0.1:{}/api/v1", app.port());
    actix_web::rt::spawn(app.run_until_stopped());
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(600))
        .finish();

    let rows: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "name": format!("Employee {i}"),
                "email": format!("employee{i}@example.com"),
                "salary_usd_cents": 250_000 + (i % 1000) as i64,
                "network": "BASE",
                "wallet_address": format!("0x{:040x}", i + 1),
            })
        })
        .collect();
    let body = serde_json::to_vec(&rows)?;

    let started = Instant::now();
    let mut res = client
        .post(format!("{base}/employees/import"))
        .insert_header(("Authorization", format!("Bearer {key}")))
        .insert_header(("Idempotency-Key", uuid::Uuid::new_v4().to_string()))
        .insert_header(("Content-Type", "application/json"))
        .send_body(body.clone())
        .await
        .map_err(|e| anyhow::anyhow!("import: {e}"))?;
    let text = res.body().limit(1 << 20).await?;
    let import = started.elapsed();
    anyhow::ensure!(
        res.status() == 200,
        "import: {}",
        String::from_utf8_lossy(&text)
    );

    let started = Instant::now();
    let mut res = client
        .post(format!("{base}/payroll-runs"))
        .insert_header(("Authorization", format!("Bearer {key}")))
        .insert_header(("Idempotency-Key", uuid::Uuid::new_v4().to_string()))
        .insert_header(("Content-Type", "application/json"))
        .send_body(r#"{"period_start": "2026-03-01", "period_end": "2026-03-31"}"#)
        .await
        .map_err(|e| anyhow::anyhow!("create run: {e}"))?;
    let created: Value = serde_json::from_slice(&res.body().limit(1 << 20).await?)?;
    let create = started.elapsed();
    let run_id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(res.status() == 201, "create run: {created}");

    let started = Instant::now();
    let mut res = client
        .get(format!("{base}/payroll-runs/{run_id}/payouts?format=csv"))
        .insert_header(("Authorization", format!("Bearer {key}")))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("csv: {e}"))?;
    let csv = res.body().limit(1 << 30).await?;
    let export = started.elapsed();
    let lines = csv.iter().filter(|b| **b == b'\n').count();
    anyhow::ensure!(lines == count + 1, "csv has {lines} lines");

    println!(
        "{:<9} employees={count:<7} import={:>7.2}s ({:.1} MB)  create_run={:>6.2}s ({} payouts)  payouts_csv={:>6.2}s ({:.1} MB)",
        target.name,
        import.as_secs_f64(),
        body.len() as f64 / 1e6,
        create.as_secs_f64(),
        created["data"]["employee_count"],
        export.as_secs_f64(),
        csv.len() as f64 / 1e6,
    );
    // The server serves in this process to its end; its connections are idle once measured,
    // so the schema can go now rather than pile up in the benchmark database (a SQLite URL is
    // left as it is).
    drop_schema(&database_url).await?;
    Ok(())
}
