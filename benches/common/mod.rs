//! What the benchmarks share: a fresh PostgreSQL schema and a child process's peak memory.

/// A new schema in the benchmark database, and a URL whose connections use it.
pub async fn fresh_schema(base: &str) -> anyhow::Result<String> {
    use sea_orm::{ConnectionTrait, Database};
    let schema = format!("bench_{}", ulid::Ulid::new().to_string().to_lowercase());
    let conn = Database::connect(base).await?;
    conn.execute_unprepared(&format!("CREATE SCHEMA {schema}"))
        .await?;
    conn.close().await?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{sep}options=-c%20search_path%3D{schema}"))
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
