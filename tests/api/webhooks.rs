//! Webhooks through the real API and a real local receiver: registration and its guard,
//! Standard Webhooks signatures checked by an independent verifier, subscriptions, retries at
//! the schedule, deactivation, enable + manual retry, rotation, and failing receivers.

use std::time::{Duration, Instant};

use payroll::config::Settings;
use sea_orm::{EntityTrait, IntoActiveModel};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, new_key, spawn_app, spawn_app_with},
    receiver::{Received, Receiver},
};

/// Local receivers over plain HTTP, and a quick retry schedule.
fn local(settings: &mut Settings) {
    settings.webhooks.allow_http = true;
    settings.webhooks.allow_private_networks = true;
    settings.webhooks.retry_schedule_ms = vec![300, 600, 900];
    settings.webhooks.timeout_ms = 2_000;
}

async fn register(app: &TestApp, url: &str, events: Value) -> (String, String) {
    let res = app
        .post("/api/v1/webhooks", json!({"url": url, "events": events}))
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    (
        res.data()["id"].as_str().expect("id").to_owned(),
        res.data()["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn deliveries(app: &TestApp, webhook_id: &str) -> Vec<Value> {
    let res = app
        .get(&format!(
            "/api/v1/webhooks/{webhook_id}/deliveries?limit=200"
        ))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.data().as_array().expect("list").clone()
}

/// Polls the endpoint's deliveries until `done` holds.
async fn wait_deliveries(
    app: &TestApp,
    webhook_id: &str,
    seconds: u64,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let list = deliveries(app, webhook_id).await;
        if done(&list) {
            return list;
        }
        assert!(Instant::now() < deadline, "deliveries: {list:#?}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn endpoint(app: &TestApp, webhook_id: &str) -> Value {
    let res = app.get(&format!("/api/v1/webhooks/{webhook_id}")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.data().clone()
}

/// Two employees paid from create to COMPLETED; returns the run id.
async fn pay_a_run(app: &TestApp, emails: &[&str]) -> String {
    for (i, email) in emails.iter().enumerate() {
        app.create_employee(&format!("Payee {i}"), email, 1000)
            .await;
    }
    app.fund(100_000).await;
    let run_id = app
        .deposited_run(json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    app.wait_for_run(&run_id, 30, |r| r["status"] == "COMPLETED")
        .await;
    run_id
}

#[actix_web::test]
async fn registration_is_validated_events_first_then_the_url() {
    let app = spawn_app().await;
    let res = app
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://127.0.0.1/x", "events": ["payroll.run.nope"]}),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.code(), "INVALID_REQUEST_BODY");
    let fields = res.invalid_fields();
    assert_eq!(fields[0], "events[0]", "{}", res.text);
    assert!(res.text.contains("payout.*"), "the hint lists the kinds");

    for events in [json!([]), json!(null)] {
        let res = app
            .post(
                "/api/v1/webhooks",
                json!({"url": "https://example.com", "events": events}),
            )
            .await;
        assert_eq!(res.status, 400, "{}", res.text);
        assert!(res.invalid_fields().contains(&"events".to_owned()));
    }

    let res = app
        .post(
            "/api/v1/webhooks",
            json!({"url": "http://example.com/hook", "events": ["*"]}),
        )
        .await;
    assert_eq!(res.status, 400);
    assert!(res.text.contains("webhooks.allow_http"), "{}", res.text);

    for url in [
        "https://127.0.0.1/hook",
        "https://localhost/hook",
        "https://10.0.0.8/hook",
        "https://169.254.169.254/latest",
        "https://[::1]/hook",
    ] {
        let res = app
            .post("/api/v1/webhooks", json!({"url": url, "events": ["*"]}))
            .await;
        assert_eq!(res.status, 400, "{url}: {}", res.text);
        assert!(
            res.text.contains("webhooks.allow_private_networks"),
            "{url}: {}",
            res.text
        );
    }
    for body in [
        json!({"url": "not a url", "events": ["*"]}),
        json!({"url": 7, "events": ["*"]}),
        json!({"url": "https://example.com", "events": "*"}),
        json!({"url": "https://example.com", "events": ["*"], "secret": "mine"}),
        json!({"url": "ftp://example.com", "events": ["*"]}),
    ] {
        let res = app.post("/api/v1/webhooks", body.clone()).await;
        assert_eq!(res.status, 400, "{body}: {}", res.text);
    }
    let res = app.get("/api/v1/webhooks").await;
    assert_eq!(res.data(), &json!([]), "nothing was registered");
    for path in [
        "/api/v1/webhooks/wh_nope",
        "/api/v1/webhooks/run_01J0000000000000000000000",
    ] {
        let res = app.get(path).await;
        assert_eq!(res.status, 404, "{}", res.text);
        assert_eq!(res.code(), "RESOURCE_NOT_FOUND");
    }
}

#[actix_web::test]
async fn endpoints_are_created_listed_rotated_and_deleted() {
    let app = spawn_app_with(local).await;
    let receiver = Receiver::start().await;
    let idem = new_key();
    let body = serde_json::to_vec(
        &json!({"url": receiver.url("/ok"), "events": ["run.*", "payout.failed"], "description": "ops"}),
    )
    .expect("json");
    let res = app
        .send(
            "POST",
            "/api/v1/webhooks",
            Some(&app.key),
            Some(&idem),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let id = res.data()["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("wh_"));
    let secret = res.data()["secret"].as_str().expect("secret").to_owned();
    let key = payroll_actors::webhook::signing::secret_key(&secret).expect("whsec_ + base64");
    assert_eq!(key.len(), 32);
    assert_eq!(res.data()["status"], "ACTIVE");
    assert_eq!(res.data()["events"], json!(["run.*", "payout.failed"]));

    // A replay answers the same endpoint without the secret, which is never stored in clear.
    let replay = app
        .send(
            "POST",
            "/api/v1/webhooks",
            Some(&app.key),
            Some(&idem),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.data()["id"], id.as_str());
    assert_eq!(replay.data()["secret"], Value::Null);
    let row = payroll_entities::webhook_endpoint::Entity::find_by_id(id.clone())
        .one(&app.db().await.conn)
        .await
        .expect("query")
        .expect("row");
    assert!(!row.secret.contains(&secret[6..]), "sealed at rest");

    let got = endpoint(&app, &id).await;
    assert!(got.get("secret").is_none(), "{got}");
    let res = app
        .get(&format!(
            "/api/v1/webhooks/{id}/deliveries?event_type=bogus"
        ))
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.code(), "INVALID_QUERY_PARAMETER");
    let res = app
        .get(&format!(
            "/api/v1/webhooks/{id}/deliveries?event_type=run.created&status=PENDING"
        ))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let list = app.get("/api/v1/webhooks").await;
    assert_eq!(list.data().as_array().map(Vec::len), Some(1));

    let rotated = app
        .act(&format!("/api/v1/webhooks/{id}/rotate-secret"))
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let new_secret = rotated.data()["secret"].as_str().expect("secret");
    assert_ne!(new_secret, secret);

    let narrow_key = app.key_with(&["payroll:read"]).await.0;
    let res = app.get_as(&narrow_key, "/api/v1/webhooks").await;
    assert_eq!(res.status, 403);
    assert!(res.text.contains("webhooks:manage"));

    let deleted = app
        .send(
            "DELETE",
            &format!("/api/v1/webhooks/{id}"),
            Some(&app.key),
            Some(&new_key()),
            None,
            &[],
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.data(), &json!({"id": id, "deleted": true}));
    assert_eq!(app.get(&format!("/api/v1/webhooks/{id}")).await.status, 404);
    let audit = app
        .get("/api/v1/audit-log?resource_type=webhook_endpoint")
        .await;
    let actions: Vec<&str> = audit
        .data()
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "WEBHOOK_CREATED",
        "WEBHOOK_SECRET_ROTATED",
        "WEBHOOK_DELETED",
    ] {
        assert!(actions.contains(&action), "{actions:?}");
    }
    assert!(
        !audit.text.contains(new_secret),
        "no secret in the audit log"
    );
}

#[actix_web::test]
async fn a_run_lifecycle_arrives_signed_and_verifiable() {
    let app = spawn_app_with(local).await;
    let receiver = Receiver::start().await;
    let (id, secret) = register(&app, &receiver.url("/ok"), json!(["*"])).await;
    pay_a_run(&app, &["a@example.com", "b@example.com"]).await;
    let expected = [
        "payroll.run.created",
        "payroll.run.confirmed",
        "payroll.run.deposited",
        "payroll.run.executing",
        "payroll.run.completed",
    ];
    let got = receiver
        .wait_for("/ok", 20, |r| {
            let kinds: Vec<String> = r.iter().map(Received::event_type).collect();
            expected.iter().all(|k| kinds.iter().any(|g| g == k))
                && kinds.iter().filter(|k| *k == "payout.completed").count() == 2
        })
        .await;
    let kinds: Vec<String> = got.iter().map(Received::event_type).collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "payout.processing").count(),
        2,
        "{kinds:?}"
    );
    for delivery in &got {
        delivery
            .verify(&secret)
            .unwrap_or_else(|e| panic!("{}: {e}", delivery.event_type()));
        assert_eq!(
            delivery.header("x-webhook-signature"),
            delivery.header("webhook-signature")
        );
        let body = delivery.json();
        assert_eq!(delivery.header("webhook-id"), body["id"].as_str());
        assert!(body["id"].as_str().is_some_and(|i| i.starts_with("evt_")));
        assert_eq!(body["api_version"], "2026-03-01");
        assert!(body["data"]["object"]["id"].is_string(), "{body}");
        let ts: i64 = delivery
            .header("webhook-timestamp")
            .and_then(|t| t.parse().ok())
            .expect("timestamp");
        assert!((chrono::Utc::now().timestamp() - ts).abs() < 60);
        assert_eq!(delivery.header("content-type"), Some("application/json"));
        assert!(
            delivery
                .verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .is_err()
        );
    }
    let completed = got
        .iter()
        .find(|d| d.event_type() == "payroll.run.completed")
        .expect("completed");
    assert_eq!(completed.json()["data"]["object"]["status"], "COMPLETED");

    let list = wait_deliveries(&app, &id, 10, |l| {
        l.len() == got.len() && l.iter().all(|d| d["status"] == "SUCCEEDED")
    })
    .await;
    let first = &list[0];
    assert_eq!(first["attempts"][0]["response_status"], 200);
    assert!(first["attempts"][0]["duration_ms"].as_i64().is_some());
    assert_eq!(first["next_attempt_at"], Value::Null);
    // Every delivered event is listed by GET /events too.
    let events = app.get("/api/v1/events?limit=200").await;
    for d in &got {
        assert!(events.text.contains(d.json()["id"].as_str().expect("id")));
    }
}

#[actix_web::test]
async fn aliases_and_wildcards_choose_what_each_endpoint_gets() {
    let app = spawn_app_with(local).await;
    let receiver = Receiver::start().await;
    register(&app, &receiver.url("/ok?runs"), json!(["run.*"])).await;
    // Paths tell the endpoints apart at one receiver.
    let (runs_only, _) =
        register(&app, &receiver.url("/status/200"), json!(["payroll.run.*"])).await;
    let (payouts_only, _) = register(&app, &receiver.url("/status/204"), json!(["payout.*"])).await;
    let (just_done, _) = register(
        &app,
        &receiver.url("/status/202"),
        json!(["run.completed", "payout.failed"]),
    )
    .await;
    pay_a_run(&app, &["c@example.com"]).await;
    let runs = receiver
        .wait_for("/status/200", 20, |r| {
            r.iter().any(|d| d.event_type() == "payroll.run.completed")
        })
        .await;
    assert!(
        runs.iter()
            .all(|d| d.event_type().starts_with("payroll.run."))
    );
    let payouts = receiver
        .wait_for("/status/204", 20, |r| {
            r.iter().any(|d| d.event_type() == "payout.completed")
        })
        .await;
    assert!(
        payouts
            .iter()
            .all(|d| d.event_type().starts_with("payout."))
    );
    let done = receiver
        .wait_for("/status/202", 20, |r| !r.is_empty())
        .await;
    assert_eq!(
        done.iter().map(Received::event_type).collect::<Vec<_>>(),
        ["payroll.run.completed"]
    );
    let aliased = receiver
        .wait_for("/ok", 20, |r| r.len() == runs.len())
        .await;
    assert!(
        aliased
            .iter()
            .all(|d| d.event_type().starts_with("payroll.run."))
    );
    for id in [runs_only, payouts_only, just_done] {
        wait_deliveries(&app, &id, 10, |l| {
            !l.is_empty() && l.iter().all(|d| d["status"] == "SUCCEEDED")
        })
        .await;
    }
}

#[actix_web::test]
async fn retries_follow_the_schedule_then_the_endpoint_is_disabled() {
    let app = spawn_app_with(local).await;
    let receiver = Receiver::start().await;
    let (id, secret) = register(&app, &receiver.url("/flaky"), json!(["*"])).await;
    let test = app.act(&format!("/api/v1/webhooks/{id}/test")).await;
    assert_eq!(test.status, 202, "{}", test.text);
    assert_eq!(test.data()["event_type"], "webhook.test");
    assert_eq!(test.data()["status"], "PENDING");
    let delivery_id = test.data()["id"].as_str().expect("id").to_owned();

    let got = receiver.wait_for("/flaky", 15, |r| r.len() == 4).await;
    // One attempt and three retries at 300, 600 and 900 ms, each at most 20 % late (plus
    // scheduling slack).
    for (i, base) in [300u64, 600, 900].iter().enumerate() {
        let gap = got[i + 1].at.duration_since(got[i].at);
        assert!(gap >= Duration::from_millis(*base), "retry {i}: {gap:?}");
        assert!(
            gap <= Duration::from_millis(base + base / 5 + 400),
            "retry {i}: {gap:?}"
        );
    }
    let event_id = got[0].header("webhook-id").expect("id").to_owned();
    assert!(
        got.iter()
            .all(|d| d.header("webhook-id") == Some(event_id.as_str()))
    );
    for d in &got {
        d.verify(&secret).expect("each attempt signed anew");
    }
    let list = wait_deliveries(&app, &id, 10, |l| l[0]["status"] == "FAILED").await;
    let attempts = list[0]["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 4);
    assert!(attempts.iter().all(|a| a["response_status"] == 500));
    assert_eq!(attempts[3]["error"], "HTTP 500");
    assert_eq!(list[0]["next_attempt_at"], Value::Null);
    let ep = endpoint(&app, &id).await;
    assert_eq!(ep["status"], "DISABLED");
    assert!(
        ep["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains(&delivery_id)),
        "{ep}"
    );
    assert!(ep["disabled_at"].is_string());
    actix_web::rt::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received_at("/flaky").len(), 4, "no more attempts");

    // Disabled: no test, no retry, no new deliveries.
    let res = app.act(&format!("/api/v1/webhooks/{id}/test")).await;
    assert_eq!(res.status, 409);
    assert!(res.text.contains("/enable"), "{}", res.text);
    let retry_path = format!("/api/v1/webhooks/{id}/deliveries/{delivery_id}/retry");
    assert_eq!(app.act(&retry_path).await.status, 409);
    app.create_employee("Late", "late@example.com", 500).await;
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-04-01", "period_end": "2026-04-30"}),
        )
        .await;
    assert_eq!(res.status, 201);
    assert_eq!(deliveries(&app, &id).await.len(), 1);
    let audit = app.get("/api/v1/audit-log?action=WEBHOOK_DISABLED").await;
    assert_eq!(audit.data()[0]["actor_type"], "SYSTEM", "{}", audit.text);
    assert_eq!(audit.data()[0]["resource_id"], id.as_str());

    // Fixed receiver, enabled endpoint, manual retry: delivered.
    receiver.heal();
    let res = app.act(&format!("/api/v1/webhooks/{id}/enable")).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "ACTIVE");
    assert_eq!(res.data()["disabled_reason"], Value::Null);
    let res = app.act(&retry_path).await;
    assert_eq!(res.status, 202, "{}", res.text);
    assert_eq!(res.data()["status"], "PENDING");
    let list = wait_deliveries(&app, &id, 10, |l| l[0]["status"] == "SUCCEEDED").await;
    assert_eq!(list[0]["attempts"].as_array().map(Vec::len), Some(5));
    assert_eq!(list[0]["attempts"][4]["response_status"], 204);
    let again = app.act(&retry_path).await;
    assert_eq!(again.status, 202, "a delivered event can be sent again");
}

#[actix_web::test]
async fn a_410_disables_at_once_and_pending_deliveries_fail() {
    let app = spawn_app_with(|s| {
        local(s);
        s.webhooks.max_in_flight_per_endpoint = 1;
    })
    .await;
    let receiver = Receiver::start().await;
    let (id, _) = register(&app, &receiver.url("/status/410"), json!(["*"])).await;
    // Three deliveries written at once (as a run's transition writes them), then a fourth by
    // the API, which wakes the dispatcher.
    let db = app.db().await;
    let tx = db.begin_write().await.expect("tx");
    let mut rows = Vec::new();
    for _ in 0..3 {
        let event = payroll_entities::event::Model {
            id: payroll_entities::ids::new_id(payroll_entities::ids::IdKind::Event),
            event_type: "webhook.test".into(),
            resource_id: id.clone(),
            created_at: payroll_entities::time::now(),
            data: json!({"object": {}}),
        };
        payroll_entities::event::Entity::insert(event.clone().into_active_model())
            .exec_without_returning(&*tx)
            .await
            .expect("event");
        rows.push(payroll_actors::webhook::store::new_delivery(&id, &event));
    }
    payroll_actors::webhook::store::insert_deliveries(&tx, rows)
        .await
        .expect("deliveries");
    tx.commit().await.expect("commit");
    assert_eq!(
        app.act(&format!("/api/v1/webhooks/{id}/test")).await.status,
        202
    );
    let list = wait_deliveries(&app, &id, 10, |l| l.iter().all(|d| d["status"] == "FAILED")).await;
    let attempted: Vec<&Value> = list
        .iter()
        .filter(|d| !d["attempts"].as_array().expect("attempts").is_empty())
        .collect();
    assert_eq!(attempted.len(), 1, "nothing is sent after a 410: {list:#?}");
    assert_eq!(receiver.received().len(), 1);
    for d in &attempted {
        assert_eq!(
            d["attempts"].as_array().map(Vec::len),
            Some(1),
            "no retry after 410"
        );
    }
    assert!(
        list.iter().any(|d| d["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("endpoint disabled"))),
        "{list:#?}"
    );
    let ep = endpoint(&app, &id).await;
    assert_eq!(ep["status"], "DISABLED");
    assert!(
        ep["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains("410"))
    );
}

#[actix_web::test]
async fn redirects_hangs_and_resets_fail_without_slowing_a_healthy_endpoint() {
    let app = spawn_app_with(|s| {
        local(s);
        s.webhooks.timeout_ms = 700;
        s.webhooks.retry_schedule_ms = vec![60_000];
    })
    .await;
    let receiver = Receiver::start().await;
    let (moved, _) = register(&app, &receiver.url("/status/301"), json!(["*"])).await;
    let (hang, _) = register(&app, &receiver.url("/hang"), json!(["*"])).await;
    let (reset, _) = register(&app, &receiver.reset_url(), json!(["*"])).await;
    let (healthy, _) = register(&app, &receiver.url("/ok"), json!(["*"])).await;
    for id in [&moved, &hang, &reset] {
        for _ in 0..20 {
            app.act(&format!("/api/v1/webhooks/{id}/test")).await;
        }
    }
    let started = Instant::now();
    assert_eq!(
        app.act(&format!("/api/v1/webhooks/{healthy}/test"))
            .await
            .status,
        202
    );
    receiver.wait_for("/ok", 5, |r| !r.is_empty()).await;
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "the healthy endpoint waited {:?} behind the others",
        started.elapsed()
    );
    for (id, needle) in [
        (&moved, "redirects are not followed"),
        (&hang, "no answer within 700 ms"),
        (&reset, ""),
    ] {
        let list = wait_deliveries(&app, id, 15, |l| {
            l.len() == 20
                && l.iter()
                    .all(|d| !d["attempts"].as_array().expect("a").is_empty())
        })
        .await;
        for d in &list {
            assert_eq!(d["status"], "PENDING", "a retry is scheduled");
            let error = d["attempts"][0]["error"].as_str().expect("error");
            assert!(error.contains(needle), "{id}: {error}");
            assert!(d["next_attempt_at"].is_string());
        }
    }
    assert!(
        receiver.received_at("/ok").len() == 1,
        "the redirect was not followed to /ok"
    );
}

#[actix_web::test]
async fn after_rotation_both_secrets_sign_until_the_grace_ends() {
    let app = spawn_app_with(local).await;
    let receiver = Receiver::start().await;
    let (id, old_secret) = register(&app, &receiver.url("/ok"), json!(["*"])).await;
    let res = app
        .act(&format!("/api/v1/webhooks/{id}/rotate-secret"))
        .await;
    let new_secret = res.data()["secret"].as_str().expect("secret").to_owned();
    app.act(&format!("/api/v1/webhooks/{id}/test")).await;
    let got = receiver.wait_for("/ok", 10, |r| r.len() == 1).await;
    let signature = got[0].header("webhook-signature").expect("signature");
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    got[0].verify(&new_secret).expect("new secret verifies");
    got[0]
        .verify(&old_secret)
        .expect("old secret still verifies");

    // Without a grace period only the new secret signs.
    let strict = spawn_app_with(|s| {
        local(s);
        s.webhooks.secret_rotation_grace_seconds = 0;
    })
    .await;
    let (id, old_secret) = register(&strict, &receiver.url("/status/200"), json!(["*"])).await;
    let res = strict
        .act(&format!("/api/v1/webhooks/{id}/rotate-secret"))
        .await;
    let new_secret = res.data()["secret"].as_str().expect("secret").to_owned();
    strict.act(&format!("/api/v1/webhooks/{id}/test")).await;
    let got = receiver.wait_for("/status/200", 10, |r| r.len() == 1).await;
    got[0].verify(&new_secret).expect("new secret verifies");
    assert!(got[0].verify(&old_secret).is_err());
}

#[actix_web::test]
async fn the_guard_runs_again_before_every_attempt() {
    // Registered while private networks were allowed; this server refuses them.
    let app = spawn_app_with(|s| {
        s.webhooks.allow_http = true;
        s.webhooks.retry_schedule_ms = vec![];
    })
    .await;
    let receiver = Receiver::start().await;
    let pepper = std::fs::read_to_string(app.settings.data.dir.join("key_pepper")).expect("pepper");
    let sealer =
        payroll_actors::webhook::secret_box::SecretBox::from_pepper(pepper.trim().as_bytes())
            .expect("box");
    let now = payroll_entities::time::now();
    let id = payroll_entities::ids::new_id(payroll_entities::ids::IdKind::Webhook);
    let row = payroll_entities::webhook_endpoint::Model {
        id: id.clone(),
        url: receiver.url("/ok"),
        events: json!(["*"]),
        description: None,
        status: payroll_entities::WebhookStatus::Active,
        disabled_reason: None,
        disabled_at: None,
        secret: sealer
            .seal(&payroll_actors::webhook::signing::generate_secret())
            .expect("sealed"),
        previous_secret: None,
        previous_secret_expires_at: None,
        created_by_key_id: None,
        created_at: now,
        updated_at: now,
        deleted_at: None,
    };
    payroll_entities::webhook_endpoint::Entity::insert(row.into_active_model())
        .exec_without_returning(&app.db().await.conn)
        .await
        .expect("insert");
    assert_eq!(
        app.act(&format!("/api/v1/webhooks/{id}/test")).await.status,
        202
    );
    let list = wait_deliveries(&app, &id, 10, |l| l[0]["status"] == "FAILED").await;
    let error = list[0]["attempts"][0]["error"].as_str().expect("error");
    assert!(error.contains("webhooks.allow_private_networks"), "{error}");
    assert!(
        receiver.received().is_empty(),
        "nothing reached the receiver"
    );
}

/// `kill -9` with one delivery waiting for its scheduled retry and one in the middle of its
/// attempt: after a restart both are delivered, each event under its one `webhook-id`.
#[actix_web::test]
async fn deliveries_survive_a_kill_9() {
    use crate::process::Setup;
    let receiver = Receiver::start().await;
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__WEBHOOKS__ALLOW_HTTP", "true")
        .with_env("PAYROLL__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true")
        .with_env("PAYROLL__WEBHOOKS__RETRY_SCHEDULE_MS", "1500,1500,1500")
        .with_env("PAYROLL__WEBHOOKS__TIMEOUT_MS", "1000");
    let mut first = setup.start(1).await;
    let mut ids = Vec::new();
    for path in ["/flaky", "/hang-once"] {
        let created = setup
            .call(
                &first,
                "POST",
                "/webhooks",
                Some(json!({"url": receiver.url(path), "events": ["*"]})),
            )
            .await;
        let id = created["data"]["id"].as_str().expect("id").to_owned();
        setup
            .call(&first, "POST", &format!("/webhooks/{id}/test"), None)
            .await;
        ids.push(id);
    }
    // The failed first attempt is on record with its retry scheduled; the other is in flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = setup
            .call(
                &first,
                "GET",
                &format!("/webhooks/{}/deliveries", ids[0]),
                None,
            )
            .await;
        let d = &list["data"][0];
        if d["attempts"].as_array().map(Vec::len) == Some(1) && d["status"] == "PENDING" {
            break;
        }
        assert!(Instant::now() < deadline, "{list}");
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    receiver.wait_for("/hang-once", 5, |r| r.len() == 1).await;
    first.child.kill().expect("kill -9");
    first.child.wait().ok();
    receiver.heal();

    let second = setup.start(2).await;
    let flaky = receiver.wait_for("/flaky", 20, |r| r.len() == 2).await;
    let hung = receiver.wait_for("/hang-once", 20, |r| r.len() == 2).await;
    for got in [&flaky, &hung] {
        assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    }
    assert!(flaky[1].at.duration_since(flaky[0].at) >= Duration::from_millis(1500));
    for id in &ids {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let list = setup
                .call(&second, "GET", &format!("/webhooks/{id}/deliveries"), None)
                .await;
            if list["data"][0]["status"] == "SUCCEEDED" {
                break;
            }
            assert!(Instant::now() < deadline, "{list}");
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        receiver.received().len(),
        4,
        "each event delivered once after the restart"
    );
}

/// An endpoint receives only what the key registering it could read (CONTRACT §10): a key
/// with `webhooks:manage` alone cannot subscribe to run or payout events (their objects need
/// `payroll:read`), `*` included; and at most `webhooks.max_endpoints` endpoints exist at once.
#[actix_web::test]
async fn subscriptions_need_the_read_scopes_of_their_events_and_endpoints_are_bounded() {
    let app = spawn_app_with(|s| {
        local(s);
        s.webhooks.max_endpoints = 3;
    })
    .await;
    let (manager, _) = app.key_with(&["webhooks:manage"]).await;
    for events in [json!(["*"]), json!(["payout.completed"]), json!(["run.*"])] {
        let res = app
            .write_as(
                &manager,
                "POST",
                "/api/v1/webhooks",
                json!({"url": "http://127.0.0.1:9/hook", "events": events}),
            )
            .await;
        assert_eq!(res.status, 403, "{events}: {}", res.text);
        assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
        // `*` receives employee events too (CONTRACT §10, §16).
        let needed = if events == json!(["*"]) {
            json!(["employees:read", "payroll:read"])
        } else {
            json!(["payroll:read"])
        };
        assert_eq!(res.json["error"]["details"]["required_scopes"], needed);
    }
    let (reader, _) = app
        .key_with(&["webhooks:manage", "payroll:read", "employees:read"])
        .await;
    let register = |url: String| {
        let (app, reader) = (&app, &reader);
        async move {
            app.write_as(
                reader,
                "POST",
                "/api/v1/webhooks",
                json!({"url": url, "events": ["*"]}),
            )
            .await
        }
    };
    let mut ids = Vec::new();
    for i in 0..3 {
        let res = register(format!("http://127.0.0.1:9/hook{i}")).await;
        assert_eq!(res.status, 201, "{}", res.text);
        ids.push(res.data()["id"].as_str().expect("id").to_owned());
    }
    let one_more = || register("http://127.0.0.1:9/one-more".to_owned());
    let res = one_more().await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "WEBHOOK_LIMIT_REACHED");
    assert_eq!(res.json["error"]["details"]["limit"], 3);
    let res = app
        .send(
            "DELETE",
            &format!("/api/v1/webhooks/{}", ids[0]),
            Some(&app.key),
            Some(&new_key()),
            None,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let res = one_more().await;
    assert_eq!(res.status, 201, "{}", res.text);
}
