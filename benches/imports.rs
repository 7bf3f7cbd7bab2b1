//! Imports benchmark: the server's peak memory while it takes 60 MB JSON imports. The release
//! binary runs as a separate process (SQLite, default settings but the ones named) and its
//! peak resident memory (`VmHWM`) is read after each scenario:
//!
//! - one import of 60 MB (200,000 rows);
//! - four at once with the default `api.max_concurrent_imports = 1` (one runs, three are
//!   refused 429 before their bodies are read);
//! - four at once with `api.max_concurrent_imports = 4` (all four run).
//!
//! Prints figures; asserts nothing.
//!
//! ```sh
//! cargo bench --bench imports
//! ```
//! `PAYROLL_BENCH_IMPORT_ROWS` changes the rows per import (default 200000).

#[allow(dead_code)] // fresh_schema: the imports bench runs on SQLite alone.
mod common;

use common::{peak_mb, spawn_server, wait_ready};

use std::time::{Duration, Instant};

use payroll::{config::Settings, http::auth};

fn main() {
    let rows = std::env::var("PAYROLL_BENCH_IMPORT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    actix_web::rt::System::new().block_on(async move {
        println!("| Scenario | Answers | Time (s) | Server peak RSS (MB) | RSS after (MB) |");
        println!("|---|---|---|---|---|");
        for (name, at_once, allowed) in [
            ("one 60 MB import", 1, 1),
            ("four at once, max_concurrent_imports = 1", 4, 1),
            ("four at once, max_concurrent_imports = 4", 4, 4),
        ] {
            if let Err(err) = scenario(name, rows, at_once, allowed).await {
                eprintln!("{name}: {err:#}");
                std::process::exit(1);
            }
        }
    });
}

/// A JSON import of `rows` employees, about 300 bytes each (a 150-character name).
fn body(rows: usize, batch: usize) -> Vec<u8> {
    let padding = "x".repeat(130);
    let mut out = Vec::with_capacity(rows * 310);
    out.push(b'[');
    for i in 0..rows {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(
            format!(
                "{{\"name\":\"Employee {batch}-{i} {padding}\",\"email\":\"e{batch}-{i}@example.com\",\
                 \"salary_usd_cents\":250000,\"network\":\"BASE\",\"wallet_address\":\"0x{:040x}\"}}",
                i + 1
            )
            .as_bytes(),
        );
    }
    out.push(b']');
    out
}

/// Resident memory now, in MB.
fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn scenario(name: &str, rows: usize, at_once: usize, allowed: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::defaults()?;
    settings.data.dir = dir.path().to_path_buf();
    let key = payroll::cli::admin::create_key(&settings, "bench", &auth::all_scope_names(), None)
        .await?
        .key
        .flatten()
        .unwrap_or_default();
    let allowed = allowed.to_string();
    // The default (1) is left unset, so that a build from before the setting runs too.
    let mut env = vec![];
    if allowed != "1" {
        env.push(("PAYROLL__API__MAX_CONCURRENT_IMPORTS", allowed.as_str()));
    }
    let (mut child, port) = spawn_server(dir.path(), &settings.database_url(), &env)?;
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(600))
        .finish();
    wait_ready(&client, port).await?;
    let bodies: Vec<Vec<u8>> = (0..at_once).map(|batch| body(rows, batch)).collect();
    let megabytes = bodies[0].len() as f64 / 1e6;
    let started = Instant::now();
    let sends = bodies.into_iter().map(|body| {
        let client = client.clone();
        let key = key.clone();
        async move {
            let sent = client
                .post(format!("http://127.0.0.1:{port}/api/v1/employees/import"))
                .insert_header(("Authorization", format!("Bearer {key}")))
                .insert_header(("Idempotency-Key", uuid::Uuid::new_v4().to_string()))
                .insert_header(("Content-Type", "application/json"))
                .send_body(body)
                .await;
            match sent {
                Ok(mut res) => {
                    let _ = res.body().limit(1 << 20).await;
                    res.status().as_u16().to_string()
                }
                Err(err) => format!("closed ({err})"),
            }
        }
    });
    let mut answers = futures_util::future::join_all(sends).await;
    let seconds = started.elapsed().as_secs_f64();
    answers.sort();
    let peak = peak_mb(child.id());
    let after = rss_mb(child.id());
    println!(
        "| {name} ({megabytes:.1} MB each) | {} | {seconds:.1} | {peak:.0} | {after:.0} |",
        answers.join(", ")
    );
    child.kill().ok();
    child.wait().ok();
    Ok(())
}
