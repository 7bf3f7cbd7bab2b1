//! A property test of the funds ledger (CONTRACT §7) against the real service and its sandbox
//! exchange: random interleavings of balance checks, executions (left running), cancels,
//! retries, transfers, outside adjustments and withdrawal outcomes (payees whose withdrawals
//! the exchange fails after accepting them). A model keeps what is free; the service must agree
//! with it:
//! - every figure it shows (treasury balance, balance checks, transfer refusals) lies between
//!   what the model knows is free and that plus the refunds still to come, so an accepted
//!   withdrawal is never counted both as gone and as held;
//! - a run funded within what is free is never refused, and nothing leaves that is held;
//! - the reserved counter always equals Σ active holds, and once nothing is in flight
//!   Σ holds = Σ required of funded unpaid attempts and the treasury shows exactly the model;
//! - money is conserved in the sandbox: both balances plus what withdrawals took equal what
//!   was there plus what was adjusted from outside.
//!
//! Cases are generated from a fixed seed, so CI is repeatable; `PAYROLL_PROPTEST_CASES` runs
//! more of them by hand.

use std::time::Duration;

use payroll_entities::{SandboxAccount, db::Db};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestRng, TestRunner},
};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};

use crate::helpers::{TestApp, evm_address, spawn_app_with};

const FEE: i64 = 3;
const FUNDED: i64 = 12_000;
const TREASURY_START: i64 = 10_000_000;
const EMPLOYEES: usize = 6;
/// Employees 4 and 5 are paid to addresses the exchange fails after accepting.
const FAILING_FROM: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    NewRun { amounts: Vec<i64>, offset: u8 },
    BalanceCheck(u8),
    Execute(u8),
    CancelRun(u8),
    CancelPayout(u8, u8),
    RetryFailed(u8),
    ToTreasury(i64),
    ToExchange(i64),
    Adjust(i64),
    ReadTreasury,
    Settle,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop::collection::vec(1i64..=3_000, 1..=3), any::<u8>())
            .prop_map(|(amounts, offset)| Op::NewRun { amounts, offset }),
        5 => any::<u8>().prop_map(Op::BalanceCheck),
        5 => any::<u8>().prop_map(Op::Execute),
        1 => any::<u8>().prop_map(Op::CancelRun),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(r, p)| Op::CancelPayout(r, p)),
        1 => any::<u8>().prop_map(Op::RetryFailed),
        2 => (1i64..=6_000).prop_map(Op::ToTreasury),
        1 => (1i64..=6_000).prop_map(Op::ToExchange),
        1 => (-6_000i64..=6_000).prop_map(Op::Adjust),
        2 => Just(Op::ReadTreasury),
        2 => Just(Op::Settle),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PayoutState {
    Pending,
    InFlight,
    Paid,
    Failed,
    Cancelled,
}

#[derive(Debug)]
struct PayoutModel {
    id: String,
    cost: i64,
    failing: bool,
    state: PayoutState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunState {
    Confirmed,
    Deposited,
    PayingOut,
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug)]
struct RunModel {
    id: String,
    state: RunState,
    payouts: Vec<PayoutModel>,
}

impl RunModel {
    fn pending_cost(&self) -> i64 {
        self.payouts
            .iter()
            .filter(|p| p.state == PayoutState::Pending)
            .map(|p| p.cost)
            .sum()
    }
}

struct Model {
    /// What is free for certain: exchange balance − Σ holds, refunds still to come left out.
    free: i64,
    adjusted: i64,
    runs: Vec<RunModel>,
}

impl Model {
    /// Refunds that may arrive at any moment: failing payouts handed to the exchange.
    fn refunds_to_come(&self) -> i64 {
        self.runs
            .iter()
            .flat_map(|r| &r.payouts)
            .filter(|p| p.failing && p.state == PayoutState::InFlight)
            .map(|p| p.cost)
            .sum()
    }

    fn bounds(&self) -> (i64, i64) {
        (self.free, self.free + self.refunds_to_come())
    }

    /// The run an op's index names, if there is any run: three times in four one in `state`
    /// (where there is one), so that sequences get somewhere; else any run.
    fn pick(&self, index: u8, state: RunState) -> Option<usize> {
        let fitting: Vec<usize> = (0..self.runs.len())
            .filter(|i| self.runs[*i].state == state)
            .collect();
        if !fitting.is_empty() && !index.is_multiple_of(4) {
            return Some(fitting[index as usize / 4 % fitting.len()]);
        }
        (!self.runs.is_empty()).then(|| index as usize % self.runs.len())
    }
}

async fn scalar(db: &Db, sql: &str) -> i64 {
    let row = db
        .conn
        .query_one_raw(Statement::from_string(db.backend(), sql))
        .await
        .expect("query")
        .expect("row");
    row.try_get("", "v").expect("value")
}

/// The counter and Σ active holds, read in one statement.
async fn counter_and_holds(db: &Db) -> (i64, i64) {
    let row = db
        .conn
        .query_one_raw(Statement::from_string(
            db.backend(),
            "SELECT \
               CAST((SELECT COALESCE(SUM(reserved_usd_cents), 0) FROM exchange_reserves) AS BIGINT) AS c, \
               CAST((SELECT COALESCE(SUM(amount_usd_cents), 0) FROM exchange_holds WHERE released_at IS NULL) AS BIGINT) AS h",
        ))
        .await
        .expect("query")
        .expect("row");
    (
        row.try_get("", "c").expect("c"),
        row.try_get("", "h").expect("h"),
    )
}

/// The sandbox's money, in one statement: both balances, what accepted withdrawals took, and
/// transfers on their way.
async fn sandbox_total(db: &Db) -> i64 {
    scalar(
        db,
        "SELECT CAST( \
           (SELECT COALESCE(SUM(balance_usd_cents), 0) FROM sandbox_balances) \
         + (SELECT COALESCE(SUM(amount_usd_cents + fee_usd_cents), 0) FROM sandbox_withdrawals WHERE status <> 'FAILED') \
         + (SELECT COALESCE(SUM(amount_usd_cents), 0) FROM treasury_transfers WHERE status = 'PENDING') \
         AS BIGINT) AS v",
    )
    .await
}

async fn unreserved(app: &TestApp) -> i64 {
    let res = app.get("/api/v1/treasury/balance").await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.data()["exchange"]["reserved_usd_cents"].as_i64() >= Some(0));
    res.data()["exchange"]["unreserved_usd_cents"]
        .as_i64()
        .expect("unreserved")
}

fn within(value: i64, (low, high): (i64, i64), what: &str) {
    assert!(
        low <= value && value <= high,
        "{what}: {value} is outside [{low}, {high}]"
    );
}

/// Waits until no run is paying out, then takes the exchange's outcomes into the model.
async fn settle(app: &TestApp, model: &mut Model) {
    for run in model
        .runs
        .iter_mut()
        .filter(|r| r.state == RunState::PayingOut)
    {
        let done = app
            .wait_for_run(&run.id, 60, |r| {
                r["status"] == "COMPLETED" || r["status"] == "FAILED"
            })
            .await;
        run.state = if done["status"] == "COMPLETED" {
            RunState::Completed
        } else {
            RunState::Failed
        };
        let listed = app
            .get(&format!(
                "/api/v1/payroll-runs/{}/payouts?limit=200",
                run.id
            ))
            .await;
        for shown in listed.data().as_array().expect("payouts") {
            let Some(p) = run.payouts.iter_mut().find(|p| shown["id"] == p.id) else {
                continue;
            };
            if p.state != PayoutState::InFlight {
                continue;
            }
            match shown["status"].as_str() {
                Some("COMPLETED") => p.state = PayoutState::Paid,
                Some("FAILED") => {
                    assert!(p.failing, "only failing payees fail: {shown}");
                    p.state = PayoutState::Failed;
                    // Refunded by the exchange, and no longer funded: free again.
                    model.free += p.cost;
                }
                other => panic!("payout not final after its run: {other:?}"),
            }
        }
    }
}

async fn check_always(db: &Db, model: &Model) {
    let (counter, holds) = counter_and_holds(db).await;
    assert_eq!(counter, holds, "the reserved counter is Σ active holds");
    assert_eq!(
        sandbox_total(db).await,
        TREASURY_START + model.adjusted,
        "money is conserved in the sandbox"
    );
}

async fn check_settled(app: &TestApp, db: &Db, model: &Model) {
    let (_, holds) = counter_and_holds(db).await;
    let required: i64 = model
        .runs
        .iter()
        .filter(|r| matches!(r.state, RunState::Deposited | RunState::PayingOut))
        .map(RunModel::pending_cost)
        .sum();
    assert_eq!(
        holds, required,
        "Σ holds = Σ required of funded unpaid attempts"
    );
    let required_in_db = scalar(
        db,
        "SELECT CAST(COALESCE(SUM(p.amount_usd_cents + p.fee_usd_cents), 0) AS BIGINT) AS v \
         FROM payouts p JOIN payroll_runs r ON r.id = p.payroll_run_id \
         WHERE p.status = 'PENDING' AND r.status IN ('DEPOSITED', 'PAYING_OUT')",
    )
    .await;
    assert_eq!(holds, required_in_db);
    assert_eq!(
        unreserved(app).await,
        model.free,
        "the treasury shows the model"
    );
}

async fn apply(app: &TestApp, db: &Db, employees: &[String], model: &mut Model, op: &Op) {
    let (low, high) = model.bounds();
    match op {
        Op::NewRun { amounts, offset } => {
            let picked: Vec<usize> = (0..amounts.len())
                .map(|k| (*offset as usize + k) % EMPLOYEES)
                .collect();
            let items: Vec<Value> = picked
                .iter()
                .zip(amounts)
                .map(|(e, a)| json!({"employee_id": employees[*e], "amount_usd_cents": a}))
                .collect();
            let run_id = app
                .confirmed_run(json!({"type": "ad_hoc", "period_start": "2026-03-01",
                    "period_end": "2026-03-31", "items": items}))
                .await;
            let listed = app
                .get(&format!("/api/v1/payroll-runs/{run_id}/payouts?limit=200"))
                .await;
            let payouts = listed
                .data()
                .as_array()
                .expect("payouts")
                .iter()
                .map(|p| PayoutModel {
                    id: p["id"].as_str().expect("id").to_owned(),
                    cost: p["amount_usd_cents"].as_i64().expect("amount")
                        + p["fee_usd_cents"].as_i64().expect("fee"),
                    failing: employees[FAILING_FROM..]
                        .contains(&p["employee_id"].as_str().expect("employee").to_owned()),
                    state: PayoutState::Pending,
                })
                .collect();
            model.runs.push(RunModel {
                id: run_id,
                state: RunState::Confirmed,
                payouts,
            });
        }
        Op::BalanceCheck(i) => {
            let Some(ri) = model.pick(*i, RunState::Confirmed) else {
                return;
            };
            let run = &mut model.runs[ri];
            let res = app
                .act(&format!("/api/v1/payroll-runs/{}/balance-check", run.id))
                .await;
            assert_eq!(res.status, 200, "{}", res.text);
            if run.state != RunState::Confirmed {
                return;
            }
            let required = run.pending_cost();
            let shown = res.data()["available_usdc_cents"]
                .as_i64()
                .expect("available");
            within(
                shown,
                (low.max(0), high.max(0)),
                "a balance check's available",
            );
            assert_eq!(res.data()["required_usdc_cents"], required);
            let sufficient = res.data()["sufficient"] == true;
            if required <= low {
                assert!(
                    sufficient,
                    "a run within what is free was refused: {}",
                    res.text
                );
            }
            if required > high {
                assert!(
                    !sufficient,
                    "a run beyond what is free was funded: {}",
                    res.text
                );
            }
            if sufficient {
                assert_eq!(res.data()["run_status"], "DEPOSITED");
                run.state = RunState::Deposited;
                model.free -= required;
            } else {
                assert_eq!(res.data()["run_status"], "CONFIRMED");
            }
        }
        Op::Execute(i) => {
            let Some(ri) = model.pick(*i, RunState::Deposited) else {
                return;
            };
            let run = &mut model.runs[ri];
            let res = app
                .act(&format!("/api/v1/payroll-runs/{}/execute", run.id))
                .await;
            if run.state == RunState::Deposited {
                assert_eq!(res.status, 200, "{}", res.text);
                run.state = RunState::PayingOut;
                for p in run
                    .payouts
                    .iter_mut()
                    .filter(|p| p.state == PayoutState::Pending)
                {
                    p.state = PayoutState::InFlight;
                }
            } else {
                assert_eq!(res.status, 409, "{}", res.text);
            }
        }
        Op::CancelRun(i) => {
            let Some(ri) = model.pick(*i, RunState::Deposited) else {
                return;
            };
            let run = &mut model.runs[ri];
            let res = app
                .post(
                    &format!("/api/v1/payroll-runs/{}/cancel", run.id),
                    json!({}),
                )
                .await;
            if matches!(run.state, RunState::Confirmed | RunState::Deposited) {
                assert_eq!(res.status, 200, "{}", res.text);
                if run.state == RunState::Deposited {
                    model.free += run.pending_cost();
                }
                run.state = RunState::Cancelled;
                for p in run
                    .payouts
                    .iter_mut()
                    .filter(|p| p.state == PayoutState::Pending)
                {
                    p.state = PayoutState::Cancelled;
                }
            } else {
                assert_eq!(res.status, 409, "{}", res.text);
            }
        }
        Op::CancelPayout(i, j) => {
            let Some(ri) = model.pick(*i, RunState::Deposited) else {
                return;
            };
            let run = &mut model.runs[ri];
            if !matches!(run.state, RunState::Confirmed | RunState::Deposited) {
                return;
            }
            let deposited = run.state == RunState::Deposited;
            let count = run.payouts.len();
            let p = &mut run.payouts[*j as usize % count];
            if p.state != PayoutState::Pending {
                return;
            }
            let res = app.act(&format!("/api/v1/payouts/{}/cancel", p.id)).await;
            assert_eq!(res.status, 200, "{}", res.text);
            p.state = PayoutState::Cancelled;
            if deposited {
                model.free += p.cost;
            }
            if run.pending_cost() == 0 {
                run.state = RunState::Cancelled;
            }
            let shown = app.get(&format!("/api/v1/payroll-runs/{}", run.id)).await;
            let expected = if run.state == RunState::Cancelled {
                "CANCELLED"
            } else if deposited {
                "DEPOSITED"
            } else {
                "CONFIRMED"
            };
            assert_eq!(shown.data()["status"], expected, "{}", shown.text);
        }
        Op::RetryFailed(i) => {
            let Some(ri) = model.pick(*i, RunState::Failed) else {
                return;
            };
            let run = &mut model.runs[ri];
            if run.state != RunState::Failed {
                return;
            }
            let required: i64 = run
                .payouts
                .iter()
                .filter(|p| p.state == PayoutState::Failed)
                .map(|p| p.cost)
                .sum();
            let res = app
                .act(&format!("/api/v1/payroll-runs/{}/retry-failed", run.id))
                .await;
            if required <= low {
                assert_eq!(res.status, 200, "{}", res.text);
            }
            if required > high {
                assert_eq!(res.code(), "CEX_INSUFFICIENT_BALANCE", "{}", res.text);
            }
            if res.status == 200 {
                run.state = RunState::PayingOut;
                for p in run
                    .payouts
                    .iter_mut()
                    .filter(|p| p.state == PayoutState::Failed)
                {
                    p.state = PayoutState::InFlight;
                }
                model.free -= required;
            }
        }
        Op::ToTreasury(amount) => {
            let res = app
                .post(
                    "/api/v1/treasury/transfers",
                    json!({"amount_usd_cents": amount, "direction": "to_treasury"}),
                )
                .await;
            if *amount <= low {
                assert_eq!(res.status, 201, "{}", res.text);
            }
            if *amount > high {
                assert_eq!(res.status, 409, "{}", res.text);
            }
            match res.status.as_u16() {
                201 => model.free -= amount,
                409 => {
                    assert_eq!(res.code(), "TREASURY_INSUFFICIENT_BALANCE");
                    let shown = res.json["error"]["details"]["available_usd_cents"]
                        .as_i64()
                        .expect("available");
                    within(
                        shown,
                        (low.max(0), high.max(0)),
                        "a refused transfer's available",
                    );
                }
                other => panic!("transfer answered {other}: {}", res.text),
            }
        }
        Op::ToExchange(amount) => {
            let res = app
                .post(
                    "/api/v1/treasury/transfers",
                    json!({"amount_usd_cents": amount}),
                )
                .await;
            assert_eq!(res.status, 201, "{}", res.text);
            model.free += amount;
        }
        Op::Adjust(delta) => {
            // Money taken from outside only ever takes what is free: the model stays exact.
            let delta = if *delta < 0 {
                -(delta.abs().min(low.max(0)))
            } else {
                *delta
            };
            if delta == 0 {
                return;
            }
            payroll_actors::exchange::sandbox::adjust(db, SandboxAccount::Exchange, delta)
                .await
                .expect("adjust");
            model.free += delta;
            model.adjusted += delta;
        }
        Op::ReadTreasury => {
            within(
                unreserved(app).await,
                (low, high),
                "the treasury's unreserved",
            );
        }
        Op::Settle => {
            settle(app, model).await;
            check_settled(app, db, model).await;
        }
    }
}

async fn run_case(ops: Vec<Op>) {
    let failing: Vec<String> = (FAILING_FROM..EMPLOYEES)
        .map(|i| evm_address(&format!("payee{i}@example.com")))
        .collect();
    let app = spawn_app_with(|s| {
        s.exchange.sandbox.withdrawal_fee_usd_cents = FEE;
        s.exchange.sandbox.completion_delay_ms = 60;
        s.exchange.sandbox.fail_addresses = failing.clone();
        s.exchange.withdrawals_per_second = 40;
        s.exchange.burst = 2;
    })
    .await;
    let db = app.db().await;
    let mut employees = Vec::new();
    for i in 0..EMPLOYEES {
        let e = app
            .create_employee(&format!("Payee {i}"), &format!("payee{i}@example.com"), 0)
            .await;
        employees.push(e["id"].as_str().expect("id").to_owned());
    }
    app.fund(FUNDED).await;
    let mut model = Model {
        free: FUNDED,
        adjusted: 0,
        runs: Vec::new(),
    };
    for op in ops.iter().chain(std::iter::once(&Op::Settle)) {
        apply(&app, &db, &employees, &mut model, op).await;
        check_always(&db, &model).await;
    }
    let count = |state: RunState| model.runs.iter().filter(|r| r.state == state).count();
    eprintln!(
        "case: {} ops, runs completed {}, failed {}, cancelled {}, left confirmed {}, free {}",
        ops.len(),
        count(RunState::Completed),
        count(RunState::Failed),
        count(RunState::Cancelled),
        count(RunState::Confirmed),
        model.free
    );
    db.conn.close_by_ref().await.ok();
    // Let the app's own connections go before the next case starts.
    actix_web::rt::time::sleep(Duration::from_millis(20)).await;
}

#[test]
fn the_funds_ledger_holds_under_random_interleavings() {
    let cases = std::env::var("PAYROLL_PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(12);
    let config = Config {
        cases,
        max_shrink_iters: 24,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let result = runner.run(&prop::collection::vec(op(), 10..30), |ops| {
        actix_web::rt::System::new().block_on(run_case(ops));
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
