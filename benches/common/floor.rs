//! The database's floor, shared by `benches/volume.rs` and the volume test: what the same
//! database on the same machine needs for a payout-like table's rows, without the service.

use std::time::Instant;

use payroll_entities::db::Db;
use sea_orm::{ConnectionTrait, Statement, TransactionTrait, Value as SqlValue};

/// The raw floor: seconds to insert `count` payout-like rows in one transaction, then update
/// each twice in 64-row transactions.
pub async fn floor(db: &Db, count: usize) -> anyhow::Result<f64> {
    let backend = db.backend();
    let conn = &db.conn;
    conn.execute_unprepared(
        "CREATE TABLE floor_payouts (id VARCHAR(40) PRIMARY KEY, run_id VARCHAR(40) NOT NULL, \
         employee_id VARCHAR(40) NOT NULL, amount_usd_cents BIGINT NOT NULL, \
         status VARCHAR(16) NOT NULL, client_id VARCHAR(40), updated_at VARCHAR(40) NOT NULL)",
    )
    .await?;
    let ids: Vec<String> = (0..count).map(|i| format!("pay_{i:026}")).collect();
    let placeholder = |n: usize| match backend {
        sea_orm::DatabaseBackend::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    };
    let started = Instant::now();
    let tx = conn.begin().await?;
    for chunk in ids.chunks(1000) {
        let mut sql = String::from(
            "INSERT INTO floor_payouts (id, run_id, employee_id, amount_usd_cents, status, updated_at) VALUES ",
        );
        let mut values: Vec<SqlValue> = Vec::with_capacity(chunk.len() * 3);
        for (i, id) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            let n = values.len();
            sql.push_str(&format!(
                "({}, 'run_1', {}, 250000, 'PENDING', {})",
                placeholder(n + 1),
                placeholder(n + 2),
                placeholder(n + 3)
            ));
            values.push(id.clone().into());
            values.push(format!("emp{id}").into());
            values.push("2026-03-01T00:00:00Z".into());
        }
        tx.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    tx.commit().await?;
    for (status, client_id) in [("PROCESSING", true), ("COMPLETED", false)] {
        for chunk in ids.chunks(64) {
            let list: Vec<String> = (0..chunk.len()).map(|i| placeholder(i + 2)).collect();
            let sql = if client_id {
                format!(
                    "UPDATE floor_payouts SET status = {}, client_id = id, updated_at = 'now' WHERE id IN ({})",
                    placeholder(1),
                    list.join(",")
                )
            } else {
                format!(
                    "UPDATE floor_payouts SET status = {}, updated_at = 'later' WHERE id IN ({})",
                    placeholder(1),
                    list.join(",")
                )
            };
            let mut values: Vec<SqlValue> = vec![status.into()];
            values.extend(chunk.iter().map(|id| SqlValue::from(id.clone())));
            let tx = conn.begin().await?;
            tx.execute_raw(Statement::from_sql_and_values(backend, sql, values))
                .await?;
            tx.commit().await?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    conn.execute_unprepared("DROP TABLE floor_payouts").await?;
    Ok(seconds)
}
