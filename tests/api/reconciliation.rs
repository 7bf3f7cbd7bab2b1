//! Reconciliation never holds up sending (CONTRACT §7): a run with 10,000 withdrawals whose
//! outcome is unknown is looked up in batches beside the run's steps, while another run's
//! withdrawals leave at the rate limit's own pace.

use std::time::{Duration, Instant};

use payroll_entities::{RunStatus, payout, payroll_run, sandbox_withdrawal, time};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Statement,
    sea_query::{Expr, ExprTrait as _},
};
use serde_json::{Value, json};

use crate::helpers::{evm_address, spawn_app_with};

/// Employees paid by run A only; run A pays these and the `PAID` of run B too.
const UNKNOWN: usize = 10_000;
const PAID: usize = 40;
const RATE: f64 = 10.0;
const BURST: f64 = 2.0;

#[actix_web::test]
async fn ten_thousand_unknown_ids_do_not_slow_another_runs_sends() {
    let app = spawn_app_with(|s| {
        s.exchange.withdrawals_per_second = RATE as u32;
        s.exchange.burst = BURST as u32;
        // Nothing is sent again during the test: the ids stay unknown and are looked up.
        s.exchange.reconcile_grace_ms = 3_600_000;
        s.exchange.reconcile_batch = 1_000;
        s.runs.lease_ttl_ms = 1_500;
    })
    .await;
    let rows: Vec<Value> = (0..UNKNOWN + PAID)
        .map(|i| {
            let email = format!("r{i}@example.com");
            json!({"name": format!("R {i}"), "email": email, "salary_usd_cents": 100,
                   "network": "BASE", "wallet_address": evm_address(&email)})
        })
        .collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let employees = app
        .get("/api/v1/employees?limit=200&search=r100")
        .await
        .data()
        .clone();
    // Run A pays every employee; run B pays 40 of them again (an ad hoc run may overlap).
    app.fund((UNKNOWN + 2 * PAID) as i64 * 100).await;

    // Run A: every one of its 10,000 withdrawals was sent (as far as the database says) and
    // the exchange knows none of them.
    let a = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let db = app.db().await;
    let now = time::now();
    payout::Entity::update_many()
        .col_expr(payout::Column::ClientWithdrawalId, Expr::cust("id || '-1'"))
        .col_expr(payout::Column::SendCount, Expr::value(1))
        .col_expr(payout::Column::InitiatedAt, Expr::value(now))
        .col_expr(payout::Column::LastSentAt, Expr::value(now))
        .filter(payout::Column::PayrollRunId.eq(a.as_str()))
        .exec(&db.conn)
        .await
        .expect("run A's payouts sent");
    payroll_run::Entity::update_many()
        .col_expr(
            payroll_run::Column::Status,
            Expr::value(RunStatus::PayingOut.as_str()),
        )
        .col_expr(
            payroll_run::Column::Version,
            Expr::col(payroll_run::Column::Version).add(1),
        )
        .filter(payroll_run::Column::Id.eq(a.as_str()))
        .exec(&db.conn)
        .await
        .expect("run A paying out");
    let backend = db.backend();
    // Its holder finds it (the lease scan) and starts looking its ids up.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run = app.get(&format!("/api/v1/payroll-runs/{a}")).await;
        let leased = db
            .conn
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT COUNT(*) AS n FROM run_leases WHERE run_id = '{a}'"),
            ))
            .await
            .expect("lease")
            .and_then(|r| r.try_get::<i64>("", "n").ok())
            .unwrap_or(0);
        if run.data()["status"] == "PAYING_OUT" && leased == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "run A was not taken up");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }

    // Run B pays 40 others meanwhile.
    let items: Vec<Value> = employees
        .as_array()
        .expect("employees")
        .iter()
        .take(PAID)
        .map(|e| json!({"employee_id": e["id"], "amount_usd_cents": 100}))
        .collect();
    assert_eq!(items.len(), PAID);
    let b = app
        .deposited_run(json!({"type": "ad_hoc", "period_start": "2026-03-01",
            "period_end": "2026-03-31", "items": items}))
        .await;
    let res = app.act(&format!("/api/v1/payroll-runs/{b}/execute")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let started = Instant::now();
    app.wait_for_run(&b, 120, |r| r["payout_summary"]["pending"] == 0)
        .await;
    let took = started.elapsed().as_secs_f64();
    let listed = app
        .get(&format!("/api/v1/payroll-runs/{b}/payouts?limit=200"))
        .await;
    let ids: Vec<String> = listed
        .data()
        .as_array()
        .expect("payouts")
        .iter()
        .map(|p| p["client_withdrawal_id"].as_str().expect("sent").to_owned())
        .collect();
    let mut sent: Vec<i64> = sandbox_withdrawal::Entity::find()
        .filter(sandbox_withdrawal::Column::ClientId.is_in(ids))
        .all(&db.conn)
        .await
        .expect("withdrawals")
        .iter()
        .map(|w| w.created_at.timestamp_millis())
        .collect();
    sent.sort();
    assert_eq!(sent.len(), PAID);
    let span = (sent[PAID - 1] - sent[0]) as f64 / 1000.0;
    let pace = (PAID as f64 - BURST) / RATE;
    eprintln!(
        "run B: {PAID} withdrawals sent over {span:.2} s (the rate limit's own pace: {pace:.2} s), \
         all accepted {took:.2} s after execute, while {UNKNOWN} unknown ids of run A were looked up"
    );
    assert!(
        span <= pace * 1.5 + 1.0,
        "run B's sends took {span:.2} s; the rate limit alone takes {pace:.2} s"
    );
    // Run A is still followed, none of it sent again.
    let run = app.get(&format!("/api/v1/payroll-runs/{a}")).await;
    assert_eq!(run.data()["status"], "PAYING_OUT");
    assert_eq!(
        run.data()["payout_summary"]["pending"],
        (UNKNOWN + PAID) as i64
    );
    db.conn.close_by_ref().await.ok();
}
