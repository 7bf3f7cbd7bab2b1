//! Agents prepare, humans approve (CONTRACT §16): agent sessions, approvals of every movement
//! of money, and what neither a session nor a key's own lineage may do.

use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, new_key, spawn_app, spawn_app_with};

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

/// A session of `scopes` created by `key`; its id and token.
async fn session(app: &TestApp, key: &str, scopes: &[&str]) -> (String, String) {
    let res = app
        .write_as(
            key,
            "POST",
            "/api/v1/agent-sessions",
            json!({"scopes": scopes, "description": "payroll agent"}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let token = res.data()["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("mps_live_"), "{token}");
    (id(res.data()), token)
}

const AGENT: &[&str] = &[
    "payroll:read",
    "payroll:write",
    "payroll:execute",
    "treasury:read",
    "employees:read",
];

/// A DEPOSITED run of two payees, prepared with `token`.
async fn deposited_by(app: &TestApp, token: &str) -> String {
    for (name, email) in [("Ada", "ada@example.com"), ("Bo", "bo@example.com")] {
        app.create_employee(name, email, 150_000).await;
    }
    app.fund(1_000_000).await;
    let res = app
        .write_as(
            token,
            "POST",
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let run_id = id(res.data());
    for step in ["confirm", "balance-check"] {
        let res = app
            .write_as(
                token,
                "POST",
                &format!("/api/v1/payroll-runs/{run_id}/{step}"),
                json!({}),
            )
            .await;
        assert_eq!(res.status, 200, "{step}: {}", res.text);
    }
    run_id
}

/// Execute of `run_id` with `token`: an agent's is held for approval (202).
async fn execute_as(app: &TestApp, token: &str, run_id: &str) -> Resp {
    app.write_as(
        token,
        "POST",
        &format!("/api/v1/payroll-runs/{run_id}/execute"),
        json!({}),
    )
    .await
}

async fn write_keyed(app: &TestApp, key: &str, path: &str, idem: &str, body: Value) -> Resp {
    app.send(
        "POST",
        path,
        Some(key),
        Some(idem),
        Some(serde_json::to_vec(&body).expect("json")),
        &[],
    )
    .await
}

#[actix_web::test]
async fn an_agent_prepares_a_human_approves_and_the_run_pays_once() {
    let app = spawn_app().await;
    let (session_id, token) = session(&app, &app.key, AGENT).await;
    let run_id = deposited_by(&app, &token).await;

    // Execute by the agent: 202, a PENDING approval, nothing else.
    let idem = new_key();
    let path = format!("/api/v1/payroll-runs/{run_id}/execute");
    let held = write_keyed(&app, &token, &path, &idem, json!({})).await;
    assert_eq!(held.status, 202, "{}", held.text);
    let approval = held.data().clone();
    assert_eq!(approval["status"], "PENDING");
    assert_eq!(approval["operation"], "executePayrollRun");
    assert_eq!(approval["resource_id"], run_id.as_str());
    assert_eq!(approval["requested_by"]["actor_type"], "AGENT_SESSION");
    assert_eq!(
        approval["requested_by"]["agent_session_id"],
        session_id.as_str()
    );
    assert_eq!(approval["requested_by"]["api_key_id"], app.key_id.as_str());
    let approval_id = id(&approval);
    assert!(approval_id.starts_with("apr_"));
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(
        run.data()["status"],
        "DEPOSITED",
        "nothing moved: {}",
        run.text
    );

    // The same request again: the same answer and approval.
    let again = write_keyed(&app, &token, &path, &idem, json!({})).await;
    assert_eq!(again.status, 202);
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(id(again.data()), approval_id);

    // The agent cannot decide (it never holds payroll:approve).
    let decide = format!("/api/v1/approvals/{approval_id}/approve");
    let refused = app.write_as(&token, "POST", &decide, json!({})).await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    // The agent can read it, and list it.
    let read = app
        .get_as(&token, &format!("/api/v1/approvals/{approval_id}"))
        .await;
    assert_eq!(read.status, 200, "{}", read.text);
    let listed = app
        .get(&format!(
            "/api/v1/approvals?status=PENDING&resource_id={run_id}"
        ))
        .await;
    assert_eq!(listed.json["pagination"]["total"], 1, "{}", listed.text);

    // A second human approves: the run is executed as the agent asked.
    let (approver, approver_id) = app.key_with(&["payroll:approve", "payroll:read"]).await;
    let approved = app.write_as(&approver, "POST", &decide, json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(approved.data()["status"], "APPROVED", "{}", approved.text);
    assert_eq!(approved.data()["decided_by"], approver_id.as_str());
    assert_eq!(approved.data()["result"]["status"], 200);
    assert_eq!(
        approved.data()["result"]["body"]["data"]["status"],
        "PAYING_OUT"
    );
    let run = app
        .wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(run["payout_summary"]["completed"], 2);

    // Deciding again is refused, and the run was executed once.
    let twice = app.write_as(&approver, "POST", &decide, json!({})).await;
    assert_eq!(
        (twice.status.as_u16(), twice.code()),
        (409, "APPROVAL_CLOSED")
    );
    assert_eq!(twice.json["error"]["details"]["status"], "APPROVED");

    // The audit log shows the agent's entries and the approver's, with their actor types.
    let entries = app
        .get(&format!(
            "/api/v1/audit-log?agent_session_id={session_id}&limit=200"
        ))
        .await;
    assert_eq!(entries.status, 200, "{}", entries.text);
    let entries = entries.data().as_array().expect("list").clone();
    assert!(entries.iter().all(|e| e["actor_type"] == "AGENT_SESSION"));
    assert!(
        entries
            .iter()
            .all(|e| e["api_key_id"] == app.key_id.as_str())
    );
    let executed = entries
        .iter()
        .find(|e| e["operation"] == "executePayrollRun" && e["status_code"] == 200)
        .expect("the execution's entry, as the agent's");
    assert_eq!(executed["details"]["approval"]["id"], approval_id.as_str());
    assert_eq!(
        executed["details"]["approval"]["approved_by_key_id"],
        approver_id.as_str()
    );
    assert!(
        entries.iter().any(|e| e["action"] == "APPROVAL_REQUESTED"),
        "{entries:?}"
    );
    let by_type = app
        .get("/api/v1/audit-log?actor_type=API_KEY&action=APPROVAL_APPROVED")
        .await;
    assert_eq!(by_type.data()[0]["api_key_id"], approver_id.as_str());

    // Events tell each step.
    let events = app.get("/api/v1/events?type=approval.approved").await;
    assert_eq!(events.json["pagination"]["total"], 1, "{}", events.text);
    let events = app.get("/api/v1/events?type=approval.requested").await;
    assert_eq!(events.json["pagination"]["total"], 1, "{}", events.text);
}

#[actix_web::test]
async fn a_keys_own_request_needs_another_lineage_when_approvals_are_required() {
    let app = spawn_app_with(|s| s.approvals.required = true).await;
    app.create_employee("Ada", "ada@example.com", 150_000).await;
    // Even the treasury transfer that funds the account waits.
    let held = app
        .post(
            "/api/v1/treasury/transfers",
            json!({"amount_usd_cents": 500_000}),
        )
        .await;
    assert_eq!(held.status, 202, "{}", held.text);
    assert_eq!(held.data()["requested_by"]["actor_type"], "API_KEY");
    let approval_id = id(held.data());
    let decide = format!("/api/v1/approvals/{approval_id}/approve");

    // The requesting key, and a key of its lineage (its rotation), may not approve.
    let own = app.write_as(&app.key, "POST", &decide, json!({})).await;
    assert_eq!(
        (own.status.as_u16(), own.code()),
        (409, "APPROVAL_SELF"),
        "{}",
        own.text
    );
    let rotated = app
        .act(&format!("/api/v1/api-keys/{}/rotate", app.key_id))
        .await;
    assert_eq!(rotated.status, 201, "{}", rotated.text);
    let successor = rotated.data()["key"].as_str().expect("key").to_owned();
    let own = app.write_as(&successor, "POST", &decide, json!({})).await;
    assert_eq!(own.code(), "APPROVAL_SELF", "{}", own.text);

    // Two approvers at once: one decision, one transfer.
    let (first, _) = app.key_with(&["payroll:approve"]).await;
    let (second, _) = app.key_with(&["payroll:approve"]).await;
    let (a, b) = futures_util::join!(
        app.write_as(&first, "POST", &decide, json!({})),
        app.write_as(&second, "POST", &decide, json!({}))
    );
    let mut statuses = [a.status.as_u16(), b.status.as_u16()];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{} / {}", a.text, b.text);
    let winner = if a.status == 200 { &a } else { &b };
    assert_eq!(winner.data()["status"], "APPROVED", "{}", winner.text);
    assert_eq!(winner.data()["result"]["status"], 201);
    let transfers = app.get("/api/v1/treasury/transfers").await;
    assert_eq!(
        transfers.json["pagination"]["total"], 1,
        "{}",
        transfers.text
    );

    // A rejected request is never carried out; a reason is required.
    let held = app
        .post("/api/v1/treasury/transfers", json!({"amount_usd_cents": 7}))
        .await;
    let reject = format!("/api/v1/approvals/{}/reject", id(held.data()));
    let no_reason = app.write_as(&first, "POST", &reject, json!({})).await;
    assert_eq!(no_reason.status, 400, "{}", no_reason.text);
    let rejected = app
        .write_as(&first, "POST", &reject, json!({"reason": "not this week"}))
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.text);
    assert_eq!(rejected.data()["status"], "REJECTED");
    assert_eq!(rejected.data()["reason"], "not this week");
    let transfers = app.get("/api/v1/treasury/transfers").await;
    assert_eq!(transfers.json["pagination"]["total"], 1);
}

#[actix_web::test]
async fn an_approved_execute_refused_by_the_state_of_that_moment_fails_and_moves_nothing() {
    let app = spawn_app().await;
    let (_, token) = session(&app, &app.key, AGENT).await;
    let run_id = deposited_by(&app, &token).await;
    let held = execute_as(&app, &token, &run_id).await;
    assert_eq!(held.status, 202, "{}", held.text);
    // Meanwhile a human cancels the run.
    let cancelled = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/cancel"))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    // The creator of the session may approve what its agent prepared.
    let decided = app
        .write_as(
            &app.key,
            "POST",
            &format!("/api/v1/approvals/{}/approve", id(held.data())),
            json!({}),
        )
        .await;
    assert_eq!(decided.status, 200, "{}", decided.text);
    assert_eq!(decided.data()["status"], "FAILED", "{}", decided.text);
    assert_eq!(decided.data()["result"]["status"], 409);
    assert_eq!(
        decided.data()["result"]["body"]["error"]["code"],
        "INVALID_STATUS_TRANSITION"
    );
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "CANCELLED");
    let events = app.get("/api/v1/events?type=approval.failed").await;
    assert_eq!(events.json["pagination"]["total"], 1);
}

#[actix_web::test]
async fn sessions_hold_only_what_their_key_delegates_for_a_bounded_time() {
    let app = spawn_app().await;
    let (narrow, narrow_id) = app.key_with(&["payroll:read", "payroll:write"]).await;
    let create = |key: String, body: Value| {
        let app = &app;
        async move {
            app.write_as(&key, "POST", "/api/v1/agent-sessions", body)
                .await
        }
    };
    // Beyond the creator's scopes: 403 naming them.
    let res = create(
        narrow.clone(),
        json!({"scopes": ["payroll:execute"], "description": "x"}),
    )
    .await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert_eq!(
        res.json["error"]["details"]["required_scopes"],
        json!(["payroll:execute"])
    );
    // Humans' scopes: 400 naming the field, whoever asks.
    for scope in [
        "keys:manage",
        "treasury:write",
        "treasury:*",
        "payroll:approve",
    ] {
        let res = create(
            app.key.clone(),
            json!({"scopes": [scope], "description": "x"}),
        )
        .await;
        assert_eq!(res.status, 400, "{scope}: {}", res.text);
        assert_eq!(res.invalid_fields(), vec!["scopes[0]"]);
    }
    // A description is required; an expiry beyond the maximum or past is a conflict.
    let res = create(app.key.clone(), json!({"scopes": ["payroll:read"]})).await;
    assert_eq!(res.invalid_fields(), vec!["description"]);
    let res = create(
        app.key.clone(),
        json!({"scopes": ["payroll:read"], "description": "x", "expires_at": "2999-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(
        (res.status.as_u16(), res.code()),
        (409, "STATE_CONFLICT"),
        "{}",
        res.text
    );
    assert_eq!(res.invalid_fields(), vec!["expires_at"]);

    // A session works like a key for what it holds, and is refused the rest.
    let (session_id, token) = session(&app, &narrow, &["payroll:read"]).await;
    let current = app.get_as(&token, "/api/v1/api-keys/current").await;
    assert_eq!(current.data()["id"], session_id.as_str());
    assert_eq!(current.data()["scopes"], json!(["payroll:read"]));
    assert_eq!(app.get_as(&token, "/api/v1/payroll-runs").await.status, 200);
    let write = app
        .write_as(
            &token,
            "POST",
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(write.status, 403);
    // A session never creates a session or a key, nor revokes its creator.
    let res = create(
        token.clone(),
        json!({"scopes": ["payroll:read"], "description": "x"}),
    )
    .await;
    assert_eq!(res.status, 403, "{}", res.text);
    let res = app
        .write_as(
            &token,
            "DELETE",
            &format!("/api/v1/api-keys/{narrow_id}"),
            json!({}),
        )
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
    // The creator sees it; another key without keys:manage does not.
    let (other, _) = app.key_with(&["payroll:read"]).await;
    let path = format!("/api/v1/agent-sessions/{session_id}");
    assert_eq!(app.get_as(&narrow, &path).await.status, 200);
    assert_eq!(app.get_as(&other, &path).await.status, 404);
    assert_eq!(app.get(&path).await.data()["status"], "ACTIVE");

    // Revoking the creating key ends its sessions.
    let revoked = app
        .write_as(
            &app.key,
            "DELETE",
            &format!("/api/v1/api-keys/{narrow_id}"),
            json!({}),
        )
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    let refused = app.get_as(&token, "/api/v1/payroll-runs").await;
    assert_eq!(
        (refused.status.as_u16(), refused.code()),
        (401, "INVALID_API_KEY")
    );
    assert_eq!(app.get(&path).await.data()["status"], "REVOKED");

    // A session revoked by its creator stops at once.
    let (session_id, token) = session(&app, &app.key, &["payroll:read"]).await;
    let res = app
        .write_as(
            &app.key,
            "DELETE",
            &format!("/api/v1/agent-sessions/{session_id}"),
            json!({}),
        )
        .await;
    assert_eq!(res.data()["status"], "REVOKED", "{}", res.text);
    assert_eq!(app.get_as(&token, "/api/v1/payroll-runs").await.status, 401);
}

#[actix_web::test]
async fn an_expired_approval_cannot_be_decided() {
    let app = spawn_app().await;
    let (_, token) = session(&app, &app.key, AGENT).await;
    let run_id = deposited_by(&app, &token).await;
    let held = execute_as(&app, &token, &run_id).await;
    let approval_id = id(held.data());
    // Its expiry passes.
    let db = app.db().await;
    {
        use payroll_entities::approval;
        use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, IntoActiveModel};
        let model = approval::Entity::find_by_id(approval_id.as_str())
            .one(&db.conn)
            .await
            .expect("read")
            .expect("approval");
        let mut active = model.into_active_model();
        active.expires_at = Set(payroll_entities::time::now() - chrono::Duration::seconds(1));
        active.update(&db.conn).await.expect("update");
    }
    let read = app.get(&format!("/api/v1/approvals/{approval_id}")).await;
    assert_eq!(read.data()["status"], "EXPIRED");
    let late = app
        .write_as(
            &app.key,
            "POST",
            &format!("/api/v1/approvals/{approval_id}/approve"),
            json!({}),
        )
        .await;
    assert_eq!(
        (late.status.as_u16(), late.code()),
        (409, "APPROVAL_CLOSED"),
        "{}",
        late.text
    );
    assert_eq!(late.json["error"]["details"]["status"], "EXPIRED");
    let events = app.get("/api/v1/events?type=approval.expired").await;
    assert_eq!(events.json["pagination"]["total"], 1, "{}", events.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DEPOSITED");
}

/// The wallet address of `employee`'s payout in run `run_id`.
async fn payout_wallet(app: &TestApp, run_id: &str, employee: &Value) -> Value {
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    payouts
        .data()
        .as_array()
        .expect("payouts")
        .iter()
        .find(|p| p["employee_id"] == employee["id"])
        .expect("the employee's payout")["wallet_address"]
        .clone()
}

/// The outbox files whose text contains `needle`, waiting up to 10 s for `count` of them.
async fn outbox_with(app: &TestApp, needle: &str, count: usize) -> Vec<String> {
    let outbox = app.settings.data.dir.join("outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let texts: Vec<String> = std::fs::read_dir(&outbox)
            .map(|d| d.flatten().collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| std::fs::read_to_string(f.path()).ok())
            .filter(|t| t.contains(needle))
            .collect();
        if texts.len() >= count || std::time::Instant::now() > deadline {
            return texts;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn a_changed_wallet_is_seen_told_and_held_until_another_person_lifts_it() {
    let app = spawn_app().await;
    let ada = app.create_employee("Ada", "ada@example.com", 150_000).await;
    let bo = app.create_employee("Bo", "bo@example.com", 150_000).await;
    assert_eq!(ada["wallet_hold_until"], Value::Null);
    app.fund(1_000_000).await;
    let new_wallet = crate::helpers::evm_address("attacker");

    // By PATCH: held, audited with both addresses, announced, and told to the employee.
    let patched = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{}", id(&ada)),
            json!({"wallet_address": new_wallet}),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert!(
        patched.data()["wallet_hold_until"].is_string(),
        "{}",
        patched.text
    );
    assert!(patched.data()["wallet_changed_at"].is_string());
    let entries = app
        .get(&format!(
            "/api/v1/audit-log?action=EMPLOYEE_WALLET_CHANGED&resource_id={}",
            id(&ada)
        ))
        .await;
    let details = &entries.data()[0]["details"];
    assert_eq!(details["wallet_address"]["before"], ada["wallet_address"]);
    assert_eq!(details["wallet_address"]["after"], new_wallet.as_str());
    let events = app.get("/api/v1/events?type=employee.wallet_changed").await;
    assert_eq!(events.json["pagination"]["total"], 1, "{}", events.text);
    let notices = outbox_with(&app, "Your payout wallet at", 1).await;
    assert_eq!(notices.len(), 1);
    assert!(notices[0].contains("ada@example.com"), "{}", notices[0]);
    assert!(notices[0].contains("If this was not you"), "{}", notices[0]);

    // Confirm refuses the held payee's payout, naming it and the hold's end.
    let run_id = app
        .create_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let confirm = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(
        (confirm.status.as_u16(), confirm.code()),
        (409, "STATE_CONFLICT"),
        "{}",
        confirm.text
    );
    let fields = confirm.invalid_fields();
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert!(
        fields[0].starts_with("payouts[pay_") && fields[0].ends_with("].wallet"),
        "{fields:?}"
    );
    assert!(
        confirm.text.contains("wallet recently changed; held until"),
        "{}",
        confirm.text
    );

    // The lineage that changed it may not lift the hold, nor may a session; another may.
    let lift = format!("/api/v1/employees/{}/wallet-approvals", id(&ada));
    let own = app.write_as(&app.key, "POST", &lift, json!({})).await;
    assert_eq!(
        (own.status.as_u16(), own.code()),
        (409, "APPROVAL_SELF"),
        "{}",
        own.text
    );
    let (_, token) = session(&app, &app.key, AGENT).await;
    assert_eq!(
        app.write_as(&token, "POST", &lift, json!({})).await.status,
        403
    );
    let (other, _) = app.key_with(&["payroll:approve"]).await;
    let lifted = app.write_as(&other, "POST", &lift, json!({})).await;
    assert_eq!(lifted.status, 200, "{}", lifted.text);
    assert_eq!(lifted.data()["wallet_hold_until"], Value::Null);
    let again = app.write_as(&other, "POST", &lift, json!({})).await;
    assert_eq!(again.code(), "STATE_CONFLICT");
    let confirm = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.text);

    // A wallet changed by import after confirm does not change where that run pays.
    let confirmed_bo = payout_wallet(&app, &run_id, &bo).await;
    let csv = format!(
        "name,email,salary_usd_cents,network,wallet_address\nBo,bo@example.com,150000,BASE,{}\n",
        crate::helpers::evm_address("elsewhere")
    );
    let imported = app.import_csv(csv).await;
    assert_eq!(imported.status, 200, "{}", imported.text);
    let bo_now = app.get(&format!("/api/v1/employees/{}", id(&bo))).await;
    assert!(
        bo_now.data()["wallet_hold_until"].is_string(),
        "{}",
        bo_now.text
    );
    let balance = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    assert_eq!(
        balance.data()["run_status"],
        "DEPOSITED",
        "{}",
        balance.text
    );
    let executed = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(executed.status, 200, "{}", executed.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    let paid_bo = payout_wallet(&app, &run_id, &bo).await;
    assert_eq!(paid_bo, confirmed_bo, "paid where it was confirmed");
    let events = app.get("/api/v1/events?type=employee.wallet_changed").await;
    assert_eq!(events.json["pagination"]["total"], 2);
    assert_eq!(outbox_with(&app, "Your payout wallet at", 2).await.len(), 2);
}

#[actix_web::test]
async fn revoking_a_session_or_its_key_rejects_what_it_asked_for() {
    let app = spawn_app().await;
    let (session_id, token) = session(&app, &app.key, AGENT).await;
    let run_id = deposited_by(&app, &token).await;
    let held = execute_as(&app, &token, &run_id).await;
    let revoked = app
        .write_as(
            &app.key,
            "DELETE",
            &format!("/api/v1/agent-sessions/{session_id}"),
            json!({}),
        )
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    let read = app
        .get(&format!("/api/v1/approvals/{}", id(held.data())))
        .await;
    assert_eq!(read.data()["status"], "REJECTED", "{}", read.text);
    assert_eq!(
        read.data()["reason"],
        "the requesting agent session was revoked"
    );

    // A key's revocation rejects its sessions' requests too.
    let (narrow, narrow_id) = app.key_with(&["payroll:read", "payroll:execute"]).await;
    let (_, token) = session(&app, &narrow, &["payroll:read", "payroll:execute"]).await;
    // Through the /runs alias too: the same operation, held the same way.
    let held = app
        .write_as(
            &token,
            "POST",
            &format!("/api/v1/runs/{run_id}/execute"),
            json!({}),
        )
        .await;
    assert_eq!(held.status, 202, "{}", held.text);
    assert_eq!(held.data()["operation"], "executePayrollRun");
    let revoked = app
        .write_as(
            &app.key,
            "DELETE",
            &format!("/api/v1/api-keys/{narrow_id}"),
            json!({}),
        )
        .await;
    assert_eq!(revoked.status, 200);
    let read = app
        .get(&format!("/api/v1/approvals/{}", id(held.data())))
        .await;
    assert_eq!(read.data()["status"], "REJECTED", "{}", read.text);
    let events = app.get("/api/v1/events?type=approval.rejected").await;
    assert_eq!(events.json["pagination"]["total"], 2);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DEPOSITED");
}

/// CONTRACT §10: an employee event goes only to endpoints whose registering key could read
/// employees, also one subscribed to `*` before employee events existed.
#[actix_web::test]
async fn wallet_change_events_reach_only_endpoints_that_may_read_employees() {
    let app = spawn_app_with(|s| {
        s.webhooks.allow_http = true;
        s.webhooks.allow_private_networks = true;
    })
    .await;
    let ada = app.create_employee("Ada", "ada@example.com", 150_000).await;
    let full = app
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://127.0.0.1:9/full", "events": ["*"]}),
        )
        .await;
    assert_eq!(full.status, 201, "{}", full.text);
    // An endpoint of a key without employees:read, subscribed to `*` (as an older release let
    // it): written as that release left it.
    let (_, reader_id) = app.key_with(&["payroll:read", "webhooks:manage"]).await;
    let older = {
        use payroll_entities::webhook_endpoint;
        use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait};
        let db = app.db().await;
        let model = webhook_endpoint::Entity::find_by_id(id(full.data()))
            .one(&db.conn)
            .await
            .expect("read")
            .expect("endpoint");
        let mut copy = model.clone();
        copy.id = payroll_entities::ids::new_id(payroll_entities::ids::IdKind::Webhook);
        copy.url = "http://127.0.0.1:9/older".into();
        copy.created_by_key_id = Some(reader_id);
        let mut active: webhook_endpoint::ActiveModel = copy.clone().into();
        active.id = Set(copy.id.clone());
        active.insert(&db.conn).await.expect("insert");
        copy.id
    };
    let patched = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{}", id(&ada)),
            json!({"wallet_address": crate::helpers::evm_address("new")}),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let deliveries = |endpoint: String| {
        let app = &app;
        async move {
            app.get(&format!(
                "/api/v1/webhooks/{endpoint}/deliveries?event_type=employee.wallet_changed"
            ))
            .await
        }
    };
    let full_id = id(full.data());
    let full = deliveries(full_id.clone()).await;
    assert_eq!(full.json["pagination"]["total"], 1, "{}", full.text);
    let older_deliveries = deliveries(older.clone()).await;
    assert_eq!(
        older_deliveries.json["pagination"]["total"], 0,
        "full {full_id}, older {older}: {}",
        older_deliveries.text
    );
}

/// An approval whose carrying out was cut after the decision (a crash) is carried on by its
/// approver sending approve again; another approver meanwhile finds it decided.
#[actix_web::test]
async fn an_approval_cut_after_its_decision_is_carried_on_once() {
    let app = spawn_app().await;
    let (_, token) = session(&app, &app.key, AGENT).await;
    let run_id = deposited_by(&app, &token).await;
    let held = execute_as(&app, &token, &run_id).await;
    let approval_id = id(held.data());
    let (approver, approver_id) = app.key_with(&["payroll:approve"]).await;
    // As a crash after the decision leaves it: APPROVED, no result, nothing carried out.
    {
        use payroll_entities::{ApprovalStatus, approval};
        use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, IntoActiveModel};
        let db = app.db().await;
        let model = approval::Entity::find_by_id(approval_id.as_str())
            .one(&db.conn)
            .await
            .expect("read")
            .expect("approval");
        let mut active = model.into_active_model();
        active.status = Set(ApprovalStatus::Approved);
        active.decided_by_key_id = Set(Some(approver_id));
        active.decided_at = Set(Some(payroll_entities::time::now()));
        active.update(&db.conn).await.expect("update");
    }
    let decide = format!("/api/v1/approvals/{approval_id}/approve");
    let (other, _) = app.key_with(&["payroll:approve"]).await;
    let closed = app.write_as(&other, "POST", &decide, json!({})).await;
    assert_eq!(closed.code(), "APPROVAL_CLOSED", "{}", closed.text);
    let run = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(run.data()["status"], "DEPOSITED");
    let carried = app.write_as(&approver, "POST", &decide, json!({})).await;
    assert_eq!(carried.status, 200, "{}", carried.text);
    assert_eq!(carried.data()["status"], "APPROVED");
    assert_eq!(carried.data()["result"]["status"], 200);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    let again = app.write_as(&approver, "POST", &decide, json!({})).await;
    assert_eq!(again.code(), "APPROVAL_CLOSED", "{}", again.text);
    let jobs = app.get(&format!("/api/v1/payroll-runs/{run_id}")).await;
    assert_eq!(jobs.data()["payout_summary"]["completed"], 2);
}
