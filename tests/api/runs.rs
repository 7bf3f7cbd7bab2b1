//! Payroll runs, draft side: creation rules, overlap, listing, payouts, cancel, archive.

use serde_json::{Value, json};

use crate::helpers::{TestApp, new_key, spawn_app, spawn_app_with};

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

async fn three_employees(app: &TestApp) -> Vec<Value> {
    vec![
        app.create_employee("Ada", "ada@example.com", 500_000).await,
        app.create_employee("Grace", "grace@example.com", 400_000)
            .await,
        app.create_employee("Unpaid", "unpaid@example.com", 0).await,
    ]
}

#[actix_web::test]
async fn a_regular_run_pays_active_salaried_employees() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let inactive = app.create_employee("Gone", "gone@example.com", 100).await;
    app.send(
        "DELETE",
        &format!("/api/v1/employees/{}", id(&inactive)),
        Some(&app.key),
        Some(&new_key()),
        None,
        &[],
    )
    .await;
    let ended = app.create_employee("Ended", "ended@example.com", 100).await;
    app.write_as(
        &app.key,
        "PATCH",
        &format!("/api/v1/employees/{}", id(&ended)),
        json!({"contract_end_date": "2026-02-15"}),
    )
    .await;

    let res = app
        .post("/api/v1/payroll-runs", json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "pay_date": "2026-04-01", "label": "March"}))
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let run = res.data();
    assert!(run["id"].as_str().is_some_and(|i| i.starts_with("run_")));
    assert_eq!(run["status"], "DRAFT");
    assert_eq!(run["type"], "regular");
    assert_eq!(run["is_adhoc"], false);
    assert_eq!(run["period_start"], "2026-03-01T00:00:00.000Z");
    assert_eq!(run["period_end"], "2026-03-31T23:59:59.999Z");
    assert_eq!(run["pay_date"], "2026-04-01T00:00:00.000Z");
    assert_eq!(run["employee_count"], 2);
    assert_eq!(run["total_amount_usd_cents"], 900_000);
    assert_eq!(
        run["payout_summary"],
        json!({"pending": 2, "processing": 0, "completed": 0, "failed": 0, "cancelled": 0})
    );
    assert_eq!(run["created_by_key_id"], app.key_id.as_str());
    assert!(run["job"].is_null());

    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{}/payouts", id(run)))
        .await;
    let items = payouts.data().as_array().expect("list");
    assert_eq!(items.len(), 2);
    let sum: i64 = items
        .iter()
        .map(|p| p["amount_usd_cents"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(sum, 900_000);
    let paid: Vec<&Value> = items.iter().map(|p| &p["employee_id"]).collect();
    assert!(paid.contains(&&staff[0]["id"]) && paid.contains(&&staff[1]["id"]));
    assert!(items.iter().all(|p| p["status"] == "PENDING"
        && p["attempt"] == 1
        && p["client_withdrawal_id"].is_null()));
    assert_eq!(
        items[0]["wallet_address"],
        staff
            .iter()
            .find(|s| s["id"] == items[0]["employee_id"])
            .expect("payee")["wallet_address"]
    );
}

/// A payee made INACTIVE between the run's creation and its confirmation is not paid: confirm
/// cancels that payout, with its event, and locks the rest; a run left with no payee is
/// refused and keeps everything as it was.
#[actix_web::test]
async fn confirm_cancels_the_payouts_of_payees_gone_since_the_run_was_made() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let run_id = app
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let gone = app
        .bodiless("DELETE", &format!("/api/v1/employees/{}", id(&staff[1])))
        .await;
    assert_eq!(gone.status, 200, "{}", gone.text);

    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let run = res.data();
    assert_eq!(run["status"], "CONFIRMED");
    assert_eq!(run["employee_count"], 1);
    assert_eq!(run["total_amount_usd_cents"], 500_000);
    assert_eq!(
        run["payout_summary"],
        json!({"pending": 1, "processing": 0, "completed": 0, "failed": 0, "cancelled": 1})
    );
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let items = payouts.data().as_array().expect("list").clone();
    let of = |who: &Value| {
        items
            .iter()
            .find(|p| p["employee_id"] == who["id"])
            .expect("payout")
            .clone()
    };
    assert_eq!(of(&staff[0])["status"], "PENDING");
    let cancelled = of(&staff[1]);
    assert_eq!(cancelled["status"], "CANCELLED");
    let events = app.get("/api/v1/events?type=payout.cancelled").await;
    let about: Vec<&Value> = events
        .data()
        .as_array()
        .expect("events")
        .iter()
        .map(|e| &e["data"]["object"]["id"])
        .collect();
    assert_eq!(about, [&cancelled["id"]], "{}", events.text);
    let audit = app
        .get("/api/v1/audit-log?action=PAYROLL_RUN_CONFIRMED")
        .await;
    assert_eq!(
        audit.data()[0]["details"]["cancelled_inactive_payees"],
        1,
        "{}",
        audit.text
    );

    // Every payee gone: refused, and nothing of it kept.
    let lin = app.create_employee("Lin", "lin@example.com", 300_000).await;
    let run_id = app
        .create_run(json!({"type": "ad_hoc", "period_start": "2026-04-01",
            "period_end": "2026-04-30",
            "items": [{"employee_id": id(&lin), "amount_usd_cents": 100}]}))
        .await;
    app.bodiless("DELETE", &format!("/api/v1/employees/{}", id(&lin)))
        .await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_state_conflict(&res, &["payouts"]);
    assert!(res.text.contains("INACTIVE"), "{}", res.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DRAFT");
    assert_eq!(run.data()["payout_summary"]["pending"], 1);
    let events = app.get("/api/v1/events?type=payout.cancelled").await;
    assert_eq!(events.data().as_array().map(Vec::len), Some(1));
}

#[actix_web::test]
async fn employee_ids_choose_payees_and_are_checked() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let res = app
        .post("/api/v1/payroll-runs", json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "employee_ids": [id(&staff[1])]}))
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert_eq!(res.data()["total_amount_usd_cents"], 400_000);

    let res = app
        .post("/api/v1/payroll-runs", json!({"period_start": "2026-04-01", "period_end": "2026-04-30",
            "employee_ids": [id(&staff[0]), "emp_01ARZ3NDEKTSV4RRFFQ69G5FAV", id(&staff[2]), id(&staff[0])]}))
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.invalid_fields(), vec!["employee_ids[3]"]);
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-04-01", "period_end": "2026-04-30",
            "employee_ids": [id(&staff[0]), "emp_01ARZ3NDEKTSV4RRFFQ69G5FAV", id(&staff[2])]}),
        )
        .await;
    assert_eq!(
        res.invalid_fields(),
        vec!["employee_ids[1]", "employee_ids[2]"]
    );
    assert_eq!(
        app.get("/api/v1/payroll-runs").await.json["pagination"]["total"],
        1
    );
}

#[actix_web::test]
async fn ad_hoc_and_reimbursement_runs_pay_items() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let res = app
        .post("/api/v1/payroll-runs", json!({"type": "ad_hoc", "period_start": "2026-03-01", "period_end": "2026-03-31",
            "items": [{"employee_id": id(&staff[2]), "amount_usd_cents": 12_345, "note": "bonus"}]}))
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert_eq!(res.data()["is_adhoc"], true);
    assert_eq!(res.data()["total_amount_usd_cents"], 12_345);
    let payouts = app
        .get(&format!("/api/v1/runs/{}/payouts", id(res.data())))
        .await;
    assert_eq!(payouts.data()[0]["note"], "bonus");

    // Overlapping ad hoc runs are fine; bad items are listed.
    let res = app
        .post("/api/v1/payroll-runs", json!({"type": "reimbursement", "period_start": "2026-03-01", "period_end": "2026-03-31",
            "items": [{"employee_id": id(&staff[0]), "amount_usd_cents": 0}, {"amount_usd_cents": 5}, {"employee_id": id(&staff[0]), "amount_usd_cents": 5, "tip": 1}]}))
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(
        res.invalid_fields(),
        vec![
            "items[0].amount_usd_cents",
            "items[1].employee_id",
            "items[2].tip",
            "items[2].employee_id"
        ]
    );
    // Every mistyped item is listed, not only the first.
    let res = app
        .post("/api/v1/payroll-runs", json!({"type": "ad_hoc", "period_start": "2026-03-01", "period_end": "2026-03-31",
            "items": [{"employee_id": id(&staff[0]), "amount_usd_cents": "x"}, {"employee_id": 7, "amount_usd_cents": 1.5}, "nope"]}))
        .await;
    assert_eq!(
        res.invalid_fields(),
        vec![
            "items[0].amount_usd_cents",
            "items[1].amount_usd_cents",
            "items[1].employee_id",
            "items[2]"
        ]
    );
    let res = app
        .post("/api/v1/payroll-runs", json!({"type": "reimbursement", "period_start": "2026-03-01", "period_end": "2026-03-31",
            "items": [{"employee_id": id(&staff[0]), "amount_usd_cents": 0}, {"amount_usd_cents": 5}, {"employee_id": id(&staff[0]), "amount_usd_cents": 5}]}))
        .await;
    assert_eq!(
        res.invalid_fields(),
        vec![
            "items[0].amount_usd_cents",
            "items[1].employee_id",
            "items[2].employee_id"
        ]
    );

    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"type": "ad_hoc", "period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(res.invalid_fields(), vec!["items"]);
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "items": []}),
        )
        .await;
    assert_eq!(res.invalid_fields(), vec!["items"]);
}

#[actix_web::test]
async fn periods_must_be_valid() {
    let app = spawn_app().await;
    let res = app.post("/api/v1/payroll-runs", json!({})).await;
    assert_eq!(res.invalid_fields(), vec!["period_start", "period_end"]);
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-31", "period_end": "2026-03-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(res.invalid_fields(), vec!["period_end"]);
    let res = app.post("/api/v1/payroll-runs", json!({"period_start": "March", "period_end": 5, "type": "weekly", "is_test_run": "yes"})).await;
    assert_eq!(res.invalid_fields().len(), 4, "{}", res.text);
}

#[actix_web::test]
async fn regular_runs_may_not_overlap_unless_test_or_cancelled() {
    let app = spawn_app().await;
    three_employees(&app).await;
    let march = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(march.status, 201);
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-15", "period_end": "2026-04-14"}),
        )
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "PAYROLL_RUN_OVERLAP");
    assert_eq!(
        res.json["error"]["details"]["existing_run_id"],
        march.data()["id"]
    );
    assert_eq!(res.json["error"]["details"]["existing_run_status"], "DRAFT");
    // The next month touches but does not overlap.
    let april = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-04-01", "period_end": "2026-04-30"}),
        )
        .await;
    assert_eq!(april.status, 201, "{}", april.text);
    // Test runs are exempt.
    let test = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "is_test_run": true}),
        )
        .await;
    assert_eq!(test.status, 201);
    // A cancelled run no longer blocks its period.
    let cancel = app
        .post(
            &format!("/api/v1/payroll-runs/{}/cancel", id(march.data())),
            json!({"reason": "wrong period"}),
        )
        .await;
    assert_eq!(cancel.status, 200);
    let again = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(again.status, 201);
}

#[actix_web::test]
async fn test_runs_pay_small_amounts() {
    let app = spawn_app_with(|s| s.test_run.amount_usd_cents = 150).await;
    app.create_employee("Ada", "ada@example.com", 500_000).await;
    app.create_employee("Tiny", "tiny@example.com", 99).await;
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "is_test_run": true}),
        )
        .await;
    assert_eq!(res.status, 201);
    assert_eq!(res.data()["is_test_run"], true);
    assert_eq!(res.data()["total_amount_usd_cents"], 150 + 99);
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{}/payouts", id(res.data())))
        .await;
    assert!(
        payouts
            .data()
            .as_array()
            .expect("list")
            .iter()
            .all(|p| p["is_test_run"] == true)
    );
}

#[actix_web::test]
async fn lists_filter_and_sort() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let regular = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let adhoc = app
        .post(
            "/api/v1/payroll-runs",
            json!({"type": "ad_hoc", "period_start": "2026-03-01", "period_end": "2026-03-31",
            "items": [{"employee_id": id(&staff[0]), "amount_usd_cents": 1_000_000}]}),
        )
        .await;
    let test = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-05-01", "period_end": "2026-05-31", "is_test_run": true}),
        )
        .await;

    let all = app.get("/api/v1/payroll-runs").await;
    let ids: Vec<&Value> = all
        .data()
        .as_array()
        .expect("list")
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(
        ids,
        vec![
            &test.data()["id"],
            &adhoc.data()["id"],
            &regular.data()["id"]
        ]
    );
    let res = app.get("/api/v1/payroll-runs?sort=created_at").await;
    assert_eq!(res.data()[0]["id"], regular.data()["id"]);
    let res = app
        .get("/api/v1/payroll-runs?sort=-total_amount_usd_cents")
        .await;
    assert_eq!(res.data()[0]["id"], adhoc.data()["id"]);
    let res = app.get("/api/v1/payroll-runs?is_adhoc=true").await;
    assert_eq!(res.json["pagination"]["total"], 1);
    let res = app
        .get("/api/v1/payroll-runs?type=regular&is_test_run=false")
        .await;
    assert_eq!(res.data()[0]["id"], regular.data()["id"]);
    assert_eq!(res.json["pagination"]["total"], 1);
    let res = app
        .get("/api/v1/payroll-runs?status=DRAFT&created_after=2020-01-01&created_before=2100-01-01")
        .await;
    assert_eq!(res.json["pagination"]["total"], 3);
    let res = app
        .get("/api/v1/payroll-runs?created_after=2100-01-01")
        .await;
    assert_eq!(res.json["pagination"]["total"], 0);
    let res = app.get("/api/v1/payroll-runs?sort=name").await;
    assert_eq!(res.code(), "INVALID_QUERY_PARAMETER");
}

#[actix_web::test]
async fn both_path_families_serve_the_same_runs() {
    let app = spawn_app().await;
    three_employees(&app).await;
    let res = app
        .post(
            "/api/v1/runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let run_id = id(res.data());
    let a = app.get(&format!("/api/v1/runs/{run_id}")).await;
    let b = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(a.data(), b.data());
    assert_eq!(app.get("/api/v1/runs").await.json["pagination"]["total"], 1);
    // Same operation under both paths: the same Idempotency-Key replays across them.
    let key = new_key();
    let first = app
        .send(
            "POST",
            &format!("/api/v1/runs/{run_id}/cancel"),
            Some(&app.key),
            Some(&key),
            None,
            &[],
        )
        .await;
    assert_eq!(first.status, 200);
    let second = app
        .send(
            "POST",
            &format!("/api/v1/payroll-runs/{run_id}/cancel"),
            Some(&app.key),
            Some(&key),
            None,
            &[],
        )
        .await;
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(second.text, first.text);
}

#[actix_web::test]
async fn payouts_page_filter_and_stream_as_csv() {
    let app = spawn_app().await;
    let rows: Vec<Value> = (0..60)
        .map(|i| {
            let email = format!("p{i}@example.com");
            json!({"name": format!("P {i}"), "wallet_address": crate::helpers::evm_address(&email), "email": email, "salary_usd_cents": 1000 + i, "network": "BASE"})
        })
        .collect();
    assert_eq!(
        app.post("/api/v1/employees/import", json!(rows))
            .await
            .status,
        200
    );
    let run = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let run_id = id(run.data());
    let page = app
        .get(&format!(
            "/api/v1/payroll-runs/{run_id}/payouts?limit=25&offset=50"
        ))
        .await;
    assert_eq!(
        page.json["pagination"],
        json!({"total": 60, "limit": 25, "offset": 50, "has_more": false})
    );
    assert_eq!(page.data().as_array().map(Vec::len), Some(10));
    let res = app
        .get(&format!(
            "/api/v1/payroll-runs/{run_id}/payouts?status=COMPLETED"
        ))
        .await;
    assert_eq!(res.json["pagination"]["total"], 0);

    let csv = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts?format=csv"))
        .await;
    assert_eq!(csv.status, 200);
    assert!(
        csv.header("content-type")
            .is_some_and(|c| c.starts_with("text/csv"))
    );
    let lines: Vec<&str> = csv.text.lines().collect();
    assert_eq!(lines.len(), 61);
    assert!(lines[0].starts_with("id,payroll_run_id,employee_id"));
    let total: i64 = lines[1..]
        .iter()
        .map(|l| {
            l.split(',')
                .nth(7)
                .and_then(|v| v.parse::<i64>().ok())
                .expect("amount")
        })
        .sum();
    assert_eq!(
        total,
        run.data()["total_amount_usd_cents"]
            .as_i64()
            .expect("total")
    );
    let via_accept = app
        .send(
            "GET",
            &format!("/api/v1/payroll-runs/{run_id}/payouts"),
            Some(&app.key),
            None,
            None,
            &[("Accept", "text/csv")],
        )
        .await;
    assert_eq!(via_accept.text, csv.text);
}

#[actix_web::test]
async fn cancel_and_archive_follow_the_lifecycle() {
    let app = spawn_app().await;
    three_employees(&app).await;
    let run = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let run_id = id(run.data());

    let res = app
        .post(&format!("/api/v1/payroll-runs/{run_id}/archive"), json!({}))
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "INVALID_STATUS_TRANSITION");
    assert_eq!(res.json["error"]["details"]["current_status"], "DRAFT");
    assert_eq!(
        res.json["error"]["details"]["allowed_operations"],
        json!(["confirm", "cancel"])
    );
    assert_eq!(
        res.json["error"]["details"]["allowed_transitions"],
        json!(["CONFIRMED", "CANCELLED"])
    );

    // An agent key (payroll:write) may cancel a draft.
    let (agent, _) = app.key_with(&["payroll:write"]).await;
    let res = app
        .write_as(
            &agent,
            "POST",
            &format!("/api/v1/payroll-runs/{run_id}/cancel"),
            json!({"reason": "duplicate"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "CANCELLED");
    assert_eq!(res.data()["cancel_reason"], "duplicate");
    assert!(res.data()["cancelled_at"].as_str().is_some());
    assert_eq!(res.data()["payout_summary"]["cancelled"], 2);
    assert_eq!(res.data()["payout_summary"]["pending"], 0);
    let payouts = app
        .get(&format!(
            "/api/v1/payroll-runs/{run_id}/payouts?status=CANCELLED"
        ))
        .await;
    assert_eq!(payouts.json["pagination"]["total"], 2);

    let res = app
        .post(&format!("/api/v1/payroll-runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(
        res.json["error"]["details"]["allowed_operations"],
        json!(["archive"])
    );

    let res = app
        .post(&format!("/api/v1/payroll-runs/{run_id}/archive"), json!({}))
        .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.data()["is_archived"], true);
    assert_eq!(
        app.get("/api/v1/payroll-runs").await.json["pagination"]["total"],
        0
    );
    assert_eq!(
        app.get("/api/v1/payroll-runs?include_archived=true")
            .await
            .json["pagination"]["total"],
        1
    );

    let audit = app
        .get(&format!("/api/v1/audit-log?resource_id={run_id}"))
        .await;
    let actions: Vec<&str> = audit
        .data()
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        vec![
            "PAYROLL_RUN_ARCHIVED",
            "PAYROLL_RUN_CANCELLED",
            "PAYROLL_RUN_CREATED"
        ]
    );
}

/// A run read again after any change shows the change: reads may be served from views kept
/// between requests, never from one older than the last acknowledged write, whether the write
/// came through the API or from the run's actor.
#[actix_web::test]
async fn a_run_read_again_shows_every_change() {
    let app = spawn_app().await;
    three_employees(&app).await;
    app.fund(2_000_000).await;
    let run_id = app
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let path = format!("/api/v1/payroll-runs/{run_id}");
    let first = app.get(&path).await;
    assert_eq!(first.data()["status"], "DRAFT");
    assert_eq!(
        app.get(&path).await.data(),
        first.data(),
        "an unchanged run reads the same"
    );
    for (operation, status) in [("confirm", "CONFIRMED"), ("balance-check", "DEPOSITED")] {
        let res = app.act(&format!("{path}/{operation}")).await;
        assert_eq!(res.status, 200, "{}", res.text);
        assert_eq!(
            app.get(&path).await.data()["status"],
            status,
            "after {operation}"
        );
    }
    let res = app.act(&format!("{path}/execute")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(app.get(&path).await.data()["status"], "PAYING_OUT");
    // The actor pays the run on its own; reads follow it to the end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let run = app.get(&path).await;
        let data = run.data();
        if data["status"] == "COMPLETED" {
            assert_eq!(data["payout_summary"]["completed"], data["employee_count"]);
            assert_eq!(data["job"]["status"], "COMPLETED", "{data}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {data}");
        actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let res = app.act(&format!("{path}/archive")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(app.get(&path).await.data()["is_archived"], true);
}

/// Sets a run's note with a plain `UPDATE` from the test's own connection: a writer other than
/// the service.
async fn set_note(db: &payroll_entities::db::Db, run_id: &str, note: &str) {
    use sea_orm::ConnectionTrait as _;
    db.conn
        .execute_unprepared(&format!(
            "UPDATE payroll_runs SET note = '{note}' WHERE id = '{run_id}'"
        ))
        .await
        .expect("update");
}

/// On PostgreSQL, where several instances write: a run changed by another instance, or by any
/// other writer of the database, reads changed on this one as soon as the change is
/// acknowledged, although this instance keeps the views it showed.
#[actix_web::test]
async fn a_run_changed_elsewhere_reads_changed_at_once() {
    use sea_orm::ConnectionTrait as _;
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "skipped: several instances share only a PostgreSQL database; \
             set PAYROLL_TEST_DATABASE_URL (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let here = spawn_app().await;
    let url = here.settings.database.url.clone();
    // Instances of one database share its key pepper (another is refused at start).
    let pepper = payroll::startup::load_pepper(&here.settings).expect("pepper");
    let there = spawn_app_with(|s| {
        s.database.url = url;
        s.auth.key_pepper = pepper;
    })
    .await;
    three_employees(&here).await;
    let run_id = here
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let path = format!("/api/v1/payroll-runs/{run_id}");
    assert_eq!(here.get(&path).await.data()["status"], "DRAFT");
    assert_eq!(here.get(&path).await.data()["status"], "DRAFT");
    let res = there.act(&format!("{path}/confirm")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(here.get(&path).await.data()["status"], "CONFIRMED");
    let db = here.db().await;
    // Views are kept: a change nobody announces (the trigger off) is not seen here. Changes in
    // other schemas of the database (other tests) are announced on channels of their own.
    let unannounced = |sql: &str| {
        format!(
            "ALTER TABLE payroll_runs DISABLE TRIGGER payroll_runs_announce_change; {sql}; \
             ALTER TABLE payroll_runs ENABLE TRIGGER payroll_runs_announce_change"
        )
    };
    db.conn
        .execute_unprepared(&unannounced(&format!(
            "UPDATE payroll_runs SET note = 'unannounced' WHERE id = '{run_id}'"
        )))
        .await
        .expect("unannounced update");
    let kept = here.get(&path).await;
    assert_eq!(
        kept.data()["note"],
        Value::Null,
        "served from the view: {}",
        kept.text
    );
    // Any writer at all: the change is announced by the database, not by the service.
    for i in 0..50 {
        let note = format!("note {i}");
        set_note(&db, &run_id, &note).await;
        let read = here.get(&path).await;
        assert_eq!(read.data()["note"], note.as_str(), "{}", read.text);
        assert_eq!(here.get(&path).await.data()["note"], note.as_str());
    }
}

/// On PostgreSQL: when the listening connection is lost, changes announced meanwhile are
/// lost with it; reads stay correct (every kept view is retired as the channel opens again).
#[actix_web::test]
async fn a_lost_announcement_channel_loses_no_change() {
    use sea_orm::ConnectionTrait as _;
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "skipped: announcements exist only on PostgreSQL; set PAYROLL_TEST_DATABASE_URL \
             (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let app = spawn_app().await;
    three_employees(&app).await;
    let run_id = app
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let path = format!("/api/v1/payroll-runs/{run_id}");
    let db = app.db().await;
    // This schema's listening connections (named after the run-change channel they listen
    // on).
    let cut_listener = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND application_name = \
         'payroll listener payroll_run_changes_' || left(md5(current_schema()), 16)";
    for i in 0..10 {
        assert_eq!(app.get(&path).await.status, 200);
        // The listener may be between connections (it listens anew within seconds).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let cut = db
                .conn
                .query_all_raw(sea_orm::Statement::from_string(
                    sea_orm::DatabaseBackend::Postgres,
                    cut_listener,
                ))
                .await
                .expect("terminate");
            if !cut.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no listening connection"
            );
            actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let note = format!("while cut {i}");
        set_note(&db, &run_id, &note).await;
        let read = app.get(&path).await;
        assert_eq!(read.data()["note"], note.as_str(), "{}", read.text);
    }
}

/// A 409 `STATE_CONFLICT` naming exactly `fields`.
fn assert_state_conflict(res: &crate::helpers::Resp, fields: &[&str]) {
    assert_eq!(
        (res.status.as_u16(), res.code()),
        (409, "STATE_CONFLICT"),
        "{}",
        res.text
    );
    assert_eq!(res.invalid_fields(), fields);
}

/// CONTRACT §4, §8: a well-formed request that what exists now refuses is 409 `STATE_CONFLICT`
/// with the same `validation_errors` a 400 has; the document could not have said it.
#[actix_web::test]
async fn what_exists_now_refuses_with_state_conflict_not_400() {
    let app = spawn_app().await;
    let staff = three_employees(&app).await;
    let period = json!({"period_start": "2026-03-01", "period_end": "2026-03-31"});
    let with = |extra: Value| {
        let mut body = period.clone();
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        body
    };
    // An employee that does not exist.
    let res = app
        .post("/api/v1/payroll-runs", with(json!({"type": "ad_hoc",
            "items": [{"employee_id": "emp_01JZZZZZZZZZZZZZZZZZZZZZZZ", "amount_usd_cents": 100}]})))
        .await;
    assert_state_conflict(&res, &["items[0].employee_id"]);
    // A payee twice.
    let res = app
        .post(
            "/api/v1/payroll-runs",
            with(json!({"type": "ad_hoc",
            "items": [{"employee_id": id(&staff[0]), "amount_usd_cents": 100},
                      {"employee_id": id(&staff[0]), "amount_usd_cents": 200}]})),
        )
        .await;
    assert_state_conflict(&res, &["items[1].employee_id"]);
    // An INACTIVE employee.
    let gone = app
        .write_as(
            &app.key,
            "DELETE",
            &format!("/api/v1/employees/{}", id(&staff[1])),
            json!({}),
        )
        .await;
    assert_eq!(gone.status, 200, "{}", gone.text);
    let res = app
        .post(
            "/api/v1/payroll-runs",
            with(json!({"employee_ids": [id(&staff[1])]})),
        )
        .await;
    assert_state_conflict(&res, &["employee_ids[0]"]);
    // An expiry already past.
    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "late", "scopes": ["payroll:read"],
            "expires_at": "2020-01-01T00:00:00Z"}),
        )
        .await;
    assert_state_conflict(&res, &["expires_at"]);
    // A wallet that does not fit the stored network (BASE); with its own network it is judged
    // as the body's own mistake (400).
    let path = format!("/api/v1/employees/{}", id(&staff[0]));
    let solana = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T";
    let res = app
        .write_as(&app.key, "PATCH", &path, json!({"wallet_address": solana}))
        .await;
    assert_state_conflict(&res, &["wallet_address"]);
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &path,
            json!({"wallet_address": solana, "network": "BASE"}),
        )
        .await;
    assert_eq!(
        (res.status.as_u16(), res.code()),
        (400, "INVALID_REQUEST_BODY"),
        "{}",
        res.text
    );
    // A wallet of no network's form is the body's own mistake whatever is stored (400).
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &path,
            json!({"wallet_address": "garbage"}),
        )
        .await;
    assert_eq!(
        (res.status.as_u16(), res.code()),
        (400, "INVALID_REQUEST_BODY"),
        "{}",
        res.text
    );
    // Nothing was written by any of them.
    let runs = app.get("/api/v1/payroll-runs").await;
    assert_eq!(runs.json["pagination"]["total"], 0, "{}", runs.text);
}
