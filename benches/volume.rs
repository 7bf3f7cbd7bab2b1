//! Volume benchmark: a payroll of 100,000 payouts measured against the database's own floor,
//! measured in the same run on the same machine, so the ratios hold from one day to the next.
//!
//! The floor: 100,000 rows of a payout-like table inserted in one transaction, then every row
//! updated twice in 64-row transactions (claimed, then completed), with the service's own
//! connection settings (SQLite WAL, `synchronous=NORMAL`). The service: the release binary as a
//! separate process (unthrottled sandbox, no completion delay, default limits) imports the
//! employees as CSV in imports of 100,000 rows, creates a run paying all of them, exports its
//! payouts as CSV, confirms it and checks the balance, and pays it to terminal. Each phase's
//! peak resident memory (`VmHWM`, reset between phases) is read from `/proc`. Before the floor
//! and before the service, the previous measurement's writes are let reach the disk
//! (PostgreSQL `CHECKPOINT`, then `sync`), and each PostgreSQL schema is dropped once measured:
//! one round's flushes are not timed in the next. Prints figures and targets; asserts nothing.
//!
//! ```sh
//! cargo bench --bench volume                             # SQLite
//! PAYROLL_BENCH_DATABASE_URL=postgres://postgres@127.0.0.1/bench cargo bench --bench volume
//! PAYROLL_BENCH_SCALE=1 cargo bench --bench volume       # 100,000 (three times) and 1,000,000
//! ```
//! `PAYROLL_BENCH_PAYOUTS` changes the count (default 100000), `PAYROLL_BENCH_SCALE=1` runs
//! 100,000 twice, 1,000,000, then 100,000 again in one invocation and prints each phase's
//! growth from the median of the three at 100,000 (and from each of them) to 1,000,000,
//! `PAYROLL_BENCH_ROUNDS` runs it several times (default 1), `PAYROLL_BENCH_ONLY=sqlite` or
//! `postgres` measures one database, and `PAYROLL_BENCH_TRACE=1` prints when confirm answered,
//! and the payout summary and the server's RSS while the run executes.

mod common;
#[path = "common/floor.rs"]
mod floor;

use common::{drop_schema, fresh_schema, settle, spawn_server, wait_ready};
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

/// The run sizes `PAYROLL_BENCH_SCALE=1` compares.
const SMALL: usize = 100_000;
const LARGE: usize = 1_000_000;

/// Rows per import: the bench splits the employees into imports of this many, under the
/// default `api.max_import_rows`.
const IMPORT_ROWS: usize = 100_000;

/// The phases timed, in order.
const PHASES: [&str; 6] = ["floor", "import", "create", "csv", "confirm", "execute"];

/// One invocation's figures at one run size.
struct Figures {
    count: usize,
    /// Seconds of each of [`PHASES`].
    seconds: [f64; 6],
    /// Peak RSS (MB) of the server within each phase but the floor, which runs without it.
    peaks: [f64; 6],
    /// Resident memory (MB) at the end of each phase.
    after: [f64; 6],
    /// Processor seconds within each phase but the floor: the server's, and the machine's
    /// (every process and the kernel's own threads), and the machine's waiting on the disk.
    cpu: [Cpu; 6],
    summary: Value,
}

impl Figures {
    fn peak(&self) -> f64 {
        self.peaks.iter().copied().fold(0.0, f64::max)
    }
}

fn main() {
    let scale = std::env::var("PAYROLL_BENCH_SCALE").is_ok_and(|v| v == "1");
    let sizes = if scale {
        // The smaller size three times, two before the larger and one after it: the time each
        // phase is compared against is the median of the three.
        vec![SMALL, SMALL, LARGE, SMALL]
    } else {
        vec![env_number("PAYROLL_BENCH_PAYOUTS", 100_000)]
    };
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
                let mut all = Vec::new();
                for &count in &sizes {
                    println!("\n## {name}, {count} payouts, round {round} of {rounds}\n");
                    match run(url.clone(), count).await {
                        Ok(figures) => {
                            print_figures(name, &figures);
                            all.push(figures);
                        }
                        Err(err) => {
                            eprintln!("{name}: {err:#}");
                            std::process::exit(1);
                        }
                    }
                }
                if scale {
                    let (large, small): (Vec<Figures>, Vec<Figures>) =
                        all.into_iter().partition(|f| f.count == LARGE);
                    if let [large] = &large[..] {
                        print_scale(name, round, rounds, &small, large);
                    }
                }
            }
        }
    });
}

fn print_figures(name: &str, f: &Figures) {
    let count = f.count;
    let floor = f.seconds[0];
    let execute_target = if name == "postgres" { 4.0 } else { 12.0 };
    println!(
        "floor (insert {count} rows in one transaction, update each twice in 64-row transactions): {floor:.2} s\n"
    );
    println!("| Work | Time | Ratio to floor | Target | Met |");
    println!("|---|---|---|---|---|");
    for (work, seconds, target) in [
        (
            format!("Import {count} employees (CSV)"),
            f.seconds[1],
            Some(3.0),
        ),
        (
            format!("Create a run of {count} payouts"),
            f.seconds[2],
            Some(3.0),
        ),
        (
            "Payouts CSV of that run".to_owned(),
            f.seconds[3],
            Some(2.0),
        ),
        ("Confirm and balance check".to_owned(), f.seconds[4], None),
        (
            format!("Execute {count} payouts to terminal"),
            f.seconds[5],
            Some(execute_target),
        ),
    ] {
        let ratio = seconds / floor;
        match target {
            Some(target) => println!(
                "| {work} | {seconds:.2} s | {ratio:.2}× | ≤ {target}× | {} |",
                if ratio <= target { "yes" } else { "no" }
            ),
            None => println!("| {work} | {seconds:.2} s | {ratio:.2}× | | |"),
        }
    }
    let peak = f.peak();
    println!(
        "| Server peak RSS (VmHWM), import → execute | {peak:.0} MB | | < 300 MB | {} |",
        if peak < 300.0 { "yes" } else { "no" }
    );
    let phases: Vec<String> = PHASES
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, phase)| format!("{phase} {:.0} MB (then {:.0} MB)", f.peaks[i], f.after[i]))
        .collect();
    println!(
        "\npeak RSS within each phase (resident at its end): {}",
        phases.join(", ")
    );
    let cpu: Vec<String> = PHASES
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, phase)| {
            let c = &f.cpu[i];
            format!(
                "{phase} {:.2} s (machine {:.2} s, disk wait {:.2} s)",
                c.server, c.machine, c.iowait
            )
        })
        .collect();
    println!(
        "processor time within each phase, the server's: {}",
        cpu.join(", ")
    );
    println!("payout summary: {}", f.summary);
}

/// The sample whose time in phase `i` is the median of `samples` (the lower middle of an even
/// count).
fn median_sample(samples: &[Figures], i: usize) -> Option<&Figures> {
    let mut sorted: Vec<&Figures> = samples.iter().collect();
    sorted.sort_by(|a, b| a.seconds[i].total_cmp(&b.seconds[i]));
    sorted.get((sorted.len().max(1) - 1) / 2).copied()
}

/// Prints each phase's growth from the smaller run size (`samples`, the median of their times)
/// to the larger (`large`), the growth against each sample on its own, and where the processor
/// time went (against the sample whose time is the median).
fn print_scale(name: &str, round: usize, rounds: usize, samples: &[Figures], large: &Figures) {
    let Some(first) = samples.first() else {
        return;
    };
    let factor = large.count as f64 / first.count as f64;
    let limit = factor * 1.1;
    println!(
        "\n## {name}, {} against {} payouts in one invocation, round {round} of {rounds}\n",
        large.count, first.count
    );
    println!(
        "The time at {} is the median of {} samples, taken before and after the {}.\n",
        first.count,
        samples.len(),
        large.count
    );
    println!(
        "| Phase | {} (median) | {} | Growth | Target | Met | {} samples | Growth against each |",
        first.count, large.count, first.count
    );
    println!("|---|---|---|---|---|---|---|---|");
    // For each phase, the sample whose time is the median.
    let mut middle = [first; PHASES.len()];
    for (i, phase) in PHASES.iter().enumerate() {
        middle[i] = median_sample(samples, i).unwrap_or(first);
        let small = middle[i].seconds[i];
        let growth = large.seconds[i] / small;
        let (target, met) = if i == 0 {
            (String::new(), "")
        } else {
            (
                format!("≤ {limit:.0}×"),
                if growth <= limit { "yes" } else { "no" },
            )
        };
        let each: Vec<String> = samples
            .iter()
            .map(|f| format!("{:.2}", f.seconds[i]))
            .collect();
        let growths: Vec<String> = samples
            .iter()
            .map(|f| format!("{:.2}×", large.seconds[i] / f.seconds[i]))
            .collect();
        println!(
            "| {phase} | {small:.2} s | {:.2} s | {growth:.2}× | {target} | {met} | {} s | {} |",
            large.seconds[i],
            each.join(", "),
            growths.join(", ")
        );
    }
    let a = samples.iter().map(Figures::peak).fold(0.0, f64::max);
    let b = large.peak();
    println!(
        "| Peak RSS (the highest) | {a:.0} MB | {b:.0} MB | {:.2}× | < 300 MB | {} | | |",
        b / a,
        if a < 300.0 && b < 300.0 { "yes" } else { "no" }
    );
    // Where the time went: a phase whose server processor time grows as the run does while
    // its wall time grows faster was waiting (on the disk, or on the machine's other work).
    println!(
        "\n| Phase | Server CPU growth | Machine CPU growth | Disk wait, {} → {} |",
        first.count, large.count
    );
    println!("|---|---|---|---|");
    for (i, phase) in PHASES.iter().enumerate().skip(1) {
        let (s, l) = (&middle[i].cpu[i], &large.cpu[i]);
        println!(
            "| {phase} | {:.2}× ({:.2} → {:.2} s) | {:.2}× ({:.2} → {:.2} s) | {:.2} → {:.2} s |",
            l.server / s.server,
            s.server,
            l.server,
            l.machine / s.machine,
            s.machine,
            l.machine,
            s.iowait,
            l.iowait
        );
    }
}

/// Reads a field of `/proc/{pid}/status` (`VmHWM`, `VmRSS`) in MB.
fn status_mb(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Processor seconds so far (or within a phase): the server's (user and system, from
/// `/proc/{pid}/stat`), the machine's busy time and its time waiting on the disk (`/proc/stat`).
#[derive(Clone, Copy, Default)]
struct Cpu {
    server: f64,
    machine: f64,
    iowait: f64,
}

impl Cpu {
    /// Clock ticks per second of `/proc`'s figures (`USER_HZ`, 100 on Linux).
    const TICKS: f64 = 100.0;

    fn now(pid: u32) -> Cpu {
        let server = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                // The fields after the command's name, which closes with the last ')'.
                let rest = &s[s.rfind(')')? + 2..];
                let fields: Vec<&str> = rest.split_whitespace().collect();
                // utime and stime, fields 14 and 15 of the whole line.
                let user: f64 = fields.get(11)?.parse().ok()?;
                let system: f64 = fields.get(12)?.parse().ok()?;
                Some((user + system) / Self::TICKS)
            })
            .unwrap_or(0.0);
        let (machine, iowait) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                let line = s.lines().next()?;
                let t: Vec<f64> = line
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|v| v.parse().ok())
                    .collect();
                // user nice system idle iowait irq softirq steal
                let busy = t.first()? + t.get(1)? + t.get(2)? + t.get(5)? + t.get(6)?;
                Some((busy / Self::TICKS, t.get(4)? / Self::TICKS))
            })
            .unwrap_or((0.0, 0.0));
        Cpu {
            server,
            machine,
            iowait,
        }
    }

    fn since(&self, start: &Cpu) -> Cpu {
        Cpu {
            server: self.server - start.server,
            machine: self.machine - start.machine,
            iowait: self.iowait - start.iowait,
        }
    }
}

/// Starts a phase's own peak: resets the process's `VmHWM` to its current RSS (Linux
/// `clear_refs` 5). Where that is refused the peak stays the process's so far.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

async fn run(base_url: Option<String>, count: usize) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir()?;
    let mut figures = Figures {
        count,
        seconds: [0.0; 6],
        peaks: [0.0; 6],
        after: [0.0; 6],
        cpu: [Cpu::default(); 6],
        summary: Value::Null,
    };
    // Each measurement starts once the last one's writes are on disk, and leaves nothing behind.
    settle(base_url.as_deref()).await?;
    figures.seconds[0] = {
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
        drop_schema(&url).await?;
        seconds
    };
    settle(base_url.as_deref()).await?;

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
    let (mut child, port) = spawn_server(
        dir.path(),
        &settings.database_url(),
        &[
            ("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "0"),
            ("PAYROLL__EXCHANGE__SANDBOX__COMPLETION_DELAY_MS", "0"),
            (
                "PAYROLL__EXCHANGE__SANDBOX__EXCHANGE_INITIAL_USD_CENTS",
                "100000000000000",
            ),
            ("PAYROLL__RUNS__POLL_INTERVAL_MS", "200"),
        ],
    )?;
    let pid = child.id();
    let result = phases(&key, port, pid, &mut figures).await;
    child.kill().ok();
    child.wait().ok();
    drop_schema(&settings.database_url()).await?;
    figures.summary = result?;
    Ok(figures)
}

/// Imports, creates, exports, confirms and executes `figures.count` payouts through the API of
/// the server on `port`, filling in each phase's figures; answers the final payout summary.
async fn phases(key: &str, port: u16, pid: u32, figures: &mut Figures) -> anyhow::Result<Value> {
    let count = figures.count;
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(1800))
        .finish();
    wait_ready(&client, port).await?;
    let call = |method: &str, path: &str, body: Option<(Vec<u8>, &'static str)>| {
        let client = client.clone();
        let url = format!("{base}{path}");
        let path = path.to_owned();
        let key = key.to_owned();
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
    let mut at_start = Cpu::now(pid);
    let mut phase = |i: usize, started: Instant| {
        figures.seconds[i] = started.elapsed().as_secs_f64();
        figures.peaks[i] = status_mb(pid, "VmHWM:");
        figures.after[i] = status_mb(pid, "VmRSS:");
        let now = Cpu::now(pid);
        figures.cpu[i] = now.since(&at_start);
        at_start = now;
        reset_peak(pid);
    };
    reset_peak(pid);

    let started = Instant::now();
    for first in (0..count).step_by(IMPORT_ROWS) {
        let mut csv = String::from("name,email,salary_usd_cents,network,wallet_address\n");
        for i in first..count.min(first + IMPORT_ROWS) {
            csv.push_str(&format!(
                "Employee {i},employee{i}@example.com,250000,BASE,0x{:040x}\n",
                i + 1
            ));
        }
        call(
            "POST",
            "/employees/import",
            Some((csv.into_bytes(), "text/csv")),
        )
        .await?;
    }
    phase(1, started);

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
    phase(2, started);
    let run_id = run["data"]["id"].as_str().unwrap_or_default().to_owned();

    let started = Instant::now();
    let csv = call(
        "GET",
        &format!("/payroll-runs/{run_id}/payouts?format=csv"),
        None,
    )
    .await?;
    let lines = csv.iter().filter(|b| **b == b'\n').count();
    anyhow::ensure!(lines == count + 1, "the payouts CSV has {lines} lines");
    drop(csv);
    phase(3, started);

    let started = Instant::now();
    call("POST", &format!("/payroll-runs/{run_id}/confirm"), None).await?;
    if std::env::var_os("PAYROLL_BENCH_TRACE").is_some() {
        eprintln!(
            "confirm answered after {:.2}s; the balance check follows",
            started.elapsed().as_secs_f64()
        );
    }
    call(
        "POST",
        &format!("/payroll-runs/{run_id}/balance-check"),
        None,
    )
    .await?;
    phase(4, started);

    let started = Instant::now();
    call("POST", &format!("/payroll-runs/{run_id}/execute"), None).await?;
    let summary = loop {
        let run = json_of(&call("GET", &format!("/payroll-runs/{run_id}"), None).await?);
        if matches!(run["data"]["status"].as_str(), Some("COMPLETED" | "FAILED")) {
            break run["data"]["payout_summary"].clone();
        }
        if std::env::var_os("PAYROLL_BENCH_TRACE").is_some() {
            eprintln!(
                "{:>7.2}s {:.0} MB {}",
                started.elapsed().as_secs_f64(),
                status_mb(pid, "VmRSS:"),
                run["data"]["payout_summary"]
            );
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(3600),
            "run did not finish: {run}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    phase(5, started);
    Ok(summary)
}
