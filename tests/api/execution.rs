//! Execution: confirm, funding, execute, withdrawals at the sandbox exchange, jobs, retries,
//! test runs and emails, through the real API.

use payroll_entities::{SandboxAccount, email_outbox, sandbox_withdrawal};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, assert_within_rate_limit, evm_address, new_key, spawn_app, spawn_app_with,
};

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

/// `n` employees with salaries 1000, 2000, … cents; returns them.
async fn staff(app: &TestApp, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 1..=n {
        out.push(
            app.create_employee(
                &format!("Payee {i}"),
                &format!("payee{i}@example.com"),
                1000 * i as i64,
            )
            .await,
        );
    }
    out
}

async fn withdrawals(app: &TestApp) -> Vec<sandbox_withdrawal::Model> {
    sandbox_withdrawal::Entity::find()
        .order_by_asc(sandbox_withdrawal::Column::CreatedAt)
        .order_by_asc(sandbox_withdrawal::Column::Id)
        .all(&app.db().await.conn)
        .await
        .expect("withdrawals")
}

fn march() -> Value {
    json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "label": "March"})
}

#[actix_web::test]
async fn a_run_is_paid_from_confirm_to_completed() {
    let app = spawn_app().await;
    let people = staff(&app, 3).await;
    let run_id = app.confirmed_run(march()).await;
    let base = format!("/api/v1/payroll-runs/{run_id}");

    // Not funded yet: the check says by how much.
    let check = app.act(&format!("{base}/balance-check")).await;
    assert_eq!(check.status, 200, "{}", check.text);
    let mut fields: Vec<&str> = check
        .data()
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "available_usdc_cents",
            "checked_at",
            "deficit_usdc_cents",
            "required_usdc_cents",
            "run_status",
            "sufficient"
        ]
    );
    assert_eq!(check.data()["sufficient"], false);
    assert_eq!(check.data()["required_usdc_cents"], 6000);
    assert_eq!(check.data()["available_usdc_cents"], 0);
    assert_eq!(check.data()["deficit_usdc_cents"], 6000);
    assert_eq!(check.data()["run_status"], "CONFIRMED");

    app.fund(10_000).await;
    let check = app.act(&format!("{base}/balance-check")).await;
    assert_eq!(check.data()["sufficient"], true);
    assert_eq!(check.data()["deficit_usdc_cents"], 0);
    assert_eq!(check.data()["run_status"], "DEPOSITED");
    let treasury = app.get("/api/v1/treasury/balance").await;
    assert_eq!(treasury.data()["exchange"]["available_usd_cents"], 10_000);
    assert_eq!(treasury.data()["exchange"]["reserved_usd_cents"], 6000);
    assert_eq!(treasury.data()["exchange"]["unreserved_usd_cents"], 4000);

    let exec = app.act(&format!("/api/v1/runs/{run_id}/execute")).await;
    assert_eq!(exec.status, 200, "{}", exec.text);
    assert_eq!(exec.data()["id"], run_id.as_str());
    assert_eq!(exec.data()["status"], "PAYING_OUT");
    let job = &exec.data()["job"];
    assert_eq!(job["status"], "PROCESSING");
    let job_id = job["job_id"].as_str().expect("job id").to_owned();
    assert_eq!(job["status_url"], format!("/api/v1/jobs/{job_id}"));
    assert!(
        job["estimated_duration_seconds"]
            .as_i64()
            .is_some_and(|s| s >= 1)
    );

    let done = app
        .wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(
        done["payout_summary"],
        json!({"pending": 0, "processing": 0, "completed": 3, "failed": 0, "cancelled": 0})
    );
    assert_eq!(done["job"]["status"], "COMPLETED");
    assert!(done["completed_at"].as_str().is_some());

    let job = app.get(&format!("/api/v1/jobs/{job_id}")).await;
    assert_eq!(job.data()["type"], "PAYROLL_EXECUTION");
    assert_eq!(job.data()["status"], "COMPLETED");
    assert_eq!(
        job.data()["progress"],
        json!({"total": 3, "pending": 0, "processing": 0, "completed": 3, "failed": 0, "cancelled": 0})
    );
    assert_eq!(job.data()["related_resource"]["id"], run_id.as_str());

    // Every payout paid once, to its payee, with a transaction hash.
    let payouts = app.get(&format!("{base}/payouts")).await;
    let sent = withdrawals(&app).await;
    assert_eq!(sent.len(), 3);
    for p in payouts.data().as_array().expect("payouts") {
        assert_eq!(p["status"], "COMPLETED");
        assert!(
            p["on_chain_tx_hash"]
                .as_str()
                .is_some_and(|h| h.starts_with("0x"))
        );
        assert!(
            p["block_explorer_url"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://basescan.org/tx/"))
        );
        let client_id = format!("{}-1", p["id"].as_str().expect("id"));
        assert_eq!(p["client_withdrawal_id"], client_id.as_str());
        let w = sent
            .iter()
            .find(|w| w.client_id == client_id)
            .expect("withdrawn");
        assert_eq!(
            w.amount_usd_cents,
            p["amount_usd_cents"].as_i64().expect("amount")
        );
        assert_eq!(w.address, p["wallet_address"].as_str().expect("address"));
        assert_eq!(p["cex_withdrawal_id"], w.id.as_str());
    }
    assert!(people.iter().all(|e| {
        sent.iter()
            .any(|w| w.address == e["wallet_address"].as_str().unwrap_or(""))
    }));

    // Money is conserved: the exchange paid exactly the run's total.
    let treasury = app.get("/api/v1/treasury/balance").await;
    assert_eq!(treasury.data()["exchange"]["available_usd_cents"], 4000);
    assert_eq!(treasury.data()["exchange"]["reserved_usd_cents"], 0);
    assert_eq!(
        treasury.data()["treasury_wallet"]["balance_usd_cents"],
        10_000_000 - 10_000
    );

    // Events of the whole lifecycle, one per transition.
    let db = app.db().await;
    let kinds: Vec<String> = payroll_entities::event::Entity::find()
        .order_by_asc(payroll_entities::event::Column::Id)
        .all(&db.conn)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    for kind in [
        "payroll.run.created",
        "payroll.run.confirmed",
        "payroll.run.deposited",
        "payroll.run.executing",
        "payroll.run.completed",
    ] {
        assert_eq!(
            kinds.iter().filter(|k| *k == kind).count(),
            1,
            "{kind} in {kinds:?}"
        );
    }
    assert_eq!(
        kinds.iter().filter(|k| *k == "payout.processing").count(),
        3
    );
    assert_eq!(kinds.iter().filter(|k| *k == "payout.completed").count(), 3);

    // The same events through the API, with the alias of run kinds.
    let listed = app.get("/api/v1/events?type=payout.completed").await;
    assert_eq!(listed.json["pagination"]["total"], 3, "{}", listed.text);
    assert_eq!(listed.data()[0]["data"]["object"]["status"], "COMPLETED");
    assert_eq!(listed.data()[0]["api_version"], "2026-03-01");
    let alias = app.get("/api/v1/events?type=run.completed").await;
    assert_eq!(alias.data()[0]["type"], "payroll.run.completed");
    assert_eq!(
        app.get("/api/v1/events?type=payday").await.code(),
        "INVALID_QUERY_PARAMETER"
    );

    // One notification per payout in the file outbox.
    let outbox = app.settings.data.dir.join("outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let files = loop {
        let files: Vec<_> = std::fs::read_dir(&outbox)
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        if files.len() >= 3 || std::time::Instant::now() > deadline {
            break files;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(files.len(), 3);
    let text = std::fs::read_to_string(files[0].path()).expect("eml");
    assert!(text.contains("is on its way"), "{text}");
    assert!(text.contains("Message-ID: <pay_"), "{text}");
    assert!(!text.contains("[Test]"));

    // The audit log has the operations with the key that made them.
    let audit = app
        .get(&format!("/api/v1/audit-log?resource_id={run_id}&limit=50"))
        .await;
    let actions: Vec<&str> = audit
        .data()
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "PAYROLL_RUN_CREATED",
        "PAYROLL_RUN_CONFIRMED",
        "PAYROLL_RUN_DEPOSITED",
        "PAYROLL_RUN_EXECUTED",
        "PAYROLL_RUN_COMPLETED",
        "PAYOUTS_COMPLETED",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
}

#[actix_web::test]
async fn execute_never_withdraws_outside_deposited() {
    let app = spawn_app().await;
    staff(&app, 2).await;
    let run_id = app.create_run(march()).await;
    let base = format!("/api/v1/payroll-runs/{run_id}");

    let res = app.act(&format!("{base}/execute")).await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    assert_eq!(res.json["error"]["details"]["current_status"], "DRAFT");
    assert_eq!(
        res.json["error"]["details"]["allowed_operations"],
        json!(["confirm", "cancel"])
    );

    app.act(&format!("{base}/confirm")).await;
    let res = app.act(&format!("{base}/execute")).await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "CEX_INSUFFICIENT_BALANCE");
    assert_eq!(
        res.json["error"]["details"],
        json!({"required_usdc_cents": 3000, "available_usdc_cents": 0, "deficit_usdc_cents": 3000})
    );
    assert!(
        res.json["error"]["recovery_hint"]
            .as_str()
            .is_some_and(|h| h.contains("/api/v1/treasury/balance"))
    );

    app.fund(3000).await;
    let res = app.act(&format!("{base}/execute")).await;
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    assert!(
        res.json["error"]["recovery_hint"]
            .as_str()
            .is_some_and(|h| h.contains("balance-check")),
        "{}",
        res.text
    );

    assert_eq!(
        app.act(&format!("{base}/balance-check")).await.data()["run_status"],
        "DEPOSITED"
    );
    // Money leaves the exchange from outside: the reservation is no longer covered.
    let db = app.db().await;
    payroll_actors::exchange::sandbox::adjust(&db, SandboxAccount::Exchange, -2000)
        .await
        .expect("adjust");
    let res = app.act(&format!("{base}/execute")).await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "CEX_INSUFFICIENT_BALANCE");
    assert_eq!(res.json["error"]["details"]["deficit_usdc_cents"], 2000);
    assert_eq!(app.get(&base).await.data()["status"], "DEPOSITED");
    assert!(
        withdrawals(&app).await.is_empty(),
        "no withdrawal may start"
    );

    // Wrong scope: an agent key cannot confirm or execute.
    let (agent, _) = app.key_with(&["payroll:read", "payroll:write"]).await;
    let res = app
        .send(
            "POST",
            &format!("{base}/execute"),
            Some(&agent),
            Some(&new_key()),
            None,
            &[],
        )
        .await;
    assert_eq!(res.status, 403);
    assert_eq!(
        res.json["error"]["details"]["required_scopes"],
        json!(["payroll:execute"])
    );
}

#[actix_web::test]
async fn failed_addresses_fail_and_a_retry_pays_the_fixed_wallet() {
    let bad = evm_address("payee2@example.com");
    let app = spawn_app_with(|s| s.exchange.sandbox.fail_addresses = vec![bad.clone()]).await;
    let people = staff(&app, 3).await;
    app.fund(100_000).await;
    let run_id = app.confirmed_run(march()).await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    let first_job = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await
        .data()["job"]["job_id"]
        .clone();
    let failed = app
        .wait_for_run(&run_id, 20, |r| r["status"] == "FAILED")
        .await;
    assert_eq!(failed["payout_summary"]["failed"], 1);
    assert_eq!(failed["payout_summary"]["completed"], 2);
    assert_eq!(
        failed["job"]["status"], "COMPLETED",
        "a job completes when its payouts are terminal, paid or not"
    );
    let failed_payouts = app
        .get(&format!(
            "/api/v1/payroll-runs/{run_id}/payouts?status=FAILED"
        ))
        .await;
    let payout = failed_payouts.data()[0].clone();
    assert_eq!(payout["wallet_address"], bad.as_str());
    assert!(
        payout["failed_reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
    // Its money came back to the exchange.
    let balance = app.get("/api/v1/treasury/balance").await;
    assert_eq!(
        balance.data()["exchange"]["available_usd_cents"],
        100_000 - 1000 - 3000
    );

    // The payee fixes the wallet; retrying pays the new one.
    let fixed = evm_address("payee2-new@example.com");
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{}", id(&people[1])),
            json!({"wallet_address": fixed}),
        )
        .await;
    assert_eq!(res.status, 200);
    // A changed wallet is held (CONTRACT §16): the retry waits until another person lifts it.
    let retry = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/retry-failed"))
        .await;
    assert_eq!(retry.code(), "STATE_CONFLICT", "{}", retry.text);
    let (approver, _) = app.key_with(&["payroll:approve"]).await;
    let lifted = app
        .write_as(
            &approver,
            "POST",
            &format!("/api/v1/employees/{}/wallet-approvals", id(&people[1])),
            json!({}),
        )
        .await;
    assert_eq!(lifted.status, 200, "{}", lifted.text);
    let retry = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/retry-failed"))
        .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    assert_eq!(retry.data()["status"], "PAYING_OUT");
    assert_ne!(retry.data()["job"]["job_id"], first_job);
    let done = app
        .wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(done["payout_summary"]["completed"], 3);
    let paid = app.get(&format!("/api/v1/payouts/{}", id(&payout))).await;
    assert_eq!(paid.data()["status"], "COMPLETED");
    assert_eq!(paid.data()["attempt"], 2);
    assert_eq!(paid.data()["wallet_address"], fixed.as_str());
    assert_eq!(
        paid.data()["client_withdrawal_id"],
        format!("{}-2", id(&payout)).as_str()
    );
    let sent = withdrawals(&app).await;
    assert_eq!(sent.len(), 4, "three first attempts and one retry");
    // One notification per (payout, attempt): the retried payout has one for each attempt.
    let mut queued: Vec<(String, i32, String, String)> = email_outbox::Entity::find()
        .filter(email_outbox::Column::Kind.eq(payroll_entities::EmailKind::Payout))
        .all(&app.db().await.conn)
        .await
        .expect("outbox")
        .into_iter()
        .map(|m| (m.payout_id, m.payout_attempt, m.message_id, m.id))
        .collect();
    queued.sort();
    assert_eq!(queued.len(), 4, "{queued:?}");
    let retried: Vec<_> = queued.iter().filter(|q| q.0 == id(&payout)).collect();
    assert_eq!(retried.len(), 2, "{queued:?}");
    for (attempt, (payout_id, at, message_id, outbox_id)) in (1..).zip(retried) {
        assert_eq!(*at, attempt);
        assert_eq!(
            *message_id,
            format!("<{payout_id}.{attempt}@payroll.local>")
        );
        assert!(outbox_id.starts_with("eml_"), "{outbox_id}");
    }
    let audit = app
        .get(&format!(
            "/api/v1/audit-log?resource_id={run_id}&action=PAYROLL_RUN_RETRIED"
        ))
        .await;
    assert_eq!(
        audit.data()[0]["details"]["address_changes"][0]["wallet_address"],
        json!({"before": bad, "after": fixed})
    );

    // A finished run's payouts cannot be retried or cancelled.
    let res = app
        .act(&format!("/api/v1/payouts/{}/retry", id(&payout)))
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.json["error"]["details"]["current_status"], "COMPLETED");
    let res = app
        .act(&format!("/api/v1/payouts/{}/cancel", id(&payout)))
        .await;
    assert_eq!(res.status, 409);
}

/// The exchange account's available balance, once a transfer has settled into it.
async fn exchange_available(app: &TestApp, expected: i64) {
    for _ in 0..200 {
        let balance = app.get("/api/v1/treasury/balance").await;
        if balance.data()["exchange"]["available_usd_cents"] == expected {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the exchange never held {expected}");
}

/// Payouts of `run_id` at `attempt`, and the run's active holds.
async fn attempts_and_holds(app: &TestApp, run_id: &str, attempt: i32) -> (usize, usize) {
    use payroll_entities::{exchange_hold, payout};
    let conn = &app.db().await.conn;
    let at = payout::Entity::find()
        .filter(payout::Column::PayrollRunId.eq(run_id))
        .filter(payout::Column::Attempt.eq(attempt))
        .all(conn)
        .await
        .expect("payouts")
        .len();
    let held = exchange_hold::Entity::find()
        .filter(exchange_hold::Column::PayrollRunId.eq(run_id))
        .filter(exchange_hold::Column::ReleasedAt.is_null())
        .all(conn)
        .await
        .expect("holds")
        .len();
    (at, held)
}

/// A retry works the failed payouts a page at a time: more of them than a page are all taken
/// (a new attempt, a hold and an email each), and a retry refused for want of funds, found
/// only after every page was worked, leaves every one as it was.
#[actix_web::test]
async fn a_retry_of_more_failed_payouts_than_a_page_takes_all_or_none() {
    const PAYEES: usize = 2_100;
    let rows: Vec<Value> = (0..PAYEES)
        .map(|i| {
            let email = format!("f{i}@example.com");
            json!({"name": format!("F {i}"), "wallet_address": evm_address(&email), "email": email, "salary_usd_cents": 100, "network": "POLYGON"})
        })
        .collect();
    let wallets: Vec<String> = rows
        .iter()
        .map(|r| r["wallet_address"].as_str().expect("wallet").to_owned())
        .collect();
    let app = spawn_app_with(move |s| {
        s.exchange.sandbox.fail_addresses = wallets;
        s.exchange.withdrawals_per_second = 0;
        s.exchange.sandbox.completion_delay_ms = 0;
    })
    .await;
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let run_id = app.confirmed_run(march()).await;
    let base = format!("/api/v1/payroll-runs/{run_id}");
    let check = app.act(&format!("{base}/balance-check")).await;
    let required = check.data()["required_usdc_cents"]
        .as_i64()
        .expect("required");
    app.fund(required).await;
    let check = app.act(&format!("{base}/balance-check")).await;
    assert_eq!(check.data()["run_status"], "DEPOSITED", "{}", check.text);
    app.act(&format!("{base}/execute")).await;
    let failed = app
        .wait_for_run(&run_id, 120, |r| r["status"] == "FAILED")
        .await;
    assert_eq!(failed["payout_summary"]["failed"], PAYEES);
    exchange_available(&app, required).await;

    // One cent short: refused, and nothing of the pages worked before the check stays.
    let out = app
        .post(
            "/api/v1/treasury/transfers",
            json!({"amount_usd_cents": 1, "direction": "to_treasury"}),
        )
        .await;
    assert_eq!(out.status, 201, "{}", out.text);
    exchange_available(&app, required - 1).await;
    let refused = app.act(&format!("{base}/retry-failed")).await;
    assert_eq!(
        refused.code(),
        "CEX_INSUFFICIENT_BALANCE",
        "{}",
        refused.text
    );
    assert_eq!(refused.json["error"]["details"]["deficit_usdc_cents"], 1);
    assert_eq!(
        refused.json["error"]["details"]["required_usdc_cents"],
        required
    );
    let run = app.get(&base).await;
    assert_eq!(run.data()["status"], "FAILED");
    assert_eq!(run.data()["payout_summary"]["failed"], PAYEES);
    assert_eq!(attempts_and_holds(&app, &run_id, 2).await, (0, 0));

    app.fund(1).await;
    exchange_available(&app, required).await;
    let retry = app.act(&format!("{base}/retry-failed")).await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    assert_eq!(attempts_and_holds(&app, &run_id, 2).await.0, PAYEES);
    let audit = app
        .get(&format!(
            "/api/v1/audit-log?resource_id={run_id}&action=PAYROLL_RUN_RETRIED"
        ))
        .await;
    assert_eq!(audit.data()[0]["details"]["retried_payouts"], PAYEES);
    assert_eq!(audit.data()[0]["details"]["address_change_count"], 0);
    // The same wallets fail again; each attempt was withdrawn once and mailed once.
    let again = app
        .wait_for_run(&run_id, 120, |r| r["status"] == "FAILED")
        .await;
    assert_eq!(again["payout_summary"]["failed"], PAYEES);
    let sent = withdrawals(&app).await;
    let mut ids: Vec<&str> = sent.iter().map(|w| w.client_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((sent.len(), ids.len()), (2 * PAYEES, 2 * PAYEES));
    let mailed = email_outbox::Entity::find()
        .filter(email_outbox::Column::Kind.eq(payroll_entities::EmailKind::Payout))
        .filter(email_outbox::Column::PayoutAttempt.eq(2))
        .all(&app.db().await.conn)
        .await
        .expect("outbox")
        .len();
    assert_eq!(mailed, PAYEES);
    assert_eq!(attempts_and_holds(&app, &run_id, 2).await, (PAYEES, 0));
    exchange_available(&app, required).await;
}

#[actix_web::test]
async fn competing_runs_reserve_only_covered_funds() {
    let app = spawn_app().await;
    staff(&app, 2).await;
    let a = app.confirmed_run(march()).await;
    let b = app
        .confirmed_run(json!({"period_start": "2026-04-01", "period_end": "2026-04-30"}))
        .await;
    // Each needs 3000; the exchange holds 4500.
    app.fund(4500).await;
    let first = app
        .act(&format!("/api/v1/payroll-runs/{a}/balance-check"))
        .await;
    assert_eq!(first.data()["run_status"], "DEPOSITED");
    let second = app
        .act(&format!("/api/v1/payroll-runs/{b}/balance-check"))
        .await;
    assert_eq!(second.data()["sufficient"], false);
    assert_eq!(second.data()["available_usdc_cents"], 1500);
    assert_eq!(second.data()["deficit_usdc_cents"], 1500);
    assert_eq!(second.data()["run_status"], "CONFIRMED");
    // Cancelling the first releases its reservation.
    let res = app.act(&format!("/api/v1/payroll-runs/{a}/cancel")).await;
    assert_eq!(res.data()["status"], "CANCELLED");
    let second = app
        .act(&format!("/api/v1/payroll-runs/{b}/balance-check"))
        .await;
    assert_eq!(second.data()["run_status"], "DEPOSITED");
}

#[actix_web::test]
async fn withdrawals_never_exceed_the_rate_limit() {
    let (rate, burst) = (8.0, 3.0);
    let app = spawn_app_with(|s| {
        s.exchange.withdrawals_per_second = 8;
        s.exchange.burst = 3;
        s.exchange.sandbox.completion_delay_ms = 0;
    })
    .await;
    let rows: Vec<Value> = (0..19)
        .map(|i| {
            let email = format!("r{i}@example.com");
            json!({"name": format!("R {i}"), "wallet_address": evm_address(&email), "email": email, "salary_usd_cents": 100, "network": "POLYGON"})
        })
        .collect();
    assert_eq!(
        app.post("/api/v1/employees/import", json!(rows))
            .await
            .status,
        200
    );
    app.fund(100_000).await;
    let run_id = app.confirmed_run(march()).await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    let times: Vec<i64> = withdrawals(&app)
        .await
        .iter()
        .map(|w| w.created_at.timestamp_millis())
        .collect();
    assert_eq!(times.len(), 19);
    assert_within_rate_limit(&times, rate, burst, 0.1);
    // And the limit did hold them back: 19 at 8/s after a burst of 3 take at least 2 s.
    assert!(times[18] - times[0] >= 1900, "{:?}", times);
}

#[actix_web::test]
async fn test_runs_pay_small_amounts_and_are_deducted_from_the_next_run() {
    let app = spawn_app_with(|s| s.test_run.amount_usd_cents = 100).await;
    let people = staff(&app, 2).await;
    app.fund(1_000_000).await;
    let test_run = app
        .confirmed_run(
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "is_test_run": true}),
        )
        .await;
    app.act(&format!("/api/v1/payroll-runs/{test_run}/balance-check"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{test_run}/execute"))
        .await;
    let done = app
        .wait_for_run(&test_run, 20, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(done["total_amount_usd_cents"], 200);
    assert_eq!(done["is_test_run"], true);

    // Test emails say so.
    let outbox = app.settings.data.dir.join("outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let texts: Vec<String> = std::fs::read_dir(&outbox)
            .map(|d| {
                d.flatten()
                    .filter_map(|f| std::fs::read_to_string(f.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if texts.len() == 2 {
            assert!(texts.iter().all(|t| t.contains("[Test]")));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "test emails not written"
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // The next regular run takes each completed test payout off.
    let regular = app.confirmed_run(march()).await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{regular}/payouts"))
        .await;
    for p in payouts.data().as_array().expect("payouts") {
        let salary = people
            .iter()
            .find(|e| e["id"] == p["employee_id"])
            .expect("payee")["salary_usd_cents"]
            .as_i64()
            .expect("salary");
        assert_eq!(p["test_run_deduction_usd_cents"], 100);
        assert_eq!(p["amount_usd_cents"].as_i64(), Some(salary - 100));
    }
    assert_eq!(
        app.get(&format!("/api/v1/payroll-runs/{regular}"))
            .await
            .data()["total_amount_usd_cents"],
        3000 - 200
    );
    // Cancelling that run gives the deductions back, so a later run takes them again.
    app.act(&format!("/api/v1/payroll-runs/{regular}/cancel"))
        .await;
    let again = app.confirmed_run(march()).await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{again}/payouts"))
        .await;
    assert!(
        payouts
            .data()
            .as_array()
            .expect("payouts")
            .iter()
            .all(|p| p["test_run_deduction_usd_cents"] == 100)
    );
}

#[actix_web::test]
async fn payouts_can_be_cancelled_before_they_are_handed_over() {
    let app = spawn_app().await;
    staff(&app, 3).await;
    let run_id = app.create_run(march()).await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let target = payouts.data()[0].clone();
    let res = app
        .act(&format!("/api/v1/payouts/{}/cancel", id(&target)))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "CANCELLED");
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["employee_count"], 2);
    assert_eq!(run.data()["payout_summary"]["cancelled"], 1);
    assert_eq!(
        run.data()["total_amount_usd_cents"],
        6000 - target["amount_usd_cents"].as_i64().expect("amount")
    );
    let res = app
        .act(&format!("/api/v1/payouts/{}/cancel", id(&target)))
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    let res = app
        .act(&format!("/api/v1/payouts/{}/retry", id(&target)))
        .await;
    assert_eq!(res.status, 409);
    let res = app
        .act("/api/v1/payouts/pay_01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel")
        .await;
    assert_eq!(res.status, 404);
    let res = app.get("/api/v1/jobs/job_01ARZ3NDEKTSV4RRFFQ69G5FAV").await;
    assert_eq!(res.code(), "RESOURCE_NOT_FOUND");

    // Sync answers in every status; wrong-state operations name what the run allows.
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/sync"))
        .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.data()["status"], "DRAFT");
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/retry-failed"))
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.json["error"]["details"]["current_status"], "DRAFT");
}

#[actix_web::test]
async fn a_confirmed_run_watches_for_its_funds() {
    let app = spawn_app_with(|s| s.runs.funds_watch_interval_ms = 100).await;
    staff(&app, 1).await;
    let run_id = app.confirmed_run(march()).await;
    app.fund(1000).await;
    let deposited = app
        .wait_for_run(&run_id, 10, |r| r["status"] == "DEPOSITED")
        .await;
    assert!(deposited["deposited_at"].as_str().is_some());
}

#[actix_web::test]
async fn a_run_pays_the_snapshot_confirmed_even_if_employees_change() {
    let app = spawn_app().await;
    let people = staff(&app, 1).await;
    app.fund(10_000).await;
    let run_id = app.confirmed_run(march()).await;
    let before = people[0]["wallet_address"]
        .as_str()
        .expect("wallet")
        .to_owned();
    app.write_as(
        &app.key,
        "PATCH",
        &format!("/api/v1/employees/{}", id(&people[0])),
        json!({"wallet_address": evm_address("elsewhere"), "salary_usd_cents": 999_999}),
    )
    .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    app.wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
    let sent = withdrawals(&app).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].address, before);
    assert_eq!(sent[0].amount_usd_cents, 1000);
}

#[actix_web::test]
async fn the_sandbox_answers_a_client_id_the_same_way_every_time() {
    use payroll_actors::exchange::{
        ExchangeProvider, WithdrawalOutcome, WithdrawalRequest, sandbox::SandboxProvider,
    };
    let app = spawn_app().await;
    let db = app.db().await;
    let provider = SandboxProvider::open(db.clone(), app.settings.exchange.sandbox.clone())
        .await
        .expect("sandbox");
    let request = |id: &str| WithdrawalRequest {
        client_id: id.to_owned(),
        amount: payroll_entities::Cents(500),
        fee: payroll_entities::Cents(0),
        network: payroll_entities::Network::Base,
        address: evm_address(id),
    };
    // Refused for lack of funds: refused again after funds arrive, never accepted later.
    let first = provider.withdraw(&[request("pay_a-1")], later()).await;
    assert!(
        matches!(first[0], WithdrawalOutcome::Rejected { .. }),
        "{first:?}"
    );
    app.fund(10_000).await;
    let again = provider.withdraw(&[request("pay_a-1")], later()).await;
    assert!(
        matches!(again[0], WithdrawalOutcome::Rejected { .. }),
        "{again:?}"
    );
    // The same client id twice in one batch is one withdrawal.
    let twice = provider
        .withdraw(&[request("pay_b-1"), request("pay_b-1")], later())
        .await;
    assert_eq!(twice[0], twice[1]);
    assert!(matches!(twice[0], WithdrawalOutcome::Accepted { .. }));
    let accepted: Vec<_> = withdrawals(&app)
        .await
        .into_iter()
        .filter(|w| w.client_id == "pay_b-1")
        .collect();
    assert_eq!(accepted.len(), 1);
    let balance = app.get("/api/v1/treasury/balance").await;
    assert_eq!(
        balance.data()["exchange"]["available_usd_cents"],
        10_000 - 500
    );
    // A known client id beside a new one that needs all that is left: the known one takes
    // nothing again, so the new one is accepted (taken as new, the known one would have left
    // too little), and nothing of that first reading stays.
    let mut all_left = request("pay_c-1");
    all_left.amount = payroll_entities::Cents(10_000 - 500);
    let mixed = provider
        .withdraw(&[request("pay_b-1"), all_left], later())
        .await;
    assert_eq!(mixed[0], twice[0]);
    assert!(
        matches!(mixed[1], WithdrawalOutcome::Accepted { .. }),
        "{mixed:?}"
    );
    let rows = withdrawals(&app).await;
    assert_eq!(rows.iter().filter(|w| w.client_id == "pay_b-1").count(), 1);
    assert_eq!(rows.iter().filter(|w| w.client_id == "pay_c-1").count(), 1);
    let balance = app.get("/api/v1/treasury/balance").await;
    assert_eq!(balance.data()["exchange"]["available_usd_cents"], 0);
    // A batch whose sends were stamped longer ago than exchange.send_deadline_ms is not sent.
    app.fund(500).await;
    let stale = std::time::Instant::now()
        .checked_sub(std::time::Duration::from_millis(1))
        .expect("an instant");
    let late = provider.withdraw(&[request("pay_d-1")], stale).await;
    assert!(
        matches!(late[0], WithdrawalOutcome::NotSent { .. }),
        "{late:?}"
    );
    let rows = withdrawals(&app).await;
    assert!(
        rows.iter().all(|w| w.client_id != "pay_d-1"),
        "nothing left"
    );
}

/// A send deadline that has not passed.
fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(60)
}

#[actix_web::test]
async fn a_deduction_is_given_back_once() {
    let app = spawn_app_with(|s| s.test_run.amount_usd_cents = 100).await;
    let people = staff(&app, 2).await;
    app.fund(1_000_000).await;
    let test_run = app
        .confirmed_run(
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "is_test_run": true}),
        )
        .await;
    app.act(&format!("/api/v1/payroll-runs/{test_run}/balance-check"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{test_run}/execute"))
        .await;
    app.wait_for_run(&test_run, 20, |r| r["status"] == "COMPLETED")
        .await;

    let regular = app.confirmed_run(march()).await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{regular}/payouts"))
        .await;
    let first = payouts
        .data()
        .as_array()
        .expect("payouts")
        .iter()
        .find(|p| p["employee_id"] == people[0]["id"])
        .expect("payout")
        .clone();
    assert_eq!(first["test_run_deduction_usd_cents"], 100);
    // Cancel that payout (its deduction comes back), then the whole run.
    let res = app
        .act(&format!("/api/v1/payouts/{}/cancel", id(&first)))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["test_run_deduction_usd_cents"], 0);
    app.act(&format!("/api/v1/payroll-runs/{regular}/cancel"))
        .await;
    // The next run takes each deduction once: 100, not 200.
    let next = app.confirmed_run(march()).await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{next}/payouts"))
        .await;
    for p in payouts.data().as_array().expect("payouts") {
        assert_eq!(p["test_run_deduction_usd_cents"], 100, "{p}");
    }
}

#[actix_web::test]
async fn a_run_finishes_when_its_remaining_payouts_are_cancelled() {
    let app = spawn_app_with(|s| {
        s.exchange.in_flight_window = 1;
        s.exchange.withdrawals_per_second = 1;
        s.exchange.burst = 1;
    })
    .await;
    staff(&app, 3).await;
    app.fund(100_000).await;
    let run_id = app.confirmed_run(march()).await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    // One payout is handed over at a time; the others can still be cancelled.
    let pending = app
        .get(&format!(
            "/api/v1/payroll-runs/{run_id}/payouts?status=PENDING"
        ))
        .await;
    let mut cancelled = 0;
    for p in pending.data().as_array().expect("payouts") {
        if p["client_withdrawal_id"].is_null() {
            let res = app.act(&format!("/api/v1/payouts/{}/cancel", id(p))).await;
            if res.status == 200 {
                cancelled += 1;
            }
        }
    }
    assert!(cancelled >= 1, "{}", pending.text);
    let done = app
        .wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(done["payout_summary"]["cancelled"], cancelled);
    assert_eq!(done["job"]["status"], "COMPLETED");
}
