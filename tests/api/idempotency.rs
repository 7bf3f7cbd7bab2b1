//! Idempotency-Key: replay, reuse, concurrency, and failures that store nothing.

use payroll::http::{idempotency, request::IdempotencyClaim};
use serde_json::json;

use crate::helpers::{evm_address, new_key, spawn_app, spawn_app_with};

fn employee_body(email: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "name": "Grace", "email": email, "salary_usd_cents": 100,
        "network": "ETHEREUM", "wallet_address": evm_address(email),
    }))
    .expect("json")
}

#[actix_web::test]
async fn a_replay_returns_the_stored_answer_byte_for_byte() {
    let app = spawn_app().await;
    let key = new_key();
    let body = employee_body("grace@example.com");
    let first = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(first.status, 201);
    assert!(first.header("idempotent-replayed").is_none());
    let second = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(second.status, 201);
    assert_eq!(second.text, first.text);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    // The header names the new request; the body is the original.
    assert_ne!(second.header("x-request-id"), first.header("x-request-id"));
    let list = app.get("/api/v1/employees").await;
    assert_eq!(list.json["pagination"]["total"], 1);

    // A quoted key is the same key.
    let quoted = format!("\"{key}\"");
    let third = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&quoted),
            Some(employee_body("grace@example.com")),
            &[],
        )
        .await;
    assert_eq!(third.text, first.text);
}

#[actix_web::test]
async fn a_key_reused_for_another_request_is_422() {
    let app = spawn_app().await;
    let key = new_key();
    let first = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(employee_body("a@example.com")),
            &[],
        )
        .await;
    assert_eq!(first.status, 201);
    let other_body = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(employee_body("b@example.com")),
            &[],
        )
        .await;
    assert_eq!(other_body.status, 422);
    assert_eq!(other_body.code(), "IDEMPOTENCY_KEY_REUSED");
    let other_route = app
        .send(
            "POST",
            "/api/v1/payroll-runs",
            Some(&app.key),
            Some(&key),
            Some(b"{}".to_vec()),
            &[],
        )
        .await;
    assert_eq!(other_route.status, 422);
}

#[actix_web::test]
async fn missing_or_malformed_keys_are_400() {
    let app = spawn_app().await;
    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            None,
            Some(employee_body("a@example.com")),
            &[],
        )
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.code(), "IDEMPOTENCY_KEY_REQUIRED");
    for bad in ["abc", "c232ab00-9414-11ec-b3c8-9f6bdeced846", ""] {
        let res = app
            .send(
                "POST",
                "/api/v1/employees",
                Some(&app.key),
                Some(bad),
                Some(employee_body("a@example.com")),
                &[],
            )
            .await;
        assert_eq!(res.status, 400, "{bad}");
        assert_eq!(res.code(), "INVALID_IDEMPOTENCY_KEY", "{bad}");
    }
    // Also DELETE and PATCH.
    let res = app
        .send(
            "DELETE",
            "/api/v1/employees/emp_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            Some(&app.key),
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(res.code(), "IDEMPOTENCY_KEY_REQUIRED");
}

#[actix_web::test]
async fn a_key_still_in_flight_is_409() {
    let app = spawn_app().await;
    let key = new_key();
    let body = employee_body("a@example.com");
    // Hold the key as a first request still running would.
    let db = payroll_entities::db::Db::connect(&app.settings.database_url(), 1)
        .await
        .expect("db");
    let mut claim = IdempotencyClaim {
        lineage_id: app.key_id.clone(),
        key: key.clone(),
        fingerprint: idempotency::fingerprint("createEmployee", &[], &body),
        locked_until: None,
    };
    let verdict = idempotency::claim(&db, &app.settings.idempotency, &mut claim)
        .await
        .expect("claim");
    assert_eq!(verdict, idempotency::Verdict::Proceed);
    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "IDEMPOTENCY_KEY_IN_USE");
    // Once the first request gives the key up, the same request runs.
    idempotency::release(&db, &claim).await.expect("release");
    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
}

#[actix_web::test]
async fn an_error_stores_nothing_so_the_fixed_request_runs() {
    let app = spawn_app().await;
    let key = new_key();
    let body =
        serde_json::to_vec(&json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
            .expect("json");
    let res = app
        .send(
            "POST",
            "/api/v1/payroll-runs",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert_eq!(res.code(), "STATE_CONFLICT");
    assert_eq!(res.invalid_fields(), vec!["employee_ids"]);
    // The cause is fixed: now there is someone to pay, and the same key runs the operation.
    app.create_employee("Ada", "ada@example.com", 10_000).await;
    let res = app
        .send(
            "POST",
            "/api/v1/payroll-runs",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert!(res.header("idempotent-replayed").is_none());
    assert_eq!(res.data()["employee_count"], 1);
    let again = app
        .send(
            "POST",
            "/api/v1/payroll-runs",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text, res.text);
}

#[actix_web::test]
async fn replays_never_show_a_secret_again() {
    let app = spawn_app().await;
    let key = new_key();
    let body =
        serde_json::to_vec(&json!({"name": "ci", "scopes": ["payroll:read"]})).expect("json");
    let first = app
        .send(
            "POST",
            "/api/v1/api-keys",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert!(first.data()["key"].as_str().is_some());
    let replay = app
        .send(
            "POST",
            "/api/v1/api-keys",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.data()["key"].is_null());
    assert_eq!(replay.data()["id"], first.data()["id"]);
}

#[actix_web::test]
async fn a_rotated_key_shares_its_predecessors_idempotency_keys() {
    let app = spawn_app().await;
    let (old, old_id) = app.key_with(&["employees:write", "keys:manage"]).await;
    let key = new_key();
    let body = employee_body("ren@example.com");
    let first = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&old),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(first.status, 201);
    let rotated = app
        .write_as(
            &old,
            "POST",
            &format!("/api/v1/api-keys/{old_id}/rotate"),
            json!({}),
        )
        .await;
    let new = rotated.data()["key"]
        .as_str()
        .expect("plaintext")
        .to_owned();
    let replay = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&new),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.text, first.text);
    // Another lineage has its own key space.
    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(res.code(), "EMPLOYEE_EMAIL_TAKEN");
}

#[actix_web::test]
async fn simultaneous_requests_with_one_key_take_effect_once() {
    let app = spawn_app().await;
    let key = new_key();
    let body = employee_body("once@example.com");
    let requests = (0..8).map(|_| {
        app.send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
    });
    let answers = futures_util::future::join_all(requests).await;
    let created: Vec<&str> = answers
        .iter()
        .filter(|r| r.status == 201)
        .map(|r| r.data()["id"].as_str().unwrap_or_default())
        .collect();
    assert!(!created.is_empty());
    assert!(created.iter().all(|id| *id == created[0]), "{created:?}");
    for other in answers.iter().filter(|r| r.status != 201) {
        assert_eq!(other.status, 409, "{}", other.text);
        assert_eq!(other.code(), "IDEMPOTENCY_KEY_IN_USE");
    }
    let list = app.get("/api/v1/employees").await;
    assert_eq!(list.json["pagination"]["total"], 1);
}

#[actix_web::test]
async fn expired_records_are_purged_and_their_keys_run_again() {
    let app = spawn_app_with(|s| s.idempotency.retention_seconds = 1).await;
    let key = new_key();
    let body = serde_json::to_vec(&json!({"name": "k", "scopes": ["payroll:read"]})).expect("json");
    let first = app
        .send(
            "POST",
            "/api/v1/api-keys",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
        .await;
    assert_eq!(first.status, 201);
    actix_web::rt::time::sleep(std::time::Duration::from_millis(1200)).await;
    let db = payroll_entities::db::Db::connect(&app.settings.database_url(), 1)
        .await
        .expect("db");
    let purged = payroll_actors::retention::purge_expired_idempotency(&db)
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    let second = app
        .send(
            "POST",
            "/api/v1/api-keys",
            Some(&app.key),
            Some(&key),
            Some(body),
            &[],
        )
        .await;
    assert_eq!(second.status, 201);
    assert!(second.header("idempotent-replayed").is_none());
    assert_ne!(second.data()["id"], first.data()["id"]);
}

/// A request that runs past `idempotency.lock_timeout_ms` may be taken over by a later one with
/// its key (the first looked crashed). The first then keeps nothing and answers 409
/// `IDEMPOTENCY_KEY_IN_USE`, never 500; the later one's answer is the key's.
#[actix_web::test]
async fn a_request_taken_over_past_the_lock_keeps_nothing_and_answers_409() {
    let app = spawn_app_with(|s| {
        s.idempotency.lock_timeout_ms = 20;
        s.api.max_concurrent_imports = 2;
    })
    .await;
    // An import whose rows take well over the lock's 20 ms to read and check, before it
    // writes anything: the later request takes the key over meanwhile.
    let rows: Vec<serde_json::Value> = (0..40_000)
        .map(|i| {
            let email = format!("slow{i}@example.com");
            json!({"name": format!("Person {i}"), "email": email, "salary_usd_cents": 100,
                   "network": "ETHEREUM", "wallet_address": evm_address(&email)})
        })
        .collect();
    let body = serde_json::to_vec(&rows).expect("json");
    let key = new_key();
    let send = || {
        app.send(
            "POST",
            "/api/v1/employees/import",
            Some(&app.key),
            Some(&key),
            Some(body.clone()),
            &[],
        )
    };
    let db = payroll_entities::db::Db::connect(&app.settings.database_url(), 1)
        .await
        .expect("db");
    let started = std::time::Instant::now();
    // The later request goes once the first holds the key and its lock has run out.
    let later = async {
        use payroll_entities::idempotency_record::{Column, Entity};
        use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
        while Entity::find()
            .filter(Column::IdempotencyKey.eq(key.as_str()))
            .one(&db.conn)
            .await
            .expect("record")
            .is_none()
        {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "never claimed"
            );
            actix_web::rt::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(40)).await;
        send().await
    };
    let (first, later) = futures_util::join!(send(), later);
    assert_ne!(
        later.header("idempotent-replayed"),
        Some("true"),
        "the first import ended ({:?}) before the later one took it over: make it slower",
        started.elapsed()
    );
    assert_eq!(later.status, 200, "{} / {}", later.text, first.text);
    assert_eq!(first.status, 409, "{}", first.text);
    assert_eq!(first.code(), "IDEMPOTENCY_KEY_IN_USE");
    assert!(first.text.contains("took it over"), "{}", first.text);
    // The key answers with the request that took it over; the rows were written once.
    let again = send().await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text, later.text);
    let list = app.get("/api/v1/employees?limit=1").await;
    assert_eq!(list.json["pagination"]["total"], 40_000);
}
