//! The scenarios, each written once and run against every provider's stand-in (the macro at
//! the end makes one test per provider and scenario). A stand-in that cannot play one says why
//! ([`super::not_applicable`]).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use payroll::config::Settings;
use payroll_actors::exchange::{RemoteStatus, WithdrawalRequest, wire::to_compact_client_id};
use payroll_entities::{Cents, Network};
use serde_json::{Value, json};

use super::{
    StandIn, made_by_client_id,
    model::{Fault, Made, now_ms},
};
use crate::{
    helpers::{TestApp, evm_address, spawn_app_with},
    process::{Server, Setup},
};

/// Settings that let a scenario end in seconds: quick polls, short graces (the resend grace
/// without deduplication still longer than any history lag a scenario scripts).
fn quick(s: &mut Settings) {
    s.runs.poll_interval_ms = 150;
    s.runs.funds_watch_interval_ms = 200;
    s.exchange.reconcile_grace_ms = 400;
    s.exchange.resend_grace_without_dedupe_ms = 2_500;
    s.exchange.max_sends_without_dedupe = 3;
}

const QUICK_ENV: &[(&str, &str)] = &[
    ("PAYROLL__RUNS__POLL_INTERVAL_MS", "150"),
    ("PAYROLL__EXCHANGE__RECONCILE_GRACE_MS", "400"),
    ("PAYROLL__EXCHANGE__RESEND_GRACE_WITHOUT_DEDUPE_MS", "2500"),
    ("PAYROLL__EXCHANGE__MAX_SENDS_WITHOUT_DEDUPE", "3"),
];

pub(crate) async fn app(stand_in: &impl StandIn) -> TestApp {
    spawn_app_with(|s| {
        stand_in.configure(s);
        quick(s);
    })
    .await
}

/// `n` employees on `network`, paid 1000, 1100, … cents.
pub(crate) async fn employees(app: &TestApp, prefix: &str, n: usize, network: &str) {
    for i in 0..n {
        let email = format!("{prefix}{i}@example.com");
        let res = app
            .post(
                "/api/v1/employees",
                json!({"name": email, "email": email, "salary_usd_cents": 1_000 + 100 * i as i64,
                       "network": network, "wallet_address": evm_address(&email)}),
            )
            .await;
        assert_eq!(res.status, 201, "{}", res.text);
    }
}

const PERIOD: &str = r#"{"period_start": "2026-03-01", "period_end": "2026-03-31"}"#;

pub(crate) fn period() -> Value {
    serde_json::from_str(PERIOD).expect("period")
}

/// A run of `n` payees on BASE, confirmed, funded and executed; its id.
pub(crate) async fn executed(app: &TestApp, n: usize) -> String {
    employees(app, "payee", n, "BASE").await;
    let run_id = app.deposited_run(period()).await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    run_id
}

async fn payouts(app: &TestApp, run_id: &str) -> Vec<Value> {
    let res = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts?limit=200"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.data().as_array().expect("payouts").clone()
}

/// Waits (syncing) until the run is COMPLETED or FAILED; answers its payouts.
pub(crate) async fn ended(app: &TestApp, run_id: &str, seconds: u64) -> (String, Vec<Value>) {
    let run = app
        .wait_for_run(run_id, seconds, |r| {
            r["status"] == "COMPLETED" || r["status"] == "FAILED"
        })
        .await;
    let status = run["status"].as_str().expect("status").to_owned();
    (status, payouts(app, run_id).await)
}

/// Every COMPLETED payout withdrawn exactly once, for its amount as the payee receives it, to
/// its wallet; every FAILED one never.
pub(crate) async fn assert_paid_once(stand_in: &impl StandIn, app: &TestApp, payouts: &[Value]) {
    let made = made_by_client_id(stand_in, &app.db().await).await;
    check_paid_once(&made, payouts);
    if let Some(account) = stand_in.account() {
        account.assert_signed();
    }
}

fn check_paid_once(made: &HashMap<String, Vec<(i64, String)>>, payouts: &[Value]) {
    let mut paid = 0;
    for p in payouts {
        let client_id = p["client_withdrawal_id"].as_str().unwrap_or("");
        let times = made.get(client_id).map_or(0, Vec::len);
        match p["status"].as_str() {
            Some("COMPLETED") => {
                assert_eq!(times, 1, "{client_id} withdrawn {times} times: {p}");
                let (received, address) = &made[client_id][0];
                assert_eq!(Some(*received), p["amount_usd_cents"].as_i64(), "{p}");
                assert!(
                    address.eq_ignore_ascii_case(p["wallet_address"].as_str().expect("wallet"))
                );
                paid += 1;
            }
            Some("FAILED") => assert_eq!(times, 0, "a FAILED payout was withdrawn: {p}"),
            _ => {}
        }
    }
    let total: usize = made.values().map(Vec::len).sum();
    assert_eq!(
        total, paid,
        "withdrawals made that no COMPLETED payout accounts for"
    );
}

fn account_of(stand_in: &impl StandIn) -> &super::model::Shared {
    stand_in.account().expect("a scripted stand-in")
}

pub(crate) async fn accepted(stand_in: &impl StandIn) {
    let app = app(stand_in).await;
    let run_id = executed(&app, 3).await;
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "COMPLETED", "{paid:?}");
    assert_paid_once(stand_in, &app, &paid).await;
    for p in &paid {
        assert!(
            p["on_chain_tx_hash"]
                .as_str()
                .is_some_and(|h| h.len() == 66),
            "{p}"
        );
        assert_eq!(p["fee_usd_cents"], 25, "{p}");
    }
}

/// One definite refusal on the first send: that payout FAILED with the exchange's reason
/// containing `says`, nothing withdrawn for it; the others paid.
async fn refused(stand_in: &impl StandIn, fault: Fault, says: &[&str]) {
    let app = app(stand_in).await;
    account_of(stand_in).script(&[fault]);
    let run_id = executed(&app, 3).await;
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "FAILED", "{paid:?}");
    let failed: Vec<&Value> = paid.iter().filter(|p| p["status"] == "FAILED").collect();
    assert_eq!(failed.len(), 1, "{paid:?}");
    let reason = failed[0]["failed_reason"]
        .as_str()
        .expect("reason")
        .to_ascii_lowercase();
    assert!(
        says.iter().any(|s| reason.contains(s)),
        "{reason} names none of {says:?}"
    );
    assert_paid_once(stand_in, &app, &paid).await;
}

pub(crate) async fn refused_insufficient(stand_in: &impl StandIn) {
    refused(stand_in, Fault::Insufficient, &["insufficient"]).await;
}

pub(crate) async fn refused_not_whitelisted(stand_in: &impl StandIn) {
    refused(
        stand_in,
        Fault::NotWhitelisted,
        &["whitelist", "verified address"],
    )
    .await;
}

pub(crate) async fn refused_bad_address(stand_in: &impl StandIn) {
    refused(stand_in, Fault::BadAddress, &["address"]).await;
}

/// Confirm names the payout the exchange's terms refuse, and the run stays DRAFT.
async fn confirm_refused(stand_in: &impl StandIn, field: &str, says: &str) {
    let app = app(stand_in).await;
    employees(&app, "payee", 2, "BASE").await;
    employees(&app, "eth", 1, "ETHEREUM").await;
    let run_id = app.create_run(period()).await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "STATE_CONFLICT");
    let fields = res.invalid_fields();
    assert_eq!(fields.len(), 2, "{}", res.text);
    assert!(fields.iter().all(|f| f.ends_with(field)), "{}", res.text);
    assert!(res.text.contains(says), "{}", res.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DRAFT");
}

pub(crate) async fn below_minimum(stand_in: &impl StandIn) {
    let base = stand_in.network("BASE");
    account_of(stand_in).set(|a| a.terms.get_mut(&base).expect("terms").minimum = 5_000);
    confirm_refused(stand_in, ".amount_usd_cents", "minimum").await;
}

pub(crate) async fn network_suspended(stand_in: &impl StandIn) {
    let base = stand_in.network("BASE");
    account_of(stand_in).set(|a| a.terms.get_mut(&base).expect("terms").enabled = false);
    confirm_refused(stand_in, ".network", "cannot withdraw").await;
}

/// Faults before or after the exchange makes the withdrawal: every payout still paid once.
async fn paid_through(stand_in: &impl StandIn, faults: &[Fault], n: usize) {
    let app = app(stand_in).await;
    account_of(stand_in).script(faults);
    let run_id = executed(&app, n).await;
    let (status, paid) = ended(&app, &run_id, 60).await;
    assert_eq!(status, "COMPLETED", "{paid:?}");
    assert_paid_once(stand_in, &app, &paid).await;
}

pub(crate) async fn timeout_after_accepting(stand_in: &impl StandIn) {
    paid_through(
        stand_in,
        &[Fault::HangAfterAccepting, Fault::HangAfterAccepting],
        3,
    )
    .await;
}

pub(crate) async fn unavailable_before_accepting(stand_in: &impl StandIn) {
    paid_through(stand_in, &[Fault::Unavailable, Fault::Unavailable], 3).await;
}

pub(crate) async fn reset(stand_in: &impl StandIn) {
    paid_through(
        stand_in,
        &[Fault::ResetBefore, Fault::ResetAfterAccepting],
        3,
    )
    .await;
}

pub(crate) async fn rate_limited(stand_in: &impl StandIn) {
    match stand_in.account() {
        Some(_) => {
            paid_through(
                stand_in,
                &[Fault::RateLimited, Fault::RateLimited, Fault::RateLimited],
                4,
            )
            .await
        }
        None => {
            // The sandbox's own limit: above it, it answers "rate limited" like an exchange.
            let app = spawn_app_with(|s| {
                stand_in.configure(s);
                quick(s);
                s.exchange.sandbox.max_withdrawals_per_second = 2;
                s.exchange.withdrawals_per_second = 0;
            })
            .await;
            let run_id = executed(&app, 6).await;
            let (status, paid) = ended(&app, &run_id, 60).await;
            assert_eq!(status, "COMPLETED", "{paid:?}");
            assert_paid_once(stand_in, &app, &paid).await;
        }
    }
}

pub(crate) async fn lagging_history(stand_in: &impl StandIn) {
    // The answer is lost and the history shows the withdrawal only after a second and a half:
    // look-ups that find nothing meanwhile must not lead to a second withdrawal.
    account_of(stand_in).set(|a| a.history_lag_ms = 1_500);
    paid_through(stand_in, &[Fault::HangAfterAccepting], 2).await;
}

pub(crate) async fn refused_credentials(stand_in: &impl StandIn) {
    let app = app(stand_in).await;
    employees(&app, "payee", 2, "BASE").await;
    let run_id = app.deposited_run(period()).await;
    account_of(stand_in).set(|a| a.credentials_refused = true);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "FAILED", "{paid:?}");
    for p in &paid {
        assert_eq!(p["status"], "FAILED", "{p}");
        let reason = p["failed_reason"].as_str().expect("reason");
        assert!(reason.starts_with("job_failed"), "{reason}");
        assert!(reason.contains("credentials"), "{reason}");
    }
    assert_paid_once(stand_in, &app, &paid).await;
}

pub(crate) async fn fee_rose(stand_in: &impl StandIn) {
    let app = app(stand_in).await;
    employees(&app, "payee", 1, "BASE").await;
    let run_id = app.deposited_run(period()).await;
    let base = stand_in.network("BASE");
    account_of(stand_in).set(|a| a.terms.get_mut(&base).expect("terms").fee = 40);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "FAILED", "{paid:?}");
    let reason = paid[0]["failed_reason"].as_str().expect("reason");
    assert!(reason.starts_with("fee_changed: "), "{reason}");
    assert_paid_once(stand_in, &app, &paid).await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/retry-failed"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let (status, paid) = ended(&app, &run_id, 30).await;
    assert_eq!(status, "COMPLETED", "{paid:?}");
    assert_eq!(paid[0]["fee_usd_cents"], 40, "{paid:?}");
    assert_paid_once(stand_in, &app, &paid).await;
}

/// Our client id of attempt 1 of a fresh payout.
fn fresh_client_id() -> String {
    format!("pay_{}-1", ulid::Ulid::new())
}

pub(crate) async fn batch_lookups(stand_in: &impl StandIn) {
    const N: usize = 1_000;
    let app = app(stand_in).await;
    let db = app.db().await;
    let provider = payroll::startup::exchange_provider(&app.settings, &db)
        .await
        .expect("provider");
    let ids: Vec<String> = (0..N).map(|_| fresh_client_id()).collect();
    let since = chrono::Utc::now() - chrono::Duration::seconds(5);
    match stand_in.account() {
        Some(account) => {
            let network = stand_in.network("BASE");
            account.set(|a| {
                for (i, ours) in ids.iter().enumerate() {
                    a.made.push(Made {
                        client_id: to_compact_client_id(ours).expect("compact"),
                        id: format!("w{:08}", 90_000_000 + i),
                        asked: 1_000,
                        fee: 25,
                        network: network.clone(),
                        address: evm_address(ours),
                        at_ms: now_ms() - 1_000 + i as i64,
                    });
                }
            });
        }
        None => {
            let requests: Vec<WithdrawalRequest> = ids
                .iter()
                .map(|id| WithdrawalRequest {
                    client_id: id.clone(),
                    amount: Cents(1_000),
                    fee: Cents(25),
                    network: Network::Base,
                    address: evm_address(id),
                })
                .collect();
            let deadline = Instant::now() + Duration::from_secs(60);
            let outcomes = provider.withdraw(&requests, deadline).await;
            assert!(outcomes.iter().all(|o| matches!(
                o,
                payroll_actors::exchange::WithdrawalOutcome::Accepted { .. }
            )));
        }
    }
    let mut asked = ids.clone();
    asked.push(fresh_client_id());
    let before = stand_in.account().map(|a| a.lock().history_requests);
    let found = provider.lookup(&asked, Some(since)).await.expect("look-up");
    for id in &ids {
        assert!(
            matches!(
                found.get(id),
                Some(RemoteStatus::Pending { .. } | RemoteStatus::Completed { .. })
            ),
            "{id}: {:?}",
            found.get(id)
        );
    }
    assert!(matches!(
        found.get(asked.last().expect("one more")),
        None | Some(RemoteStatus::Unknown)
    ));
    if let (Some(account), Some(before)) = (stand_in.account(), before) {
        let requests = account.lock().history_requests - before;
        assert!(
            requests <= 12,
            "{N} look-ups took {requests} history requests"
        );
        account.assert_signed();
    }
}

// ---------------------------------------------------------------------------------------------
// Processes: kill -9, and an instance paused between stamping a send and sending it.

async fn setup(stand_in: &impl StandIn) -> Setup {
    let mut setup = Setup::new().await;
    for (k, v) in stand_in.env() {
        setup = setup.with_env(&k, &v);
    }
    for (k, v) in QUICK_ENV {
        setup = setup.with_env(k, v);
    }
    setup
}

async fn start_paying(setup: &Setup, server: &Server, count: usize) -> String {
    setup.import_employees(server, "p", count, "ARBITRUM").await;
    let (run_id, _) = setup.create_run(server, 3).await;
    for step in ["confirm", "balance-check", "execute"] {
        setup.run_step(server, &run_id, step).await;
    }
    run_id
}

pub(crate) async fn process_payouts(setup: &Setup, server: &Server, run_id: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let path = format!(
            "/payroll-runs/{run_id}/payouts?limit=200&offset={}",
            all.len()
        );
        let page = setup.call(server, "GET", &path, None).await;
        let items = page["data"].as_array().cloned().unwrap_or_default();
        let more = page["pagination"]["has_more"] == true;
        all.extend(items);
        if !more {
            return all;
        }
    }
}

/// Withdrawals the exchange has made so far.
async fn made_count(stand_in: &impl StandIn, setup: &Setup) -> usize {
    let db = crate::process::db(&setup.database_url).await;
    made_by_client_id(stand_in, &db)
        .await
        .values()
        .map(Vec::len)
        .sum()
}

/// Follows the run to COMPLETED as an operator would: a stuck payout is resolved after a look
/// at the exchange (completed where it made the withdrawal, failed where it made none), and a
/// FAILED run is retried.
pub(crate) async fn operate_to_completion(
    stand_in: &impl StandIn,
    setup: &Setup,
    server: &Server,
    run_id: &str,
    seconds: u64,
) -> Vec<Value> {
    let db = crate::process::db(&setup.database_url).await;
    operate_until_completed(setup, server, run_id, seconds, async |client_id: &str| {
        made_by_client_id(stand_in, &db)
            .await
            .contains_key(client_id)
    })
    .await
}

/// [`operate_to_completion`], `made` telling whether the exchange made a withdrawal under a
/// client id of ours.
pub(crate) async fn operate_until_completed(
    setup: &Setup,
    server: &Server,
    run_id: &str,
    seconds: u64,
    made: impl AsyncFn(&str) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        // A run being reloaded (after another instance touched it) answers 503: try again.
        let (status, run) = setup
            .try_call(
                server,
                "POST",
                &format!("/payroll-runs/{run_id}/sync"),
                None,
            )
            .await;
        assert!(
            status == 200 || status == 503,
            "sync answered {status}: {run}"
        );
        match run["data"]["status"].as_str() {
            Some("COMPLETED") => return process_payouts(setup, server, run_id).await,
            Some("FAILED") => {
                let path = format!("/payroll-runs/{run_id}/retry-failed");
                let (status, answer) = setup.try_call(server, "POST", &path, None).await;
                assert!(
                    status == 200 || status == 503,
                    "retry answered {status}: {answer}"
                );
            }
            None => {}
            _ => {
                for p in process_payouts(setup, server, run_id).await {
                    if p["stuck_since"].is_null() {
                        continue;
                    }
                    let client_id = p["client_withdrawal_id"].as_str().expect("client id");
                    let outcome = if made(client_id).await {
                        json!({"outcome": "completed", "note": "found in the exchange's history"})
                    } else {
                        json!({"outcome": "failed", "note": "no withdrawal at the exchange"})
                    };
                    let path = format!("/payouts/{}/resolve", p["id"].as_str().expect("id"));
                    let (status, answer) =
                        setup.try_call(server, "POST", &path, Some(outcome)).await;
                    assert!(
                        status == 200 || status == 503,
                        "resolve answered {status}: {answer}"
                    );
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} not completed: {}\n--- server log:\n{}",
            run["data"],
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `kill -9` while withdrawals are being sent and recorded, `kills` times; then every payout
/// is paid exactly once.
pub(crate) async fn kill_9_between_send_and_record(stand_in: &impl StandIn) {
    pay_through_kills(stand_in, 30, 3, &[]).await;
}

pub(crate) async fn pay_through_kills(
    stand_in: &impl StandIn,
    count: usize,
    kills: usize,
    extra_env: &[(&str, &str)],
) -> Vec<Value> {
    let mut setup = setup(stand_in).await;
    for (k, v) in extra_env {
        setup = setup.with_env(k, v);
    }
    let mut server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, count).await;
    for kill in 0..kills {
        let target = (kill + 1) * count / (kills + 2);
        let deadline = Instant::now() + Duration::from_secs(180);
        while made_count(stand_in, &setup).await < target {
            assert!(
                Instant::now() < deadline,
                "withdrawals stalled before kill {kill}\n--- server log:\n{}",
                setup.log(1)
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
        server.child.kill().expect("kill -9");
        server.child.wait().expect("reaped");
        server = setup.start(1).await;
    }
    let paid = operate_to_completion(stand_in, &setup, &server, &run_id, 400).await;
    assert_eq!(paid.len(), count);
    let db = crate::process::db(&setup.database_url).await;
    check_paid_once(&made_by_client_id(stand_in, &db).await, &paid);
    paid
}

fn signal(server: &Server, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(server.child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name}");
}

/// The holder of a paying run is paused (SIGSTOP) with sends stamped and queued behind the
/// rate limit; its lease runs out, the other instance takes the run over and resends what the
/// exchange does not show; then the first wakes. Stamped sends past `exchange.send_deadline_ms`
/// never leave: one withdrawal per payout.
pub(crate) async fn paused_between_stamp_and_send(stand_in: &impl StandIn) {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "two instances share one PostgreSQL database: set PAYROLL_TEST_DATABASE_URL \
             (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let count = 40;
    let setup = setup(stand_in)
        .await
        .with_env("PAYROLL__RUNS__LEASE_TTL_MS", "1500")
        .with_env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "3")
        .with_env("PAYROLL__EXCHANGE__BURST", "3")
        .with_env("PAYROLL__EXCHANGE__SEND_DEADLINE_MS", "500");
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    let run_id = start_paying(&setup, &first, count).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while made_count(stand_in, &setup).await < count / 4 {
        assert!(Instant::now() < deadline, "withdrawals did not start");
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&first, "STOP");
    actix_web::rt::time::sleep(Duration::from_millis(6_000)).await;
    signal(&first, "CONT");
    let paid = operate_to_completion(stand_in, &setup, &second, &run_id, 300).await;
    assert_eq!(paid.len(), count);
    let db = crate::process::db(&setup.database_url).await;
    check_paid_once(&made_by_client_id(stand_in, &db).await, &paid);
    drop(first);
}

macro_rules! conformance {
    ($provider:ident, $start:expr, [$($scenario:ident),* $(,)?]) => {
        mod $provider {
            $(
                #[actix_web::test]
                async fn $scenario() {
                    let (provider, scenario) = (stringify!($provider), stringify!($scenario));
                    if let Some(why) = crate::providers::not_applicable(provider, scenario) {
                        eprintln!("{provider}: {scenario} does not apply: {why}");
                        return;
                    }
                    let stand_in = $start;
                    super::$scenario(&stand_in).await;
                }
            )*
        }
    };
}

macro_rules! every_scenario {
    ($provider:ident, $start:expr) => {
        conformance!(
            $provider,
            $start,
            [
                accepted,
                refused_insufficient,
                refused_not_whitelisted,
                refused_bad_address,
                below_minimum,
                network_suspended,
                timeout_after_accepting,
                unavailable_before_accepting,
                reset,
                rate_limited,
                lagging_history,
                refused_credentials,
                fee_rose,
                batch_lookups,
                kill_9_between_send_and_record,
                paused_between_stamp_and_send,
            ]
        );
    };
}

every_scenario!(sandbox, super::super::SandboxStandIn);
every_scenario!(okx, super::super::okx::OkxStandIn::start(36).await);
every_scenario!(
    binance,
    super::super::binance::BinanceStandIn::start(37).await
);
