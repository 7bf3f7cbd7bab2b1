//! Exactly once at scale: a run of 1,000,000 payouts (`PAYROLL_TEST_SCALE_PAYOUTS` changes
//! it) is paid by the release server, killed with `kill -9` three times during execute (at a
//! quarter, half and three quarters of the withdrawals) and restarted on the same database;
//! the sandbox exchange must then hold exactly one withdrawal per payout, under its first
//! attempt's id and for its amount, and the run must be COMPLETED.
//!
//! Slow, so not part of the default suite:
//!
//! ```sh
//! cargo test --release --test api scale -- --ignored --nocapture
//! PAYROLL_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/payroll_test \
//!   cargo test --release --test api scale -- --ignored --nocapture
//! ```

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement};
use serde_json::Value;

use crate::{
    helpers::new_key,
    process::{Server, Setup, db, withdrawn},
};

/// Rows per import, under the default `api.max_import_rows`.
const IMPORT_ROWS: usize = 100_000;

fn payouts() -> usize {
    std::env::var("PAYROLL_TEST_SCALE_PAYOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// A call that may take minutes (an import, a run of a million payouts); answers the body,
/// asserting a 2xx.
async fn heavy(
    setup: &Setup,
    server: &Server,
    method: &str,
    path: &str,
    body: Option<(Vec<u8>, &'static str)>,
) -> Value {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(1800))
        .finish();
    let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client
        .request(method.clone(), format!("{}/api/v1{path}", server.base))
        .insert_header(("Authorization", format!("Bearer {}", setup.key)));
    if method != awc::http::Method::GET {
        req = req.insert_header(("Idempotency-Key", new_key()));
    }
    let mut res = match body {
        Some((bytes, content_type)) => {
            req.insert_header(("Content-Type", content_type))
                .send_body(bytes)
                .await
        }
        None => req.send().await,
    }
    .expect("request");
    let bytes = res.body().limit(64 << 20).await.expect("body");
    assert!(
        res.status().is_success(),
        "{path}: {}",
        String::from_utf8_lossy(&bytes)
    );
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// One row of integers the database answers to `sql`.
async fn figures(database: &payroll_entities::db::Db, sql: &str) -> Vec<i64> {
    let row = database
        .conn
        .query_one_raw(Statement::from_string(database.backend(), sql))
        .await
        .expect("query")
        .expect("a row");
    (0..3)
        .map_while(|i| row.try_get_by_index::<i64>(i).ok())
        .collect()
}

#[actix_web::test]
#[ignore = "1,000,000 payouts; run with --release and --ignored (see the module's docs)"]
async fn a_million_payouts_through_three_kills() {
    let count = payouts();
    let started = Instant::now();
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "0")
        .with_env("PAYROLL__EXCHANGE__IN_FLIGHT_WINDOW", "64")
        .with_env("PAYROLL__EXCHANGE__SANDBOX__COMPLETION_DELAY_MS", "0")
        .with_env(
            "PAYROLL__EXCHANGE__SANDBOX__EXCHANGE_INITIAL_USD_CENTS",
            "100000000000000",
        );
    let mut server = setup.start(1).await;
    for first in (0..count).step_by(IMPORT_ROWS) {
        let mut csv = String::from("name,email,salary_usd_cents,network,wallet_address\n");
        for i in first..count.min(first + IMPORT_ROWS) {
            csv.push_str(&format!(
                "Scale {i},scale{i}@example.com,{},BASE,0x{:040x}\n",
                100 + i % 1000,
                i + 1
            ));
        }
        heavy(
            &setup,
            &server,
            "POST",
            "/employees/import",
            Some((csv.into_bytes(), "text/csv")),
        )
        .await;
    }
    let period = br#"{"period_start": "2026-03-01", "period_end": "2026-03-31"}"#.to_vec();
    let run = heavy(
        &setup,
        &server,
        "POST",
        "/payroll-runs",
        Some((period, "application/json")),
    )
    .await;
    let run_id = run["data"]["id"].as_str().expect("run id").to_owned();
    let total = run["data"]["total_amount_usd_cents"]
        .as_i64()
        .expect("total");
    for step in ["confirm", "balance-check", "execute"] {
        heavy(
            &setup,
            &server,
            "POST",
            &format!("/payroll-runs/{run_id}/{step}"),
            None,
        )
        .await;
    }
    eprintln!(
        "{count} payouts executing after {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let database = db(&setup.database_url).await;
    let mut kills = Vec::new();
    for (n, quarter) in [1u64, 2, 3].into_iter().enumerate() {
        let at = count as u64 * quarter / 4;
        let deadline = Instant::now() + Duration::from_secs(1800);
        while withdrawn(&database).await < at {
            assert!(
                Instant::now() < deadline,
                "withdrawals stalled before {at}: {}",
                setup.log(n + 1)
            );
            actix_web::rt::time::sleep(Duration::from_millis(200)).await;
        }
        server.child.kill().expect("kill -9");
        server.child.wait().expect("reaped");
        kills.push(withdrawn(&database).await);
        server = setup.start(n + 2).await;
    }
    eprintln!(
        "killed at {kills:?} withdrawals, {:.0} s in",
        started.elapsed().as_secs_f64()
    );

    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let run = heavy(
            &setup,
            &server,
            "GET",
            &format!("/payroll-runs/{run_id}"),
            None,
        )
        .await;
        if run["data"]["status"] == "COMPLETED" {
            assert_eq!(
                run["data"]["payout_summary"]["completed"], count as i64,
                "{run}"
            );
            break;
        }
        assert!(
            run["data"]["status"] == "PAYING_OUT" && Instant::now() < deadline,
            "run not completed (killed at {kills:?}): {run}\n{}",
            setup.log(4)
        );
        actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    }

    // At the exchange: as many withdrawals as payouts, no client id twice, the run's total.
    let exchange = figures(
        &database,
        "SELECT COUNT(*), COUNT(DISTINCT client_id), \
         CAST(COALESCE(SUM(amount_usd_cents), 0) AS BIGINT) FROM sandbox_withdrawals",
    )
    .await;
    assert_eq!(
        exchange,
        vec![count as i64, count as i64, total],
        "withdrawals, distinct client ids, amount (killed at {kills:?})"
    );
    // Each payout: COMPLETED on its first attempt, its one withdrawal under `{id}-1`, for its
    // amount, the exchange's id recorded.
    let matched = figures(
        &database,
        "SELECT COUNT(*) FROM payouts p JOIN sandbox_withdrawals w \
         ON w.client_id = p.id || '-1' \
         WHERE p.status = 'COMPLETED' AND p.attempt = 1 \
         AND w.amount_usd_cents = p.amount_usd_cents AND p.cex_withdrawal_id = w.id",
    )
    .await;
    assert_eq!(matched, vec![count as i64], "payouts matched one to one");
    eprintln!(
        "{count} payouts, one withdrawal each, in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
