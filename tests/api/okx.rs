//! The OKX provider against a scripted OKX (`wiremock`): every request's signature is checked,
//! withdrawals are recorded as OKX would make them, and faults are injected into the answers to
//! withdrawals (rate limit, 5xx, timeout after acceptance, malformed JSON) and lookups.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use payroll::config::Settings;
use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use crate::{
    helpers::{TestApp, spawn_app_with},
    okx_standin::{Endpoint, envelope, mount, okx_error, signature_problem},
    process::Setup,
};

const API_KEY: &str = "okx-test-key";
const SECRET_KEY: &str = "okx-test-secret";
const PASSPHRASE: &str = "okx-test-passphrase";
const DEPOSIT_ADDRESS: &str = "0xd3b0000000000000000000000000000000000001";

/// What the scripted OKX does to one withdrawal request.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// HTTP 429 with code 50011; nothing is withdrawn.
    Http429,
    /// HTTP 200 with code 50011; nothing is withdrawn.
    Code50011,
    /// HTTP 500; nothing is withdrawn.
    Http500,
    /// The withdrawal is made, and the answer comes after the client gave up.
    SlowAfterAccepting,
    /// The withdrawal is made, and the answer is not JSON.
    MalformedAfterAccepting,
    /// A definite refusal (code 58350) with a 5,000-character message.
    LongRefusal,
}

#[derive(Debug, Clone)]
struct Made {
    client_id: String,
    wd_id: String,
    amt: String,
    chain: String,
    to_addr: String,
    lookups: u32,
    /// When it was made, in Unix milliseconds.
    ts: i64,
}

#[derive(Default)]
struct State {
    /// Available USDC, in cents.
    available: i64,
    made: Vec<Made>,
    /// The clientId of every withdrawal request received, in order, with when it came.
    posts: Vec<(String, Instant)>,
    faults: VecDeque<Fault>,
    /// Malformed answers to give to the next withdrawal-history requests.
    malformed_lookups: u32,
    bad_signatures: Vec<String>,
    /// The current withdrawal fee in USDC ("0.0123" when empty).
    fee: String,
    /// Chains OKX does not withdraw on now.
    cannot_withdraw: Vec<&'static str>,
    /// Minimum withdrawals by chain ("0.1" elsewhere).
    min_wd: HashMap<&'static str, &'static str>,
    /// The history lies: every withdrawal shows as 0.01 USDC to another address, settled
    /// under a transaction id that is no hash.
    lying_history: bool,
}

impl State {
    fn fee_text(&self) -> &str {
        if self.fee.is_empty() {
            "0.0123"
        } else {
            &self.fee
        }
    }

    /// The current fee in whole cents, rounded up as the provider rounds it.
    fn fee_cents(&self) -> i64 {
        let (whole, fraction) = self
            .fee_text()
            .split_once('.')
            .unwrap_or((self.fee_text(), "0"));
        let micro: i64 = format!("{fraction:0<6}")[..6].parse().expect("fee");
        whole.parse::<i64>().expect("fee") * 100 + (micro + 9_999) / 10_000
    }
}

/// A scripted OKX account.
struct FakeOkx {
    server: MockServer,
    state: Arc<Mutex<State>>,
}

struct Responder {
    endpoint: Endpoint,
    state: Arc<Mutex<State>>,
}

fn cents_of(amt: &str) -> i64 {
    let (whole, fraction) = amt.split_once('.').unwrap_or((amt, "00"));
    whole.parse::<i64>().expect("amount") * 100 + fraction.parse::<i64>().expect("cents")
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = self.state.lock().expect("state");
        if let Some(problem) = signature_problem(request, API_KEY, SECRET_KEY, PASSPHRASE) {
            state.bad_signatures.push(problem);
            return okx_error(401, "50113", "Invalid signature");
        }
        let query: HashMap<String, String> = request.url.query_pairs().into_owned().collect();
        match self.endpoint {
            Endpoint::Balances => {
                assert_eq!(query.get("ccy").map(String::as_str), Some("USDC"));
                let available = state.available;
                envelope(json!([{
                    "ccy": "USDC",
                    "bal": format!("{}.{:02}", available / 100, available % 100),
                    "frozenBal": "0",
                    // More decimals than cents: the provider rounds down.
                    "availBal": format!("{}.{:02}9999", available / 100, available % 100),
                }]))
            }
            Endpoint::DepositAddress => envelope(json!([
                {"addr": "0xtrading", "chain": "USDC-ERC20", "ccy": "USDC", "to": "18", "selected": false},
                {"addr": DEPOSIT_ADDRESS, "chain": "USDC-ERC20", "ccy": "USDC", "to": "6", "selected": true},
                {"addr": "0xpolygon", "chain": "USDC-Polygon", "ccy": "USDC", "to": "6", "selected": true},
            ])),
            Endpoint::Currencies => {
                let chains = [
                    "USDC-ERC20",
                    "USDC-Polygon",
                    "USDC-Base",
                    "USDC-Arbitrum One",
                    "USDC-Optimism",
                    "USDC-Solana",
                ];
                envelope(Value::Array(
                    chains
                        .iter()
                        .map(|chain| {
                            json!({"ccy": "USDC", "chain": chain,
                                   "canWd": !state.cannot_withdraw.contains(chain),
                                   "fee": state.fee_text(),
                                   "minWd": state.min_wd.get(chain).copied().unwrap_or("0.1"),
                                   "wdTickSz": "6"})
                        })
                        .collect(),
                ))
            }
            Endpoint::Withdrawal => {
                let body: Value = serde_json::from_slice(&request.body).expect("json body");
                let client_id = body["clientId"].as_str().unwrap_or("").to_owned();
                state.posts.push((client_id.clone(), Instant::now()));
                assert_eq!(body["ccy"], "USDC");
                assert_eq!(body["dest"], "4");
                assert!(
                    client_id.len() <= 32 && client_id.chars().all(|c| c.is_ascii_alphanumeric())
                );
                let fault = state.faults.pop_front();
                match fault {
                    Some(Fault::Http429) => return okx_error(429, "50011", "Too Many Requests"),
                    Some(Fault::Code50011) => {
                        return okx_error(
                            200,
                            "50011",
                            "Rate limit reached. Please refer to API documentation and throttle requests accordingly.",
                        );
                    }
                    Some(Fault::Http500) => {
                        return ResponseTemplate::new(500).set_body_string("Internal Server Error");
                    }
                    Some(Fault::LongRefusal) => {
                        return okx_error(200, "58350", &"Insufficient balance. ".repeat(250));
                    }
                    _ => {}
                }
                if state.made.iter().any(|m| m.client_id == client_id) {
                    // What OKX would do with a repeated clientId is not documented; a repeat
                    // here is the bug the tests look for, so it is made visible.
                    return okx_error(200, "58404", "ClientId already exists");
                }
                let offered = body["fee"].as_str().map(cents_of).unwrap_or(0);
                if offered < state.fee_cents() {
                    return okx_error(
                        200,
                        "58237",
                        &format!(
                            "Withdrawal fee {} is below the current fee {}",
                            body["fee"],
                            state.fee_text()
                        ),
                    );
                }
                let amt = body["amt"].as_str().expect("amt").to_owned();
                let wd_id = format!("{}", 7_000_000 + state.made.len());
                state.available -= cents_of(&amt) + offered;
                state.made.push(Made {
                    client_id: client_id.clone(),
                    wd_id: wd_id.clone(),
                    amt: amt.clone(),
                    chain: body["chain"].as_str().unwrap_or("").to_owned(),
                    to_addr: body["toAddr"].as_str().unwrap_or("").to_owned(),
                    lookups: 0,
                    ts: chrono::Utc::now().timestamp_millis(),
                });
                let ok = envelope(json!([{"amt": amt, "wdId": wd_id, "ccy": "USDC",
                                          "clientId": client_id, "chain": body["chain"]}]));
                match fault {
                    Some(Fault::SlowAfterAccepting) => ok.set_delay(Duration::from_secs(3)),
                    Some(Fault::MalformedAfterAccepting) => ResponseTemplate::new(200)
                        .insert_header("content-type", "application/json")
                        .set_body_string(format!(
                            r#"{{"code":"0","msg":"","data":[{{"wdId":"{wd_id}""#
                        )),
                    _ => ok,
                }
            }
            Endpoint::WithdrawalHistory => {
                if state.malformed_lookups > 0 {
                    state.malformed_lookups -= 1;
                    return ResponseTemplate::new(200).set_body_string("<html>gateway</html>");
                }
                // One client id, or a page of the history (newest first, `after` a ts).
                let client_id = query.get("clientId").cloned();
                let after: Option<i64> = query.get("after").and_then(|a| a.parse().ok());
                let limit: usize = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100);
                let lying_history = state.lying_history;
                let mut shown: Vec<&mut Made> = state
                    .made
                    .iter_mut()
                    .filter(|m| client_id.as_ref().is_none_or(|c| *c == m.client_id))
                    .filter(|m| after.is_none_or(|a| m.ts < a))
                    .collect();
                shown.sort_by_key(|m| std::cmp::Reverse(m.ts));
                shown.truncate(limit);
                let lying = lying_history;
                envelope(Value::Array(
                    shown
                        .into_iter()
                        .map(|made| {
                            made.lookups += 1;
                            // Broadcasting at the first look, on chain after.
                            let (st, tx) = if made.lookups == 1 {
                                ("1", String::new())
                            } else {
                                ("2", format!("0x{:0>64}", made.wd_id))
                            };
                            if lying {
                                return json!({
                                    "chain": made.chain, "fee": "0.0123", "feeCcy": "USDC", "ccy": "USDC",
                                    "clientId": made.client_id, "amt": "0.01",
                                    "txId": "0xabc\"><script>alert(1)</script>/../../evil",
                                    "to": "0x000000000000000000000000000000000000dEaD", "state": "2",
                                    "ts": made.ts.to_string(), "wdId": made.wd_id,
                                });
                            }
                            json!({
                                "chain": made.chain, "fee": "0.0123", "feeCcy": "USDC", "ccy": "USDC",
                                "clientId": made.client_id, "amt": made.amt, "txId": tx,
                                "to": made.to_addr, "state": st, "ts": made.ts.to_string(),
                                "wdId": made.wd_id,
                            })
                        })
                        .collect(),
                ))
            }
        }
    }
}

impl FakeOkx {
    async fn start(available_cents: i64) -> FakeOkx {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State {
            available: available_cents,
            ..State::default()
        }));
        mount(&server, |endpoint| Responder {
            endpoint,
            state: state.clone(),
        })
        .await;
        FakeOkx { server, state }
    }

    fn set(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().expect("state"));
    }

    fn fail_next_withdrawals(&self, faults: &[Fault]) {
        self.state.lock().expect("state").faults.extend(faults);
    }

    fn made(&self) -> Vec<Made> {
        self.state.lock().expect("state").made.clone()
    }

    fn posts(&self) -> Vec<(String, Instant)> {
        self.state.lock().expect("state").posts.clone()
    }

    fn assert_signed(&self) {
        let bad = self.state.lock().expect("state").bad_signatures.clone();
        assert!(bad.is_empty(), "badly signed requests: {bad:?}");
    }

    /// Each payout of the run was withdrawn exactly once, for its amount, to its wallet, under
    /// its client id; `posts` is how many withdrawal requests each client id may have taken.
    fn assert_paid_once(&self, payouts: &[Value], max_posts: usize) {
        let made = self.made();
        assert_eq!(made.len(), payouts.len(), "withdrawals made: {made:?}");
        let posts = self.posts();
        for p in payouts {
            let ours = p["client_withdrawal_id"]
                .as_str()
                .expect("client withdrawal id");
            let theirs = okx_client_id(ours);
            let matching: Vec<&Made> = made.iter().filter(|m| m.client_id == theirs).collect();
            assert_eq!(
                matching.len(),
                1,
                "{ours} withdrawn {} times",
                matching.len()
            );
            assert_eq!(
                cents_of(&matching[0].amt),
                p["amount_usd_cents"].as_i64().expect("amount")
            );
            assert_eq!(
                matching[0].to_addr,
                p["wallet_address"].as_str().expect("wallet")
            );
            let sent = posts.iter().filter(|(c, _)| *c == theirs).count();
            assert!(sent >= 1 && sent <= max_posts, "{ours} sent {sent} times");
        }
    }
}

/// The documented mapping, restated: the ULID, then the attempt in base 62.
fn okx_client_id(ours: &str) -> String {
    let rest = ours.strip_prefix("pay_").expect("payout id");
    let (ulid, attempt) = rest.split_once('-').expect("attempt");
    assert_eq!(attempt, "1", "first attempts only in these tests");
    format!("{ulid}1")
}

fn use_okx(settings: &mut Settings, okx: &FakeOkx) {
    settings.exchange.provider = "okx".into();
    settings.exchange.okx.base_url = okx.server.uri();
    settings.exchange.allow_insecure_http = true;
    settings.exchange.okx.api_key = API_KEY.into();
    settings.exchange.okx.secret_key = SECRET_KEY.into();
    settings.exchange.okx.passphrase = PASSPHRASE.into();
    settings.exchange.okx.timeout_ms = 500;
    settings.exchange.reconcile_grace_ms = 300;
    // OKX does not document refusing a repeated clientId: resends wait out this grace.
    settings.exchange.resend_grace_without_dedupe_ms = 1_500;
}

async fn okx_app(okx: &FakeOkx) -> TestApp {
    spawn_app_with(|s| use_okx(s, okx)).await
}

/// A run of `n` payees (1000, 2000, … cents on BASE), confirmed, funded by OKX's balance,
/// executed; returns its id.
async fn executed_run(app: &TestApp, n: usize) -> String {
    for i in 1..=n {
        app.create_employee(
            &format!("Okx {i}"),
            &format!("okx{i}@example.com"),
            1000 * i as i64,
        )
        .await;
    }
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
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

async fn completed(app: &TestApp, run_id: &str) -> Value {
    app.wait_for_run(run_id, 30, |r| r["status"] == "COMPLETED")
        .await
}

/// Waits for the run's own polling to complete it, reading it without forcing a sync (a sync
/// answers 502 while OKX's answers are unreadable).
async fn completed_on_its_own(app: &TestApp, run_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let res = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
        assert_eq!(res.status, 200, "{}", res.text);
        if res.data()["status"] == "COMPLETED" {
            return res.data().clone();
        }
        assert!(Instant::now() < deadline, "not completed: {}", res.text);
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn okx_balance_fees_and_deposit_address_are_read_from_the_account() {
    let okx = FakeOkx::start(1_234_567).await;
    let app = okx_app(&okx).await;
    let res = app.get("/api/v1/treasury/balance").await;
    assert_eq!(res.status, 200, "{}", res.text);
    let exchange = &res.data()["exchange"];
    assert_eq!(exchange["provider"], "okx");
    // "12345.679999" USDC: whole cents only, rounded down.
    assert_eq!(exchange["available_usd_cents"], 1_234_567);
    assert_eq!(exchange["deposit_address"], DEPOSIT_ADDRESS);
    assert_eq!(exchange["network"], "ETHEREUM");
    assert_eq!(res.data()["treasury_wallet"], Value::Null);

    // Fees are quoted at confirm: 0.0123 USDC rounds up to 2 cents.
    app.create_employee("Fee", "fee@example.com", 5000).await;
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let run_id = res.data()["id"].as_str().expect("id").to_owned();
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let listed = payouts(&app, &run_id).await;
    assert_eq!(listed[0]["fee_usd_cents"], 2, "{listed:?}");
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_treasury_transfers_are_refused_with_the_deposit_address() {
    let okx = FakeOkx::start(0).await;
    let app = okx_app(&okx).await;
    let res = app
        .post(
            "/api/v1/treasury/transfers",
            json!({"amount_usd_cents": 5000}),
        )
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "TREASURY_TRANSFER_UNSUPPORTED");
    assert_eq!(
        res.json["error"]["details"]["deposit_address"],
        DEPOSIT_ADDRESS
    );
    assert_eq!(res.json["error"]["details"]["network"], "ETHEREUM");
    let list = app.get("/api/v1/treasury/transfers").await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.data(), &json!([]));
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_pays_a_whole_run_once_per_payout() {
    let okx = FakeOkx::start(10_000_000).await;
    let app = okx_app(&okx).await;
    let run_id = executed_run(&app, 4).await;
    let done = completed(&app, &run_id).await;
    assert_eq!(done["payout_summary"]["completed"], 4, "{done}");
    let listed = payouts(&app, &run_id).await;
    okx.assert_paid_once(&listed, 1);
    for p in &listed {
        assert_eq!(p["status"], "COMPLETED");
        let tx = p["on_chain_tx_hash"].as_str().expect("tx hash");
        assert!(
            p["block_explorer_url"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://basescan.org/tx/")),
            "{p}"
        );
        assert!(tx.starts_with("0x"), "{p}");
        let made = okx
            .made()
            .into_iter()
            .find(|m| m.client_id == okx_client_id(p["client_withdrawal_id"].as_str().expect("id")))
            .expect("made");
        assert_eq!(p["cex_withdrawal_id"], made.wd_id.as_str());
        assert_eq!(made.chain, "USDC-Base");
    }
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_rate_limit_answers_back_off_and_withdraw_once() {
    let okx = FakeOkx::start(10_000_000).await;
    okx.fail_next_withdrawals(&[Fault::Http429, Fault::Code50011]);
    let app = okx_app(&okx).await;
    let run_id = executed_run(&app, 2).await;
    completed(&app, &run_id).await;
    let listed = payouts(&app, &run_id).await;
    // The first payout was refused twice (429, then 50011) and withdrawn on the third request.
    okx.assert_paid_once(&listed, 3);
    let posts = okx.posts();
    assert_eq!(posts.len(), 4, "{posts:?}");
    assert_eq!(posts[0].0, posts[1].0);
    assert_eq!(posts[1].0, posts[2].0);
    // Each rate-limit answer paused withdrawals (1 s when OKX does not say how long).
    assert!(
        posts[1].1 - posts[0].1 >= Duration::from_millis(900),
        "{posts:?}"
    );
    assert!(
        posts[2].1 - posts[1].1 >= Duration::from_millis(900),
        "{posts:?}"
    );
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_timeout_after_acceptance_is_looked_up_not_resent() {
    let okx = FakeOkx::start(10_000_000).await;
    okx.fail_next_withdrawals(&[Fault::SlowAfterAccepting]);
    let app = okx_app(&okx).await;
    let run_id = executed_run(&app, 1).await;
    let done = completed(&app, &run_id).await;
    assert_eq!(done["payout_summary"]["completed"], 1, "{done}");
    // OKX's late answer (3 s) was not waited for: the lookups settled the payout before it.
    let sent_at = okx.posts()[0].1;
    assert!(
        sent_at.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent_at.elapsed()
    );
    let listed = payouts(&app, &run_id).await;
    okx.assert_paid_once(&listed, 1);
    // Long past the reconcile grace: the lookup found it, so nothing was sent again.
    actix_web::rt::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(okx.posts().len(), 1);
    let history = okx
        .server
        .received_requests()
        .await
        .expect("recorded")
        .into_iter()
        .filter(|r| r.url.path() == "/api/v5/asset/withdrawal-history")
        .count();
    assert!(history >= 1);
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_5xx_before_acceptance_is_reconciled_then_withdrawn_once() {
    let okx = FakeOkx::start(10_000_000).await;
    okx.fail_next_withdrawals(&[Fault::Http500]);
    let app = okx_app(&okx).await;
    let run_id = executed_run(&app, 1).await;
    let done = completed(&app, &run_id).await;
    assert_eq!(done["payout_summary"]["completed"], 1, "{done}");
    let listed = payouts(&app, &run_id).await;
    // Sent, unknown at OKX after the grace, sent once more under the same client id.
    okx.assert_paid_once(&listed, 2);
    let posts = okx.posts();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(posts[0].0, posts[1].0);
    assert!(
        posts[1].1 - posts[0].1 >= Duration::from_millis(300),
        "{posts:?}"
    );
    okx.assert_signed();
}

#[actix_web::test]
async fn okx_malformed_json_is_ambiguous_not_fatal() {
    let okx = FakeOkx::start(10_000_000).await;
    okx.fail_next_withdrawals(&[Fault::MalformedAfterAccepting]);
    okx.state.lock().expect("state").malformed_lookups = 3;
    let app = okx_app(&okx).await;
    let run_id = executed_run(&app, 2).await;
    let done = completed_on_its_own(&app, &run_id).await;
    assert_eq!(done["payout_summary"]["completed"], 2, "{done}");
    assert_eq!(done["payout_summary"]["failed"], 0, "{done}");
    let listed = payouts(&app, &run_id).await;
    okx.assert_paid_once(&listed, 1);
    assert_eq!(okx.posts().len(), 2);
    okx.assert_signed();
}

/// `kill -9` of the server process while it pays a run over OKX: after a restart on the same
/// database every payout is withdrawn exactly once.
#[actix_web::test]
async fn okx_crash_restart_pays_each_payout_exactly_once() {
    const PAYOUTS: usize = 24;
    let okx = FakeOkx::start(100_000_000).await;
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__EXCHANGE__PROVIDER", "okx")
        .with_env("PAYROLL__EXCHANGE__OKX__BASE_URL", &okx.server.uri())
        .with_env("PAYROLL__EXCHANGE__ALLOW_INSECURE_HTTP", "true")
        .with_env("PAYROLL__EXCHANGE__OKX__API_KEY", API_KEY)
        .with_env("PAYROLL__EXCHANGE__OKX__SECRET_KEY", SECRET_KEY)
        .with_env("PAYROLL__EXCHANGE__OKX__PASSPHRASE", PASSPHRASE)
        .with_env("PAYROLL__EXCHANGE__OKX__TIMEOUT_MS", "1000");
    let first = setup.start(1).await;
    setup
        .import_employees(&first, "okxcrash", PAYOUTS, "ARBITRUM")
        .await;
    let (run_id, _) = setup.create_run(&first, 3).await;
    for step in ["confirm", "balance-check", "execute"] {
        setup.run_step(&first, &run_id, step).await;
    }
    // OKX's limit holds withdrawals to 6 a second: kill while the run is part-way.
    let deadline = Instant::now() + Duration::from_secs(30);
    while okx.made().len() < PAYOUTS / 3 {
        assert!(Instant::now() < deadline, "withdrawals did not start");
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    let mut first = first;
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reaped");
    let at_kill = okx.made().len();
    assert!(at_kill < PAYOUTS, "the run finished before the kill");

    let second = setup.start(2).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = setup.run_step(&second, &run_id, "sync").await;
        if run["data"]["status"] == "COMPLETED" {
            assert_eq!(run["data"]["payout_summary"]["completed"], PAYOUTS as i64);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "run not completed after restart (killed at {at_kill}): {run}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = setup
        .call(
            &second,
            "GET",
            &format!("/payroll-runs/{run_id}/payouts?limit=200"),
            None,
        )
        .await;
    let listed = listed["data"].as_array().expect("payouts").clone();
    assert_eq!(listed.len(), PAYOUTS);
    // One withdrawal request per payout: the one in flight at the kill was found by lookup.
    okx.assert_paid_once(&listed, 1);
    assert_eq!(okx.posts().len(), PAYOUTS, "killed at {at_kill}");
    okx.assert_signed();
    drop(second);
}

/// An employee on `network`, paid `salary` cents per regular run.
async fn employee_on(app: &TestApp, email: &str, network: &str, salary: i64) -> String {
    let res = app
        .post(
            "/api/v1/employees",
            json!({"name": email, "email": email, "salary_usd_cents": salary,
                   "network": network, "wallet_address": crate::helpers::evm_address(email)}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    res.data()["id"].as_str().expect("id").to_owned()
}

#[actix_web::test]
async fn okx_networks_and_minimums_are_checked_per_payee_chain_at_confirm() {
    let okx = FakeOkx::start(10_000_000).await;
    okx.set(|s| {
        s.cannot_withdraw = vec!["USDC-Polygon"];
        s.min_wd = HashMap::from([("USDC-Base", "5")]);
    });
    let app = okx_app(&okx).await;
    let polygon = employee_on(&app, "poly@example.com", "POLYGON", 5_000).await;
    let base = employee_on(&app, "base@example.com", "BASE", 300).await;
    // 300 cents is above Ethereum's minimum (10 cents), whatever Base's is.
    employee_on(&app, "eth@example.com", "ETHEREUM", 300).await;
    let run_id = app
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "STATE_CONFLICT");
    let listed = payouts(&app, &run_id).await;
    let payout_of = |employee: &str| {
        listed
            .iter()
            .find(|p| p["employee_id"] == employee)
            .and_then(|p| p["id"].as_str())
            .expect("payout")
            .to_owned()
    };
    let mut fields = res.invalid_fields();
    fields.sort();
    let mut expected = vec![
        format!("payouts[{}].network", payout_of(&polygon)),
        format!("payouts[{}].amount_usd_cents", payout_of(&base)),
    ];
    expected.sort();
    assert_eq!(fields, expected, "{}", res.text);
    assert_eq!(
        app.get(&format!("/api/v1/payroll-runs/{run_id}"))
            .await
            .data()["status"],
        "DRAFT"
    );
}

#[actix_web::test]
async fn okx_a_refused_fee_fails_the_attempt_and_a_retry_pays_the_current_fee() {
    let okx = FakeOkx::start(10_000_000).await;
    let app = okx_app(&okx).await;
    app.create_employee("Fee", "fee@example.com", 5_000).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    assert_eq!(payouts(&app, &run_id).await[0]["fee_usd_cents"], 2);
    // OKX raises its fee between confirm and execute.
    okx.set(|s| s.fee = "0.05".into());
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "FAILED")
        .await;
    let failed = payouts(&app, &run_id).await;
    let reason = failed[0]["failed_reason"].as_str().expect("reason");
    assert!(reason.starts_with("fee_changed: "), "{reason}");
    assert!(okx.made().is_empty(), "nothing was withdrawn");
    let balance = app.get("/api/v1/treasury/balance").await;
    assert_eq!(balance.data()["exchange"]["reserved_usd_cents"], 0);

    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/retry-failed"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    completed(&app, &run_id).await;
    let paid = payouts(&app, &run_id).await;
    assert_eq!(paid[0]["fee_usd_cents"], 5);
    assert_eq!(paid[0]["attempt"], 2);
    assert_eq!(okx.made().len(), 1);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["total_fees_usd_cents"], 5);
}

/// The exchange's word is checked (CONTRACT §7): an OKX that accepts a withdrawal and then
/// reports it settled as 0.01 USDC to another address, under a transaction id that is no hash,
/// completes nothing: the payout is stuck for an operator (`mismatch: …`, an audit entry), no
/// hash or link is kept, and the run stays PAYING_OUT. A 5 KB error message is cut to 500
/// characters where it is stored.
#[actix_web::test]
async fn okx_a_history_that_lies_completes_nothing_and_its_text_is_cut() {
    let okx = FakeOkx::start(10_000_000).await;
    let app = okx_app(&okx).await;
    okx.set(|s| s.lying_history = true);
    let run_id = executed_run(&app, 1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let payout = loop {
        let res = app
            .act(&format!("/api/v1/payroll-runs/{run_id}/sync"))
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
        let payouts = payouts(&app, &run_id).await;
        if payouts[0]["stuck_since"].is_string() {
            break payouts[0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not stuck: {payouts:?}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(payout["status"], "COMPLETED", "{payout}");
    assert!(payout["on_chain_tx_hash"].is_null(), "{payout}");
    assert!(payout["block_explorer_url"].is_null(), "{payout}");
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "PAYING_OUT", "{}", run.text);
    let audit = app.get("/api/v1/audit-log?action=PAYOUT_STUCK").await;
    let entry = &audit.data()[0];
    let reason = entry["details"]["stuck_reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("mismatch: "), "{entry}");
    assert!(reason.contains("amount 1 cents"), "{reason}");
    assert!(
        reason.contains("0x000000000000000000000000000000000000dEaD"),
        "{reason}"
    );
}

/// Text an exchange sends is cut to 500 characters where it is stored (CONTRACT §7): a
/// refusal with a 5,000-character message fails the payout with a reason of at most that.
#[actix_web::test]
async fn okx_a_long_refusal_is_stored_cut() {
    let okx = FakeOkx::start(10_000_000).await;
    let app = okx_app(&okx).await;
    okx.fail_next_withdrawals(&[Fault::LongRefusal]);
    let run_id = executed_run(&app, 1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let payouts = payouts(&app, &run_id).await;
        if payouts[0]["status"] == "FAILED" {
            let reason = payouts[0]["failed_reason"].as_str().unwrap_or("");
            assert!(
                reason.chars().count() <= 501,
                "{} characters",
                reason.chars().count()
            );
            assert!(reason.contains("58350"), "{reason}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not failed: {payouts:?}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}
