//! Exactly once against an exchange that misbehaves (CONTRACT §7): a stand-in speaking the OKX
//! v5 endpoints the provider uses, with seeded faults: it hangs after accepting a withdrawal
//! (the answer comes after the client gave up), answers 5xx or "rate limited" before accepting,
//! shows a withdrawal in its history only some time after making it, answers a repeated
//! client id with an error, or (worse) does not deduplicate client ids at all, or never
//! learns of a send. It counts every withdrawal it makes, per payout: the tests hold that
//! count, not ours, to at most one.
//!
//! Seeds are fixed, so CI is repeatable; `PAYROLL_FAULTY_SEED` and `PAYROLL_FAULTY_PAYOUTS`
//! run other and heavier ones by hand.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use payroll_actors::exchange::okx::protocol::to_okx_client_id;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use crate::{
    okx_standin::{Endpoint, envelope, mount, okx_error},
    process::{Server, Setup},
    providers::scenarios::{operate_until_completed, process_payouts as payouts},
};

/// What the stand-in does wrong, and how often.
#[derive(Debug, Clone, Copy)]
struct Faults {
    /// Makes the withdrawal, then answers after the client gave up.
    hang: f64,
    /// Answers 503 before making anything.
    unavailable: f64,
    /// Answers 429 (code 50011) before making anything.
    rate_limited: f64,
    /// Never makes anything: every send is answered 503.
    never_learns: bool,
    /// Makes a second withdrawal for a client id it already has (no deduplication).
    no_dedupe: bool,
    /// Refuses our credentials (401, code 50113) on every withdrawal.
    credentials_refused: bool,
    /// Withdrawals and the history answer 503: the exchange cannot be reached.
    down: bool,
    /// A withdrawal shows in the history this long after it was made.
    history_lag_ms: i64,
    /// And is on chain this long after it was made.
    settle_ms: i64,
}

impl Faults {
    /// The exchange behaves again (it still deduplicates nothing and lags as before).
    fn cleared() -> Faults {
        Faults {
            hang: 0.0,
            unavailable: 0.0,
            rate_limited: 0.0,
            ..Faults::all()
        }
    }

    fn all() -> Faults {
        Faults {
            hang: 0.15,
            unavailable: 0.10,
            rate_limited: 0.10,
            never_learns: false,
            no_dedupe: true,
            credentials_refused: false,
            down: false,
            history_lag_ms: 400,
            settle_ms: 600,
        }
    }
}

/// How long a hung answer takes: longer than the provider waits (`exchange.okx.timeout_ms`).
const HANG_MS: u64 = 900;
const TIMEOUT_MS: &str = "300";
/// Longer than the timeout and the history's lag together: a resend is never due while the
/// first send may still show up.
const GRACE_MS: &str = "1500";
/// OKX does not document refusing a repeated clientId, so an id is resent only after look-ups
/// missed it this long (and at least three times).
const RESEND_GRACE_MS: &str = "1500";

#[derive(Debug, Clone)]
struct Made {
    client_id: String,
    wd_id: String,
    amt: String,
    chain: String,
    to_addr: String,
    ts: i64,
}

struct State {
    faults: Faults,
    rng: StdRng,
    made: Vec<Made>,
    /// Withdrawal requests received, by client id.
    posts: HashMap<String, u32>,
}

struct Responder {
    endpoint: Endpoint,
    state: Arc<Mutex<State>>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = self.state.lock().expect("state");
        let query: HashMap<String, String> = request.url.query_pairs().into_owned().collect();
        match self.endpoint {
            Endpoint::Balances => envelope(json!([{
                "ccy": "USDC", "bal": "100000000.00", "frozenBal": "0", "availBal": "100000000.00",
            }])),
            Endpoint::DepositAddress => envelope(json!([{
                "addr": "0xd3b0000000000000000000000000000000000001", "chain": "USDC-ERC20",
                "ccy": "USDC", "to": "6", "selected": true,
            }])),
            Endpoint::Currencies => envelope(json!([
                {"ccy": "USDC", "chain": "USDC-Arbitrum One", "canWd": true, "fee": "0.01",
                 "minWd": "0.01", "wdTickSz": "6"},
                {"ccy": "USDC", "chain": "USDC-ERC20", "canWd": true, "fee": "0.01",
                 "minWd": "0.01", "wdTickSz": "6"},
            ])),
            Endpoint::Withdrawal => {
                let body: Value = serde_json::from_slice(&request.body).expect("json body");
                let client_id = body["clientId"].as_str().unwrap_or("").to_owned();
                *state.posts.entry(client_id.clone()).or_default() += 1;
                if state.faults.credentials_refused {
                    return okx_error(401, "50113", "Invalid Sign");
                }
                if state.faults.never_learns || state.faults.down {
                    return ResponseTemplate::new(503).set_body_string("Service Unavailable");
                }
                let faults = state.faults;
                let roll: f64 = state.rng.r#gen();
                if roll < faults.unavailable {
                    return ResponseTemplate::new(503).set_body_string("Service Unavailable");
                }
                if roll < faults.unavailable + faults.rate_limited {
                    return okx_error(429, "50011", "Too Many Requests");
                }
                let hang = roll < faults.unavailable + faults.rate_limited + faults.hang;
                if !faults.no_dedupe && state.made.iter().any(|m| m.client_id == client_id) {
                    return okx_error(200, "58404", "ClientId already exists");
                }
                let wd_id = format!("{}", 9_000_000 + state.made.len());
                let made = Made {
                    client_id: client_id.clone(),
                    wd_id: wd_id.clone(),
                    amt: body["amt"].as_str().unwrap_or("0").to_owned(),
                    chain: body["chain"].as_str().unwrap_or("").to_owned(),
                    to_addr: body["toAddr"].as_str().unwrap_or("").to_owned(),
                    ts: now_ms(),
                };
                state.made.push(made);
                let ok = envelope(json!([{"amt": body["amt"], "wdId": wd_id, "ccy": "USDC",
                                          "clientId": client_id, "chain": body["chain"]}]));
                if hang {
                    ok.set_delay(Duration::from_millis(HANG_MS))
                } else {
                    ok
                }
            }
            Endpoint::WithdrawalHistory => {
                if state.faults.down {
                    return ResponseTemplate::new(503).set_body_string("Service Unavailable");
                }
                let now = now_ms();
                let lag = state.faults.history_lag_ms;
                let settle = state.faults.settle_ms;
                let client_id = query.get("clientId").cloned();
                let after: Option<i64> = query.get("after").and_then(|a| a.parse().ok());
                let limit: usize = query
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100);
                let mut shown: Vec<&Made> = state
                    .made
                    .iter()
                    .filter(|m| now - m.ts >= lag)
                    .filter(|m| client_id.as_ref().is_none_or(|c| *c == m.client_id))
                    .filter(|m| after.is_none_or(|a| m.ts < a))
                    .collect();
                shown.sort_by_key(|m| std::cmp::Reverse(m.ts));
                shown.truncate(limit);
                envelope(Value::Array(
                    shown
                        .into_iter()
                        .map(|m| {
                            let on_chain = now - m.ts >= settle;
                            json!({
                                "chain": m.chain, "fee": "0.01", "feeCcy": "USDC", "ccy": "USDC",
                                "clientId": m.client_id, "amt": m.amt, "to": m.to_addr,
                                "txId": if on_chain { format!("0x{:0>64}", m.wd_id) } else { String::new() },
                                "state": if on_chain { "2" } else { "0" },
                                "ts": m.ts.to_string(), "wdId": m.wd_id,
                            })
                        })
                        .collect(),
                ))
            }
        }
    }
}

struct FaultyOkx {
    server: MockServer,
    state: Arc<Mutex<State>>,
}

impl FaultyOkx {
    async fn start(seed: u64, faults: Faults) -> FaultyOkx {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State {
            faults,
            rng: StdRng::seed_from_u64(seed),
            made: Vec::new(),
            posts: HashMap::new(),
        }));
        mount(&server, |endpoint| Responder {
            endpoint,
            state: state.clone(),
        })
        .await;
        FaultyOkx { server, state }
    }

    fn set_faults(&self, faults: Faults) {
        self.state.lock().expect("state").faults = faults;
    }

    /// Withdrawals made, by payout (the ULID every attempt's client id starts with).
    fn made_per_payout(&self) -> HashMap<String, usize> {
        let mut count = HashMap::new();
        for m in &self.state.lock().expect("state").made {
            *count.entry(m.client_id[..26].to_owned()).or_default() += 1;
        }
        count
    }

    /// Whether the exchange made a withdrawal under this client id of ours.
    fn has(&self, client_id: &str) -> bool {
        let theirs = to_okx_client_id(client_id).expect("client id");
        self.state
            .lock()
            .expect("state")
            .made
            .iter()
            .any(|m| m.client_id == theirs)
    }

    fn posts_of(&self, client_id: &str) -> u32 {
        let theirs = to_okx_client_id(client_id).expect("client id");
        self.state
            .lock()
            .expect("state")
            .posts
            .get(&theirs)
            .copied()
            .unwrap_or(0)
    }
}

fn seed() -> u64 {
    std::env::var("PAYROLL_FAULTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_124)
}

fn payout_count(default: usize) -> usize {
    std::env::var("PAYROLL_FAULTY_PAYOUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

async fn setup_for(okx: &FaultyOkx, extra: &[(&str, &str)]) -> Setup {
    let mut setup = Setup::new()
        .await
        .with_env("PAYROLL__EXCHANGE__PROVIDER", "okx")
        .with_env("PAYROLL__EXCHANGE__OKX__BASE_URL", &okx.server.uri())
        .with_env("PAYROLL__EXCHANGE__ALLOW_INSECURE_HTTP", "true")
        .with_env("PAYROLL__EXCHANGE__OKX__API_KEY", "faulty-key")
        .with_env("PAYROLL__EXCHANGE__OKX__SECRET_KEY", "faulty-secret")
        .with_env("PAYROLL__EXCHANGE__OKX__PASSPHRASE", "faulty-passphrase")
        .with_env("PAYROLL__EXCHANGE__OKX__TIMEOUT_MS", TIMEOUT_MS)
        .with_env("PAYROLL__EXCHANGE__RECONCILE_GRACE_MS", GRACE_MS)
        .with_env("PAYROLL__EXCHANGE__MAX_SENDS", "3")
        // OKX does not document refusing a repeated clientId: resends wait out this grace.
        .with_env(
            "PAYROLL__EXCHANGE__RESEND_GRACE_WITHOUT_DEDUPE_MS",
            RESEND_GRACE_MS,
        )
        .with_env("PAYROLL__EXCHANGE__MAX_SENDS_WITHOUT_DEDUPE", "3");
    for (name, value) in extra {
        setup = setup.with_env(name, value);
    }
    setup
}

/// Follows the run to COMPLETED as an operator would (stuck payouts resolved by a look at the
/// stand-in, a FAILED run retried).
async fn operate_to_completion(
    setup: &Setup,
    server: &Server,
    okx: &FaultyOkx,
    run_id: &str,
    seconds: u64,
) -> Vec<Value> {
    operate_until_completed(setup, server, run_id, seconds, async |client_id: &str| {
        okx.has(client_id)
    })
    .await
}

/// The stand-in's own count: every payout withdrawn exactly once, whatever was resent.
fn assert_each_paid_once(okx: &FaultyOkx, payouts: &[Value]) {
    let made = okx.made_per_payout();
    for p in payouts {
        assert_eq!(p["status"], "COMPLETED", "{p}");
        let id = p["id"].as_str().expect("id");
        let times = made.get(&id["pay_".len()..]).copied().unwrap_or(0);
        assert_eq!(times, 1, "{id} was withdrawn {times} times");
    }
    let total: usize = made.values().sum();
    assert_eq!(total, payouts.len(), "withdrawals made for unknown payouts");
}

async fn start_paying(setup: &Setup, server: &Server, count: usize) -> String {
    setup
        .import_employees(server, "faulty", count, "ARBITRUM")
        .await;
    let (run_id, _) = setup.create_run(server, 3).await;
    for step in ["confirm", "balance-check", "execute"] {
        setup.run_step(server, &run_id, step).await;
    }
    run_id
}

#[actix_web::test]
async fn every_fault_at_once_and_each_payout_is_withdrawn_once() {
    let count = payout_count(90);
    let okx = FaultyOkx::start(seed(), Faults::all()).await;
    let setup = setup_for(&okx, &[]).await;
    let server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, count).await;
    let paid = operate_to_completion(&setup, &server, &okx, &run_id, 240).await;
    assert_eq!(paid.len(), count);
    assert_each_paid_once(&okx, &paid);
}

#[actix_web::test]
async fn every_fault_and_kill_9_during_execution_withdraws_each_payout_once() {
    let count = payout_count(90);
    // This one deduplicates client ids as a careful exchange would: a resend of a withdrawal
    // it made is answered with an error (code 58404), which proves nothing either way.
    let okx = FaultyOkx::start(
        seed() + 1,
        Faults {
            no_dedupe: false,
            ..Faults::all()
        },
    )
    .await;
    let setup = setup_for(&okx, &[]).await;
    let mut server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, count).await;
    for kill in 0..3 {
        // Part-way through each time: the exchange has made some more withdrawals.
        let target = (kill + 1) * count / 5;
        let deadline = Instant::now() + Duration::from_secs(120);
        while okx.made_per_payout().len() < target {
            assert!(
                Instant::now() < deadline,
                "withdrawals stalled before kill {kill}"
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
        server.child.kill().expect("kill -9");
        server.child.wait().expect("reaped");
        server = setup.start(1).await;
    }
    let paid = operate_to_completion(&setup, &server, &okx, &run_id, 300).await;
    assert_eq!(paid.len(), count);
    assert_each_paid_once(&okx, &paid);
}

#[actix_web::test]
async fn a_send_the_exchange_never_learns_of_is_resent_then_stuck_then_resolved() {
    let okx = FaultyOkx::start(
        seed(),
        Faults {
            never_learns: true,
            ..Faults::all()
        },
    )
    .await;
    let setup = setup_for(&okx, &[("PAYROLL__EXCHANGE__RECONCILE_GRACE_MS", "400")]).await;
    let server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, 2).await;
    // Sent, resent after the grace, resent again, then stuck: three sends, never more.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stuck = loop {
        setup.run_step(&server, &run_id, "sync").await;
        let listed = payouts(&setup, &server, &run_id).await;
        if listed.iter().all(|p| !p["stuck_since"].is_null()) {
            break listed;
        }
        assert!(
            Instant::now() < deadline,
            "not stuck: {listed:?}\n--- server log:\n{}",
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    for p in &stuck {
        assert_eq!(p["status"], "PENDING");
        let client_id = p["client_withdrawal_id"].as_str().expect("client id");
        assert_eq!(okx.posts_of(client_id), 3, "{client_id}: sent three times");
    }
    // Stuck payouts are never sent again on their own, and the run waits.
    actix_web::rt::time::sleep(Duration::from_millis(1_500)).await;
    for p in &stuck {
        let client_id = p["client_withdrawal_id"].as_str().expect("client id");
        assert_eq!(okx.posts_of(client_id), 3);
    }
    let run = setup.run_step(&server, &run_id, "sync").await;
    assert_eq!(run["data"]["status"], "PAYING_OUT");

    // Reported: event, audit entry, metric, the status page.
    let events = setup
        .call(&server, "GET", "/events?type=payout.stuck", None)
        .await;
    assert_eq!(events["data"].as_array().map(Vec::len), Some(2), "{events}");
    let audit = setup
        .call(&server, "GET", "/audit-log?action=PAYOUT_STUCK", None)
        .await;
    assert_eq!(audit["data"].as_array().map(Vec::len), Some(2), "{audit}");
    assert_eq!(audit["data"][0]["actor_type"], "SYSTEM");
    let client = awc::Client::default();
    let metrics = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("metrics")
        .body()
        .await
        .expect("body");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("payroll_stuck_payouts_reported_total 2"),
        "{metrics}"
    );
    let page = client
        .get(format!("{}/status", server.base))
        .insert_header(("Authorization", format!("Bearer {}", setup.key)))
        .send()
        .await
        .expect("status")
        .body()
        .await
        .expect("body");
    let page = String::from_utf8_lossy(&page);
    for p in &stuck {
        assert!(page.contains(p["id"].as_str().expect("id")), "{page}");
    }

    // An operator resolves them: one paid elsewhere, one not at all; the run ends FAILED, and
    // retrying the failed one (the exchange works again) completes it.
    let (paid, unpaid) = (&stuck[0], &stuck[1]);
    // Only a hash in the payout's chain's form is taken: it goes into links and exports.
    let (status, refused) = setup
        .try_call(
            &server,
            "POST",
            &format!("/payouts/{}/resolve", paid["id"].as_str().expect("id")),
            Some(json!({"outcome": "completed", "on_chain_tx_hash": "0xfeed\"><script>", "note": "paid by hand"})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["details"]["validation_errors"][0]["field"], "on_chain_tx_hash",
        "{refused}"
    );
    let network: payroll_entities::Network =
        serde_json::from_value(paid["network"].clone()).expect("network");
    let hash = payroll_actors::exchange::sandbox::tx_hash(network, "paid by hand");
    let resolved = setup
        .call(
            &server,
            "POST",
            &format!("/payouts/{}/resolve", paid["id"].as_str().expect("id")),
            Some(json!({"outcome": "completed", "on_chain_tx_hash": hash, "note": "paid by hand"})),
        )
        .await;
    assert_eq!(resolved["data"]["status"], "COMPLETED");
    assert_eq!(resolved["data"]["on_chain_tx_hash"], hash);
    assert!(
        resolved["data"]["block_explorer_url"]
            .as_str()
            .is_some_and(|url| url.ends_with(&hash)),
        "{resolved}"
    );
    assert_eq!(resolved["data"]["stuck_since"], Value::Null);
    let resolved = setup
        .call(
            &server,
            "POST",
            &format!("/payouts/{}/resolve", unpaid["id"].as_str().expect("id")),
            Some(json!({"outcome": "failed", "note": "not in the exchange's history"})),
        )
        .await;
    assert_eq!(resolved["data"]["status"], "FAILED");
    assert_eq!(
        resolved["data"]["failed_reason"],
        "resolved_failed: not in the exchange's history"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run = setup.run_step(&server, &run_id, "sync").await;
        if run["data"]["status"] == "FAILED" {
            break;
        }
        assert!(Instant::now() < deadline, "run not failed: {run}");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    okx.set_faults(Faults::cleared());
    setup.run_step(&server, &run_id, "retry-failed").await;
    let paid_out = operate_to_completion(&setup, &server, &okx, &run_id, 60).await;
    assert!(paid_out.iter().all(|p| p["status"] == "COMPLETED"));
    let balance = setup.call(&server, "GET", "/treasury/balance", None).await;
    assert_eq!(balance["data"]["exchange"]["reserved_usd_cents"], 0);
}

/// Sends a signal to a server process (`STOP` or `CONT`).
fn signal(server: &Server, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(server.child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name}");
}

#[actix_web::test]
async fn two_instances_and_a_holder_that_lost_its_lease_withdraw_each_payout_once() {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "two instances share one PostgreSQL database: \
             set PAYROLL_TEST_DATABASE_URL (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let count = payout_count(90);
    let okx = FaultyOkx::start(seed() + 2, Faults::all()).await;
    let setup = setup_for(&okx, &[]).await;
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    let run_id = start_paying(&setup, &first, count).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while okx.made_per_payout().len() < count / 4 {
        assert!(Instant::now() < deadline, "withdrawals did not start");
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    // The holder freezes with withdrawals queued behind OKX's rate limit; its lease runs out
    // and the other instance takes the run over. When it wakes, what it had queued must not
    // leave: it no longer holds the run.
    signal(&first, "STOP");
    actix_web::rt::time::sleep(Duration::from_millis(4_000)).await;
    signal(&first, "CONT");
    let paid = operate_to_completion(&setup, &second, &okx, &run_id, 300).await;
    assert_eq!(paid.len(), count);
    assert_each_paid_once(&okx, &paid);
    drop(first);
}

#[actix_web::test]
async fn only_a_stuck_payout_can_be_resolved() {
    let app = crate::helpers::spawn_app().await;
    app.create_employee("A", "a@example.com", 1_000).await;
    app.fund(1_000).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let listed = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let payout_id = listed.data()[0]["id"].as_str().expect("id").to_owned();
    let path = format!("/api/v1/payouts/{payout_id}/resolve");
    let res = app.post(&path, json!({"outcome": "completed"})).await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    let res = app.post(&path, json!({})).await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["outcome"]);
    let res = app
        .post(
            &path,
            json!({"outcome": "failed", "on_chain_tx_hash": "0x1", "mood": 1}),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    let mut fields = res.invalid_fields();
    fields.sort();
    assert_eq!(fields, vec!["mood", "on_chain_tx_hash"]);
    let (reader, _) = app.key_with(&["payroll:read"]).await;
    let res = app
        .write_as(&reader, "POST", &path, json!({"outcome": "failed"}))
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
}

/// The job of a run, as the API shows it.
async fn job_of(setup: &Setup, server: &Server, run_id: &str) -> Value {
    let run = setup
        .call(server, "GET", &format!("/payroll-runs/{run_id}"), None)
        .await;
    let job_id = run["data"]["job"]["job_id"]
        .as_str()
        .expect("job")
        .to_owned();
    setup
        .call(server, "GET", &format!("/jobs/{job_id}"), None)
        .await["data"]
        .clone()
}

async fn wait_for_status(setup: &Setup, server: &Server, run_id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, run) = setup
            .try_call(
                server,
                "POST",
                &format!("/payroll-runs/{run_id}/sync"),
                None,
            )
            .await;
        if code == 200 && run["data"]["status"] == status {
            return run["data"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "run not {status}: {run}\n--- server log:\n{}",
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn a_job_whose_credentials_are_refused_fails_and_retry_resumes_it() {
    let okx = FaultyOkx::start(
        seed(),
        Faults {
            credentials_refused: true,
            ..Faults::all()
        },
    )
    .await;
    let setup = setup_for(&okx, &[]).await;
    let server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, 20).await;
    let run = wait_for_status(&setup, &server, &run_id, "FAILED").await;
    assert_eq!(run["payout_summary"]["failed"], 20);
    let job = job_of(&setup, &server, &run_id).await;
    assert_eq!(job["status"], "FAILED", "{job}");
    for p in payouts(&setup, &server, &run_id).await {
        let reason = p["failed_reason"].as_str().expect("reason");
        assert!(reason.starts_with("job_failed: "), "{reason}");
    }
    // Nothing was withdrawn.
    assert!(okx.made_per_payout().is_empty());
    // Credentials fixed: retry-failed pays every payout once.
    okx.set_faults(Faults::cleared());
    setup.run_step(&server, &run_id, "retry-failed").await;
    let paid = operate_to_completion(&setup, &server, &okx, &run_id, 60).await;
    assert_each_paid_once(&okx, &paid);
}

#[actix_web::test]
async fn a_job_that_cannot_reach_the_exchange_fails_and_its_sent_payouts_are_followed() {
    let okx = FaultyOkx::start(
        seed(),
        Faults {
            down: true,
            ..Faults::all()
        },
    )
    .await;
    let setup = setup_for(
        &okx,
        &[
            ("PAYROLL__EXCHANGE__UNREACHABLE_FAIL_MS", "1500"),
            ("PAYROLL__EXCHANGE__IN_FLIGHT_WINDOW", "4"),
        ],
    )
    .await;
    let server = setup.start(1).await;
    let run_id = start_paying(&setup, &server, 20).await;
    // The job fails once the exchange has been away long enough; what was sent is followed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let job = loop {
        let job = job_of(&setup, &server, &run_id).await;
        if job["status"] == "FAILED" {
            break job;
        }
        assert!(Instant::now() < deadline, "job not failed: {job}");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        job["failed_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("job_failed: the exchange could not be reached")),
        "{job}"
    );
    let listed = payouts(&setup, &server, &run_id).await;
    let job_failed = listed
        .iter()
        .filter(|p| {
            p["failed_reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("job_failed: "))
        })
        .count();
    let sent = listed.iter().filter(|p| p["status"] == "PENDING").count();
    assert!(job_failed > 0 && sent > 0, "{listed:?}");
    assert_eq!(job_failed + sent, 20);
    // The exchange comes back: the sent ones are looked up and sent again, the run ends FAILED
    // for the others, and retry-failed pays them.
    okx.set_faults(Faults::cleared());
    wait_for_status(&setup, &server, &run_id, "FAILED").await;
    let paid = operate_to_completion(&setup, &server, &okx, &run_id, 60).await;
    assert_each_paid_once(&okx, &paid);
}
