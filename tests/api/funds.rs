//! Funds as a ledger (CONTRACT §1, §6, §7): holds that outflows respect, one consistent point
//! for every funding figure, money limits, deductions under concurrency, fees and networks.

use payroll_entities::{SandboxAccount, db::Db};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};

use crate::helpers::{TestApp, evm_address, spawn_app, spawn_app_with};

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

async fn treasury(app: &TestApp) -> Value {
    let res = app.get("/api/v1/treasury/balance").await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.data()["exchange"].clone()
}

async fn to_treasury(app: &TestApp, cents: i64) -> crate::helpers::Resp {
    app.post(
        "/api/v1/treasury/transfers",
        json!({"amount_usd_cents": cents, "direction": "to_treasury"}),
    )
    .await
}

/// An ad hoc run paying `amounts` to these employees (one each), created and confirmed.
async fn ad_hoc_run(app: &TestApp, employees: &[Value], amounts: &[i64]) -> String {
    let items: Vec<Value> = employees
        .iter()
        .zip(amounts)
        .map(|(e, a)| json!({"employee_id": id(e), "amount_usd_cents": a}))
        .collect();
    app.confirmed_run(json!({"type": "ad_hoc", "period_start": "2026-03-01",
        "period_end": "2026-03-31", "items": items}))
        .await
}

/// Σ over the ledger, the counter, and Σ amount + fee of PENDING payouts of funded runs.
async fn ledger(db: &Db) -> (i64, i64, i64) {
    let row = db
        .conn
        .query_one_raw(Statement::from_string(
            db.backend(),
            "SELECT \
               CAST((SELECT COALESCE(SUM(amount_usd_cents), 0) FROM exchange_holds WHERE released_at IS NULL) AS BIGINT) AS held, \
               CAST((SELECT COALESCE(SUM(reserved_usd_cents), 0) FROM exchange_reserves) AS BIGINT) AS counter, \
               CAST((SELECT COALESCE(SUM(p.amount_usd_cents + p.fee_usd_cents), 0) FROM payouts p \
                 JOIN payroll_runs r ON r.id = p.payroll_run_id \
                 WHERE p.status = 'PENDING' AND r.status IN ('DEPOSITED', 'PAYING_OUT')) AS BIGINT) AS required",
        ))
        .await
        .expect("ledger query")
        .expect("one row");
    (
        row.try_get("", "held").expect("held"),
        row.try_get("", "counter").expect("counter"),
        row.try_get("", "required").expect("required"),
    )
}

#[actix_web::test]
async fn to_treasury_never_takes_money_held_for_runs() {
    let app = spawn_app().await;
    let alice = app
        .create_employee("Alice", "alice@example.com", 10_000)
        .await;
    app.fund(10_000).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let before = treasury(&app).await;
    assert_eq!(before["available_usd_cents"], 10_000);
    assert_eq!(before["reserved_usd_cents"], 10_000);
    assert_eq!(before["unreserved_usd_cents"], 0);

    let res = to_treasury(&app, 1).await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "TREASURY_INSUFFICIENT_BALANCE");
    assert_eq!(res.json["error"]["details"]["available_usd_cents"], 0);
    assert_eq!(res.json["error"]["details"]["requested_usd_cents"], 1);
    assert_eq!(treasury(&app).await, before);

    // Money beyond the holds may leave, and no more.
    app.fund(500).await;
    let res = to_treasury(&app, 501).await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.json["error"]["details"]["available_usd_cents"], 500);
    let res = to_treasury(&app, 500).await;
    assert_eq!(res.status, 201, "{}", res.text);

    // Money taken from outside: unreserved goes negative, and nothing more leaves.
    let db = app.db().await;
    payroll_actors::exchange::sandbox::adjust(&db, SandboxAccount::Exchange, -3_000)
        .await
        .expect("adjust");
    let now = treasury(&app).await;
    assert_eq!(now["unreserved_usd_cents"], -3_000);
    let res = to_treasury(&app, 1).await;
    assert_eq!(res.json["error"]["details"]["available_usd_cents"], 0);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "CEX_INSUFFICIENT_BALANCE");
    payroll_actors::exchange::sandbox::adjust(&db, SandboxAccount::Exchange, 3_000)
        .await
        .expect("adjust");

    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    let after = treasury(&app).await;
    assert_eq!(after["reserved_usd_cents"], 0);
    assert_eq!(after["available_usd_cents"], 0);
    assert_eq!(ledger(&db).await, (0, 0, 0));
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    assert_eq!(payouts.data()[0]["employee_id"], id(&alice));
}

#[actix_web::test]
async fn runs_funded_exactly_all_pay_while_another_run_pays_out() {
    const FEE: i64 = 7;
    let app = spawn_app_with(|s| {
        s.exchange.withdrawals_per_second = 6;
        s.exchange.burst = 2;
        s.exchange.sandbox.max_withdrawals_per_second = 10;
        s.exchange.sandbox.completion_delay_ms = 400;
        s.exchange.sandbox.withdrawal_fee_usd_cents = FEE;
    })
    .await;
    let mut staff = Vec::new();
    for i in 0..34 {
        staff.push(
            app.create_employee(&format!("Payee {i}"), &format!("p{i}@example.com"), 0)
                .await,
        );
    }
    // A busy run of 30 payouts, and ten runs of two payouts each, funded to the cent.
    let busy_amounts: Vec<i64> = (0..30).map(|i| 1_000 + i).collect();
    let small = [(300, 401), (302, 403), (304, 405), (306, 407), (308, 409)];
    let busy_total: i64 = busy_amounts.iter().map(|a| a + FEE).sum();
    let small_total: i64 = (0..10)
        .map(|i| {
            let (a, b) = small[i % small.len()];
            a + b + 2 * FEE
        })
        .sum();
    app.fund(busy_total + small_total).await;
    let busy = ad_hoc_run(&app, &staff[..30], &busy_amounts).await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{busy}/balance-check"))
        .await;
    assert_eq!(res.data()["run_status"], "DEPOSITED", "{}", res.text);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{busy}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);

    // While the busy run pays out at 6 a second, each run is checked and executed: none is
    // refused, and each check sees exactly what is left.
    let mut runs = Vec::new();
    let mut free = small_total;
    for i in 0..10 {
        let (a, b) = small[i % small.len()];
        let pair = [
            staff[30 + (i % 2) * 2].clone(),
            staff[31 + (i % 2) * 2].clone(),
        ];
        let run_id = ad_hoc_run(&app, &pair, &[a, b]).await;
        // Every reading, taken while withdrawals are being accepted, shows exactly what is
        // free: an accepted withdrawal is never counted both as gone and as held.
        for _ in 0..8 {
            let now = treasury(&app).await;
            assert_eq!(now["unreserved_usd_cents"], free, "run {i}: {now}");
        }
        free -= a + b + 2 * FEE;
        let res = app
            .act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
        assert_eq!(res.data()["sufficient"], true, "run {i}: {}", res.text);
        assert_eq!(res.data()["run_status"], "DEPOSITED");
        let res = app
            .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
            .await;
        assert_eq!(res.status, 200, "run {i}: {}", res.text);
        runs.push(run_id);
        if i == 2 {
            // 30 withdrawals at 6 a second: the first runs were funded while it paid out.
            let busy_state = app.get(&format!("/api/v1/payroll-runs/{busy}")).await;
            assert_eq!(
                busy_state.data()["status"],
                "PAYING_OUT",
                "{}",
                busy_state.text
            );
        }
    }
    for run_id in runs.iter().chain(std::iter::once(&busy)) {
        app.wait_for_run(run_id, 60, |r| r["status"] == "COMPLETED")
            .await;
    }
    let after = treasury(&app).await;
    assert_eq!(after["reserved_usd_cents"], 0);
    assert_eq!(after["available_usd_cents"], 0, "funded − paid");
    let db = app.db().await;
    assert_eq!(ledger(&db).await, (0, 0, 0));
}

#[actix_web::test]
async fn money_inputs_above_the_limit_are_refused() {
    let app = spawn_app().await;
    let max = 100_000_000_000_i64;
    let employee = |email: &str, salary: i64| {
        json!({"name": "Big", "email": email, "salary_usd_cents": salary, "network": "BASE",
               "wallet_address": evm_address(email)})
    };
    let res = app
        .post("/api/v1/employees", employee("big@example.com", max + 1))
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["salary_usd_cents"]);
    let res = app
        .post("/api/v1/employees", employee("big@example.com", max))
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let big = res.data().clone();

    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{}", id(&big)),
            json!({"salary_usd_cents": max + 1}),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["salary_usd_cents"]);

    let res = app
        .post(
            "/api/v1/employees/import",
            json!([employee("other@example.com", max + 1)]),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["rows[0].salary_usd_cents"]);

    let res = app
        .post("/api/v1/payroll-runs", json!({"type": "ad_hoc", "period_start": "2026-03-01",
            "period_end": "2026-03-31", "items": [{"employee_id": id(&big), "amount_usd_cents": max + 1}]}))
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["items[0].amount_usd_cents"]);

    for direction in ["to_exchange", "to_treasury"] {
        let res = app
            .post(
                "/api/v1/treasury/transfers",
                json!({"amount_usd_cents": max + 1, "direction": direction}),
            )
            .await;
        assert_eq!(res.status, 400, "{}", res.text);
        assert_eq!(res.invalid_fields(), vec!["amount_usd_cents"]);
    }
    // A payroll of the largest salaries still adds up exactly.
    for i in 0..3 {
        let res = app
            .post(
                "/api/v1/employees",
                employee(&format!("max{i}@example.com"), max),
            )
            .await;
        assert_eq!(res.status, 201, "{}", res.text);
    }
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert_eq!(res.data()["total_amount_usd_cents"], 4 * max);
}

#[actix_web::test]
async fn cancelling_the_last_pending_payout_cancels_a_funded_run() {
    let app = spawn_app().await;
    app.create_employee("A", "a@example.com", 1_000).await;
    app.create_employee("B", "b@example.com", 2_000).await;
    app.fund(3_000).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    assert_eq!(treasury(&app).await["reserved_usd_cents"], 3_000);
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let ids: Vec<String> = payouts
        .data()
        .as_array()
        .expect("payouts")
        .iter()
        .map(id)
        .collect();

    let res = app.act(&format!("/api/v1/payouts/{}/cancel", ids[0])).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DEPOSITED");
    let left = treasury(&app).await;
    assert_eq!(
        left["reserved_usd_cents"],
        3_000
            - payouts.data()[0]["amount_usd_cents"]
                .as_i64()
                .expect("amount")
    );

    let res = app.act(&format!("/api/v1/payouts/{}/cancel", ids[1])).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "CANCELLED", "{}", run.text);
    assert_eq!(run.data()["cancel_reason"], "every payout was cancelled");
    assert_eq!(treasury(&app).await["reserved_usd_cents"], 0);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    let events = app.get("/api/v1/events?type=payroll.run.cancelled").await;
    assert_eq!(
        events.data().as_array().map(Vec::len),
        Some(1),
        "{}",
        events.text
    );

    // A cancelled run's holds are gone too.
    let run_id = app
        .deposited_run(json!({"period_start": "2026-04-01", "period_end": "2026-04-30"}))
        .await;
    assert_eq!(treasury(&app).await["reserved_usd_cents"], 3_000);
    let res = app
        .post(&format!("/api/v1/payroll-runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(treasury(&app).await["reserved_usd_cents"], 0);
    assert_eq!(ledger(&app.db().await).await, (0, 0, 0));
}

/// The employee's deduction balance, read from the database.
async fn deduction_balance(db: &Db, employee_id: &str) -> i64 {
    let row = db
        .conn
        .query_one_raw(Statement::from_sql_and_values(
            db.backend(),
            match db.backend() {
                sea_orm::DatabaseBackend::Postgres => {
                    "SELECT test_deduction_balance_usd_cents AS b FROM employees WHERE id = $1"
                }
                _ => "SELECT test_deduction_balance_usd_cents AS b FROM employees WHERE id = ?",
            },
            [employee_id.into()],
        ))
        .await
        .expect("query")
        .expect("row");
    row.try_get("", "b").expect("balance")
}

#[actix_web::test]
async fn deductions_survive_a_concurrent_completion_and_come_back_from_failed_payouts() {
    let bad = evm_address("will-fail");
    let app = spawn_app_with(|s| {
        s.exchange.sandbox.fail_addresses = vec![bad.clone()];
        s.exchange.sandbox.completion_delay_ms = 50;
        // Wallets are fixed and paid at once here; holds are tested in agents.rs.
        s.employees.wallet_change_hold_hours = 0;
    })
    .await;
    let db = app.db().await;
    app.fund(1_000_000).await;
    let emma = app
        .create_employee("Emma", "emma@example.com", 10_000)
        .await;
    let emma_id = id(&emma);
    let mut taken = 0;
    let mut credited = 0;
    // Test runs complete (each adds 100 to the balance) while regular runs of later months
    // are confirmed (each takes the whole balance): the balance is never lost or taken twice.
    for month in 3..=8 {
        let test_run = app
            .deposited_run(json!({"period_start": format!("2026-{month:02}-01"), "period_end": format!("2026-{month:02}-28"), "is_test_run": true}))
            .await;
        let res = app
            .act(&format!("/api/v1/payroll-runs/{test_run}/execute"))
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
        let regular = app
            .create_run(json!({"period_start": format!("2026-{month:02}-01"), "period_end": format!("2026-{month:02}-28")}))
            .await;
        let confirm_path = format!("/api/v1/payroll-runs/{regular}/confirm");
        let (confirmed, finished) = futures_util::join!(
            app.act(&confirm_path),
            app.wait_for_run(&test_run, 30, |r| r["status"] == "COMPLETED"),
        );
        assert_eq!(confirmed.status, 200, "{}", confirmed.text);
        credited += finished["total_amount_usd_cents"].as_i64().expect("total");
        let payouts = app
            .get(&format!("/api/v1/payroll-runs/{regular}/payouts"))
            .await;
        taken += payouts.data()[0]["test_run_deduction_usd_cents"]
            .as_i64()
            .expect("deduction");
        assert_eq!(
            deduction_balance(&db, &emma_id).await + taken,
            credited,
            "month {month}: what was credited is either on the balance or taken"
        );
        let res = app
            .post(&format!("/api/v1/payroll-runs/{regular}/cancel"), json!({}))
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
        taken = 0;
        credited = deduction_balance(&db, &emma_id).await;
    }
    assert!(credited >= 100, "the test payouts were credited");

    // A payout that took a deduction and then failed gives it back when its run ends, and a
    // retry pays the whole amount.
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{emma_id}"),
            json!({"wallet_address": bad}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let before = deduction_balance(&db, &emma_id).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-10-01", "period_end": "2026-10-31"}))
        .await;
    assert_eq!(deduction_balance(&db, &emma_id).await, 0);
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let run = app
        .wait_for_run(&run_id, 30, |r| r["status"] == "FAILED")
        .await;
    assert_eq!(run["total_amount_usd_cents"], 10_000);
    assert_eq!(deduction_balance(&db, &emma_id).await, before);
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    assert_eq!(payouts.data()[0]["amount_usd_cents"], 10_000);
    assert_eq!(payouts.data()[0]["test_run_deduction_usd_cents"], 0);
    assert_eq!(ledger(&db).await, (0, 0, 0));
}
