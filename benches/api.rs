//! API read benchmark: `GET /api/v1/payroll-runs/{id}` with a real API key under 32 concurrent
//! keep-alive connections, against the release binary as a separate process, with `/healthz`
//! measured the same way as the raw server's reference; then the operator pages `/status`
//! (every section, charts included) and `/status/runs/{id}` under the same load. The per-key rate limit is raised so the
//! figures are the server's, not the limiter's. Prints figures beside their targets; asserts
//! nothing.
//!
//! ```sh
//! cargo bench --bench api                          # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench api
//! ```
//! The load comes from `wrk` when it is on the PATH, otherwise from a built-in generator
//! (`PAYROLL_BENCH_GENERATOR=builtin` forces it). `PAYROLL_BENCH_SECONDS` (default 10),
//! `PAYROLL_BENCH_WARMUP_SECONDS` (default 2), `PAYROLL_BENCH_CONNECTIONS` (default 32) and
//! `PAYROLL_BENCH_EMPLOYEES` (default 100, the run's payouts) change the load.

mod common;

use common::{drop_schema, fresh_schema, peak_mb, spawn_server, wait_ready};

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use payroll::{config::Settings, http::auth};
use serde_json::{Value, json};

/// The targets, as ratios to the bare server measured in the same run: the run read serves at
/// least this share of `/healthz`'s requests per second, with this p99.
const TARGET_RATIO: f64 = 0.3;
const TARGET_P99_MS: f64 = 5.0;

#[derive(Clone)]
struct Load {
    connections: usize,
    warmup: Duration,
    duration: Duration,
    generator: Generator,
}

#[derive(Clone, Copy, PartialEq)]
enum Generator {
    Wrk,
    Builtin,
}

impl Generator {
    fn name(self) -> &'static str {
        match self {
            Generator::Wrk => "wrk",
            Generator::Builtin => "built-in",
        }
    }
}

/// What one measurement saw.
struct Figures {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    requests: u64,
    errors: u64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let employees: usize = env_or("PAYROLL_BENCH_EMPLOYEES", 100);
    let wrk_present = Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    let forced_builtin = std::env::var("PAYROLL_BENCH_GENERATOR").is_ok_and(|g| g == "builtin");
    let load = Load {
        connections: env_or("PAYROLL_BENCH_CONNECTIONS", 32usize).max(1),
        warmup: Duration::from_secs(env_or("PAYROLL_BENCH_WARMUP_SECONDS", 2)),
        duration: Duration::from_secs(env_or("PAYROLL_BENCH_SECONDS", 10u64).max(1)),
        generator: if wrk_present && !forced_builtin {
            Generator::Wrk
        } else {
            Generator::Builtin
        },
    };
    let mut targets: Vec<(&str, Option<String>)> = vec![("sqlite", None)];
    if let Ok(url) = std::env::var("PAYROLL_BENCH_DATABASE_URL") {
        targets.push(("postgres", Some(url)));
    }
    actix_web::rt::System::new().block_on(async move {
        for (name, url) in targets {
            if let Err(err) = run(name, url, employees, load.clone()).await {
                eprintln!("{name}: {err:#}");
                std::process::exit(1);
            }
        }
    });
}

async fn run(
    name: &str,
    base_url: Option<String>,
    employees: usize,
    load: Load,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut settings = Settings::defaults()?;
    settings.data.dir = dir.path().to_path_buf();
    if let Some(url) = &base_url {
        settings.database.url = payroll::config::Secret::new(fresh_schema(url).await?);
    }
    let admin_key =
        payroll::cli::admin::create_key(&settings, "bench", &auth::all_scope_names(), None)
            .await?
            .key
            .flatten()
            .unwrap_or_default();
    // The measured reads use a key holding only the scope the route needs.
    let read_key = payroll::cli::admin::create_key(
        &settings,
        "bench-read",
        &[auth::Scope::PayrollRead.as_str().to_owned()],
        None,
    )
    .await?
    .key
    .flatten()
    .unwrap_or_default();
    // High enough never to answer 429: the server is measured, not the limiter.
    let (mut child, port) = spawn_server(
        dir.path(),
        &settings.database_url(),
        &[
            ("PAYROLL__API__RATE_LIMIT_PER_SECOND", "10000000"),
            ("PAYROLL__API__RATE_LIMIT_BURST", "10000000"),
        ],
    )?;
    let result = measure(name, port, &admin_key, &read_key, employees, &load).await;
    let peak = peak_mb(child.id());
    child.kill().ok();
    child.wait().ok();
    drop_schema(&settings.database_url()).await?;
    let (healthz, run_read, status, run_page) = result?;
    println!(
        "{name:<9} generator={} connections={} warmup={}s duration={}s employees={employees}",
        load.generator.name(),
        load.connections,
        load.warmup.as_secs(),
        load.duration.as_secs(),
    );
    report("GET /healthz (reference)", &healthz, None);
    report(
        "GET /api/v1/payroll-runs/{id}",
        &run_read,
        Some(healthz.requests_per_second),
    );
    report("GET /status (every section)", &status, None);
    report("GET /status/runs/{id}", &run_page, None);
    println!("  server peak RSS {peak:.0} MB");
    Ok(())
}

/// One load's figures; with `reference` (the bare server's requests per second), the ratio to
/// it and the targets.
fn report(what: &str, f: &Figures, reference: Option<f64>) {
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!("  {what}: {} requests, {} errors", f.requests, f.errors);
    if let Some(reference) = reference {
        let ratio = f.requests_per_second / reference.max(1.0);
        println!(
            "    requests/s {:>9.0}   {ratio:.2}x /healthz, target >= {TARGET_RATIO}x: {}",
            f.requests_per_second,
            verdict(ratio >= TARGET_RATIO && f.errors == 0)
        );
        println!("    p50        {:>9.2} ms", f.p50_ms);
        println!(
            "    p99        {:>9.2} ms  target <= {TARGET_P99_MS:.0} ms: {}",
            f.p99_ms,
            verdict(f.p99_ms <= TARGET_P99_MS)
        );
    } else {
        println!("    requests/s {:>9.0}", f.requests_per_second);
        println!("    p50        {:>9.2} ms", f.p50_ms);
        println!("    p99        {:>9.2} ms", f.p99_ms);
    }
    println!("    max        {:>9.2} ms", f.max_ms);
}

/// Seeds employees and a run through the API, then loads `/healthz` and the run read.
async fn measure(
    name: &str,
    port: u16,
    admin_key: &str,
    read_key: &str,
    employees: usize,
    load: &Load,
) -> anyhow::Result<(Figures, Figures, Figures, Figures)> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(120))
        .finish();
    wait_ready(&client, port).await?;
    let post = |path: &str, body: Value| {
        let req = client
            .post(format!("http://127.0.0.1:{port}/api/v1{path}"))
            .insert_header(("Authorization", format!("Bearer {admin_key}")))
            .insert_header(("Idempotency-Key", uuid::Uuid::new_v4().to_string()));
        let path = path.to_owned();
        async move {
            let mut res = req
                .send_json(&body)
                .await
                .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
            let json: Value = res.json().limit(1 << 26).await.unwrap_or(Value::Null);
            anyhow::ensure!(res.status().is_success(), "{path}: {json}");
            Ok::<Value, anyhow::Error>(json)
        }
    };
    let rows: Vec<Value> = (0..employees)
        .map(|i| {
            json!({"name": format!("Employee {i}"), "email": format!("employee{i}@example.com"),
                   "salary_usd_cents": 250_000, "network": "BASE", "wallet_address": format!("0x{:040x}", i + 1)})
        })
        .collect();
    post("/employees/import", json!(rows)).await?;
    let run = post(
        "/payroll-runs",
        json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
    )
    .await?;
    let run_id = run["data"]["id"].as_str().unwrap_or_default().to_owned();
    anyhow::ensure!(!run_id.is_empty(), "{name}: no run id in {run}");

    // The generators block; they run on their own threads, off this runtime.
    let (l1, l2) = (load.clone(), load.clone());
    let healthz = actix_web::rt::task::spawn_blocking(move || {
        generate(&l1, port, "/healthz".to_owned(), None)
    })
    .await??;
    let authorization = format!("Bearer {read_key}");
    let path = format!("/api/v1/payroll-runs/{run_id}");
    let run_read =
        actix_web::rt::task::spawn_blocking(move || generate(&l2, port, path, Some(authorization)))
            .await??;
    // The operator pages with a key of every scope: each section is read and drawn.
    let (l3, l4) = (load.clone(), load.clone());
    let authorization = format!("Bearer {admin_key}");
    let a2 = authorization.clone();
    let status = actix_web::rt::task::spawn_blocking(move || {
        generate(&l3, port, "/status".to_owned(), Some(authorization))
    })
    .await??;
    let run_page = actix_web::rt::task::spawn_blocking(move || {
        generate(&l4, port, format!("/status/runs/{run_id}"), Some(a2))
    })
    .await??;
    Ok((healthz, run_read, status, run_page))
}

fn generate(
    load: &Load,
    port: u16,
    path: String,
    authorization: Option<String>,
) -> anyhow::Result<Figures> {
    match load.generator {
        Generator::Wrk => wrk(load, port, &path, authorization.as_deref()),
        Generator::Builtin => builtin(load, port, &path, authorization.as_deref()),
    }
}

/// Runs `wrk` for the warm-up (discarded), then for the measured duration.
fn wrk(load: &Load, port: u16, path: &str, authorization: Option<&str>) -> anyhow::Result<Figures> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(load.connections);
    let run = |seconds: u64| -> anyhow::Result<String> {
        let mut cmd = Command::new("wrk");
        cmd.arg(format!("-t{threads}"))
            .arg(format!("-c{}", load.connections))
            .arg(format!("-d{seconds}s"))
            .arg("--latency");
        if let Some(value) = authorization {
            cmd.arg("-H").arg(format!("Authorization: {value}"));
        }
        let out = cmd
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .stderr(Stdio::inherit())
            .output()?;
        anyhow::ensure!(out.status.success(), "wrk failed: {:?}", out.status);
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if !load.warmup.is_zero() {
        run(load.warmup.as_secs().max(1))?;
    }
    let text = run(load.duration.as_secs())?;
    parse_wrk(&text).ok_or_else(|| anyhow::anyhow!("unreadable wrk output:\n{text}"))
}

/// Reads `wrk --latency` output.
fn parse_wrk(text: &str) -> Option<Figures> {
    let words = |prefix: &str| -> Option<Vec<&str>> {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with(prefix))
            .map(|l| l.split_whitespace().collect())
    };
    let max_ms = wrk_duration_ms(words("Latency ")?.get(3)?)?;
    let p50_ms = wrk_duration_ms(words("50% ")?.get(1)?)?;
    let p99_ms = wrk_duration_ms(words("99% ")?.get(1)?)?;
    let requests_per_second = words("Requests/sec:")?.get(1)?.parse().ok()?;
    // "12345 requests in 10.00s, 4.56MB read"
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let non_2xx: u64 = words("Non-2xx or 3xx responses:")
        .and_then(|w| w.get(4)?.parse().ok())
        .unwrap_or(0);
    // "Socket errors: connect 0, read 0, write 0, timeout 0"
    let socket: u64 = words("Socket errors:").map_or(0, |w| {
        w.iter()
            .filter_map(|s| s.trim_end_matches(',').parse::<u64>().ok())
            .sum()
    });
    Some(Figures {
        requests_per_second,
        p50_ms,
        p99_ms,
        max_ms,
        requests,
        errors: non_2xx + socket,
    })
}

/// `812.00us`, `1.23ms`, `2.01s`, `1.50m` as milliseconds.
fn wrk_duration_ms(value: &str) -> Option<f64> {
    let split = value.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => number / 1000.0,
        "ms" => number,
        "s" => number * 1000.0,
        "m" => number * 60_000.0,
        "h" => number * 3_600_000.0,
        _ => return None,
    })
}

/// One thread per connection, each sending keep-alive HTTP/1.1 requests one after another;
/// latencies of requests sent after the warm-up are kept.
fn builtin(
    load: &Load,
    port: u16,
    path: &str,
    authorization: Option<&str>,
) -> anyhow::Result<Figures> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{}\r\n",
        authorization.map_or(String::new(), |v| format!("Authorization: {v}\r\n"))
    );
    let start = Instant::now();
    let measured_from = start + load.warmup;
    let end = measured_from + load.duration;
    let workers: Vec<_> = (0..load.connections)
        .map(|_| {
            let request = request.clone();
            std::thread::spawn(move || connection_loop(port, &request, measured_from, end))
        })
        .collect();
    let mut latencies_us: Vec<u32> = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (lat, err) = worker
            .join()
            .map_err(|_| anyhow::anyhow!("a generator thread panicked"))?;
        latencies_us.extend(lat);
        errors += err;
    }
    latencies_us.sort_unstable();
    let quantile = |q: f64| -> f64 {
        if latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((latencies_us.len() as f64 * q).ceil() as usize).clamp(1, latencies_us.len());
        f64::from(latencies_us[i - 1]) / 1000.0
    };
    Ok(Figures {
        requests_per_second: latencies_us.len() as f64 / load.duration.as_secs_f64(),
        p50_ms: quantile(0.50),
        p99_ms: quantile(0.99),
        max_ms: quantile(1.0),
        requests: latencies_us.len() as u64,
        errors,
    })
}

/// Sends requests until `end`; answers the latencies (µs) of successful requests sent at or
/// after `measured_from`, and the count of failures among them.
fn connection_loop(
    port: u16,
    request: &str,
    measured_from: Instant,
    end: Instant,
) -> (Vec<u32>, u64) {
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
    let mut body = Vec::new();
    loop {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        let outcome = (|| -> std::io::Result<u16> {
            if conn.is_none() {
                let stream = TcpStream::connect(("127.0.0.1", port))?;
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                let reader = BufReader::new(stream.try_clone()?);
                conn = Some((stream, reader));
            }
            let Some((stream, reader)) = conn.as_mut() else {
                unreachable!("connected above")
            };
            stream.write_all(request.as_bytes())?;
            read_response(reader, &mut body)
        })();
        let elapsed = sent.elapsed();
        let measured = sent >= measured_from && sent + elapsed <= end;
        match outcome {
            Ok(status) if (200..300).contains(&status) => {
                if measured {
                    latencies.push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                }
            }
            Ok(_) => errors += u64::from(measured),
            Err(_) => {
                errors += u64::from(measured);
                conn = None;
            }
        }
    }
    (latencies, errors)
}

/// Reads one HTTP/1.1 response (Content-Length or chunked); answers its status.
fn read_response(reader: &mut BufReader<TcpStream>, body: &mut Vec<u8>) -> std::io::Result<u16> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(bad("connection closed"));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("connection closed in headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.trim().eq_ignore_ascii_case("chunked");
            }
        }
    }
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(|_| bad("chunk size"))?;
            body.resize(size + 2, 0);
            reader.read_exact(body)?;
            if size == 0 {
                break;
            }
        }
    } else {
        body.resize(length.unwrap_or(0), 0);
        reader.read_exact(body)?;
    }
    Ok(status)
}
