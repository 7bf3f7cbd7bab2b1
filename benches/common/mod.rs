//! What the benchmarks share: a fresh PostgreSQL schema, the release server as a child process
//! (started and awaited), and a child process's peak memory.

/// A new schema in the benchmark database, and a URL whose connections use it.
pub async fn fresh_schema(base: &str) -> anyhow::Result<String> {
    use sea_orm::{ConnectionTrait, Database};
    let schema = format!("bench_{}", ulid::Ulid::new().to_string().to_lowercase());
    let conn = Database::connect(base).await?;
    conn.execute_unprepared(&format!("CREATE SCHEMA {schema}"))
        .await?;
    conn.close().await?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{sep}{SCHEMA_OPTION}{schema}"))
}

/// The marker [`fresh_schema`] puts before the schema's name in the URL it answers.
const SCHEMA_OPTION: &str = "options=-c%20search_path%3D";

/// Drops the schema of a URL that [`fresh_schema`] answered, with everything in it, so that
/// rounds do not pile gigabytes of old runs into the benchmark database. Any other URL is left.
pub async fn drop_schema(url: &str) -> anyhow::Result<()> {
    use sea_orm::{ConnectionTrait, Database};
    let Some((base, schema)) = url.split_once(SCHEMA_OPTION) else {
        return Ok(());
    };
    let base = base.trim_end_matches(['?', '&']);
    let conn = Database::connect(base).await?;
    conn.execute_unprepared(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    conn.close().await?;
    Ok(())
}

/// Lets the previous measurement's writes reach the disk before the next starts: PostgreSQL
/// checkpoints (when `base` names it) and the kernel writes back every dirty page (`sync`).
/// Otherwise one round's flushes (a run of a million payouts leaves gigabytes) land in the
/// next round's phases, on the other database too.
#[allow(dead_code)] // Only `volume` settles between measurements.
pub async fn settle(base: Option<&str>) -> anyhow::Result<()> {
    use sea_orm::{ConnectionTrait, Database};
    if let Some(base) = base {
        let conn = Database::connect(base).await?;
        conn.execute_unprepared("CHECKPOINT").await?;
        conn.close().await?;
    }
    let status = std::process::Command::new("sync").status()?;
    anyhow::ensure!(status.success(), "sync failed: {status}");
    Ok(())
}

/// Peak resident memory of a process, in MB.
#[allow(dead_code)] // `foundation` measures in-process and has no child to read.
pub fn peak_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Starts `payroll serve` on a free port over `database_url`, with its data in `data_dir`, no
/// bootstrap key, warnings only, and `env` on top. Returns the child and its port.
#[allow(dead_code)] // `foundation` serves in-process.
pub fn spawn_server(
    data_dir: &std::path::Path,
    database_url: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<(std::process::Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    // Another build of the server (an older commit's, to compare) when PAYROLL_BENCH_BIN names it.
    let binary =
        std::env::var("PAYROLL_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_payroll").into());
    let child = std::process::Command::new(binary)
        .arg("serve")
        .env("PAYROLL__SERVER__PORT", port.to_string())
        .env("PAYROLL__DATA__DIR", data_dir)
        .env("PAYROLL__DATABASE__URL", database_url)
        .env("PAYROLL__AUTH__BOOTSTRAP_KEY", "false")
        .env("PAYROLL__LOG__LEVEL", "warn")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()?;
    Ok((child, port))
}

/// Waits until the server on `port` answers `/readyz` (at most 30 s).
#[allow(dead_code)] // `foundation` serves in-process.
pub async fn wait_ready(client: &awc::Client, port: u16) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    while client
        .get(format!("http://127.0.0.1:{port}/readyz"))
        .send()
        .await
        .is_err()
    {
        anyhow::ensure!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the server on port {port} did not start"
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}
