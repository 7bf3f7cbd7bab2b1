//! Binance beyond the conformance suite (`providers`): whole runs of 200 payouts through the
//! stand-in (one with a 30-second IP ban in the middle, one with every fault and four
//! `kill -9`), a clock 10 seconds off, Binance's amount step at confirm, and
//! `payroll admin exchange check`.

use std::{process::Command, time::Duration};

use serde_json::Value;

use crate::{
    helpers::spawn_app_with,
    process::output,
    providers::{
        SandboxStandIn, StandIn,
        binance::BinanceStandIn,
        model::{Odds, now_ms},
        scenarios::{app, assert_paid_once, employees, ended, executed, pay_through_kills, period},
    },
};

#[actix_web::test]
async fn binance_pays_200_through_a_30_second_ban_once_each() {
    let binance = BinanceStandIn::start(200).await;
    let app = app(&binance).await;
    let run_id = executed(&app, 200).await;
    // Banned for 30 s once a fifth is paid: nothing fails, nothing is withdrawn twice.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while binance.account.lock().made.len() < 40 {
        assert!(
            std::time::Instant::now() < deadline,
            "withdrawals did not start"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    binance
        .account
        .set(|a| a.banned_until_ms = now_ms() + 30_000);
    // Read without forcing a sync (one answers 502 while Binance bans us): the run's own
    // polling carries it through.
    let deadline = std::time::Instant::now() + Duration::from_secs(400);
    loop {
        let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
        assert_eq!(run.status, 200, "{}", run.text);
        assert_ne!(run.data()["status"], "FAILED", "{}", run.text);
        if run.data()["status"] == "COMPLETED" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", run.text);
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, paid) = ended(&app, &run_id, 10).await;
    assert_eq!(status, "COMPLETED");
    assert_eq!(paid.len(), 200);
    assert!(paid.iter().all(|p| p["status"] == "COMPLETED"));
    assert_paid_once(&binance, &app, &paid).await;
}

#[actix_web::test]
async fn binance_pays_200_through_every_fault_and_four_kill_9_once_each() {
    let binance = BinanceStandIn::start(201).await;
    binance.account.set(|a| {
        a.odds = Odds {
            hang: 0.10,
            unavailable: 0.10,
            rate_limited: 0.10,
        };
        a.history_lag_ms = 400;
    });
    let paid = pay_through_kills(&binance, 200, 4, &[]).await;
    assert!(paid.iter().all(|p| p["status"] == "COMPLETED"));
    binance.account.assert_signed();
}

#[actix_web::test]
async fn binance_a_clock_10_seconds_off_is_read_once_then_withdrawals_go_through() {
    let binance = BinanceStandIn::start(202).await;
    binance.account.set(|a| a.clock_skew_ms = 10_000);
    let app = app(&binance).await;
    let run_id = executed(&app, 3).await;
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "COMPLETED", "{paid:?}");
    assert_paid_once(&binance, &app, &paid).await;
    assert_eq!(binance.account.lock().time_requests, 1);
}

#[actix_web::test]
async fn binance_amounts_off_its_step_are_named_at_confirm() {
    let binance = BinanceStandIn::start(203).await;
    // Whole dollars only: 1000 + 25 cents cannot be sent.
    binance
        .account
        .set(|a| a.terms.get_mut("BASE").expect("BASE").step = 100);
    let app = spawn_app_with(|s| binance.configure(s)).await;
    employees(&app, "step", 1, "BASE").await;
    let run_id = app.create_run(period()).await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "STATE_CONFLICT");
    assert!(
        res.invalid_fields()[0].ends_with(".amount_usd_cents"),
        "{}",
        res.text
    );
    assert!(res.text.contains("multiple"), "{}", res.text);
}

/// `payroll admin exchange check` against a provider's settings (`env`); its exit status and
/// report.
async fn exchange_check(env: &[(String, String)]) -> (bool, Value) {
    let dir = tempfile::tempdir().expect("dir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["admin", "exchange", "check"])
        .env("PAYROLL__DATA__DIR", dir.path())
        .env("PAYROLL__LOG__LEVEL", "warn");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = output(command).await;
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), report)
}

#[actix_web::test]
async fn admin_exchange_check_reports_credentials_permission_balance_and_networks() {
    let binance = BinanceStandIn::start(204).await;
    let (passed, report) = exchange_check(&binance.env()).await;
    assert!(passed, "{report}");
    assert_eq!(report["provider"], "binance");
    assert_eq!(report["withdrawal_permission"]["may_withdraw"], true);
    assert_eq!(report["balance"]["available_usd_cents"], 10_000_000_000_i64);
    let base = report["networks"]
        .as_array()
        .expect("networks")
        .iter()
        .find(|n| n["network"] == "BASE")
        .expect("BASE")
        .clone();
    assert_eq!(base["can_withdraw"], true);
    assert_eq!(base["fee_usd_cents"], 25);
    assert_eq!(base["fee_taken_from_amount"], true);
    binance.account.assert_signed();
    // A key without the withdrawal permission: named, and the command fails.
    binance.account.set(|a| a.credentials_refused = true);
    let (passed, report) = exchange_check(&binance.env()).await;
    assert!(!passed, "{report}");
    assert_eq!(
        report["failed"],
        serde_json::json!(["withdrawal_permission"])
    );
    // The sandbox passes as it is.
    let (passed, report) = exchange_check(&SandboxStandIn.env()).await;
    assert!(passed, "{report}");
    assert_eq!(report["provider"], "sandbox");
}
