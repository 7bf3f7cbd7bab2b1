//! API keys and scopes: refusals, expiry, rotation, revocation, delegation, rate limits.

use std::time::Duration;

use payroll::{http::route::Access, routes::ROUTES};
use serde_json::json;

use crate::helpers::{new_key, spawn_app, spawn_app_with};

#[actix_web::test]
async fn missing_malformed_and_unknown_keys_are_401() {
    let app = spawn_app().await;
    let res = app
        .send("GET", "/api/v1/employees", None, None, None, &[])
        .await;
    assert_eq!(res.status, 401);
    assert_eq!(res.code(), "INVALID_API_KEY");
    for header in [
        "Basic abc",
        "Bearer nope",
        "Bearer mpk_live_0123456789abcdefghij0123456789abcdefgh",
    ] {
        let res = app
            .send(
                "GET",
                "/api/v1/employees",
                None,
                None,
                None,
                &[("Authorization", header)],
            )
            .await;
        assert_eq!(res.status, 401, "{header}");
        assert_eq!(res.code(), "INVALID_API_KEY");
    }
}

#[actix_web::test]
async fn every_route_refuses_a_key_without_its_scope() {
    let app = spawn_app().await;
    // Only the webhook routes take webhooks:manage, and only the audit log audit:read: between
    // them, every route has a key that is refused.
    let (webhooks_key, _) = app.key_with(&["webhooks:manage"]).await;
    let (audit_key, _) = app.key_with(&["audit:read"]).await;
    for spec in ROUTES {
        let Access::AnyOf(scopes) = spec.access else {
            continue;
        };
        let (key, granted) = if spec.path.starts_with("/webhooks") {
            (&audit_key, "audit:read")
        } else {
            (&webhooks_key, "webhooks:manage")
        };
        let path = spec
            .path
            .replace("{run_id}", "run_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .replace("{employee_id}", "emp_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .replace("{key_id}", "key_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .replace("{webhook_id}", "wh_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .replace("{delivery_id}", "whd_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        let idem = new_key();
        let res = app
            .send(
                spec.method.as_str(),
                &format!("/api/v1{path}"),
                Some(key),
                spec.is_write().then_some(idem.as_str()),
                spec.is_write().then(|| b"{}".to_vec()),
                &[],
            )
            .await;
        assert_eq!(res.status, 403, "{spec:?}: {}", res.text);
        assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
        let required: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            res.json["error"]["details"]["required_scopes"],
            json!(required),
            "{spec:?}"
        );
        assert_eq!(
            res.json["error"]["details"]["granted_scopes"],
            json!([granted])
        );
        assert!(
            res.json["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(required[0]))
        );
    }
}

#[actix_web::test]
async fn wildcards_grant_their_family() {
    let app = spawn_app().await;
    let (key, _) = app.key_with(&["payroll:*"]).await;
    assert_eq!(app.get_as(&key, "/api/v1/payroll-runs").await.status, 200);
    assert_eq!(app.get_as(&key, "/api/v1/employees").await.status, 403);
}

#[actix_web::test]
async fn keys_cannot_grant_more_than_their_creator_holds() {
    let app = spawn_app().await;
    let (manager, _) = app.key_with(&["keys:manage", "payroll:read"]).await;
    let res = app
        .write_as(
            &manager,
            "POST",
            "/api/v1/api-keys",
            json!({"name": "x", "scopes": ["payroll:read", "payroll:execute"]}),
        )
        .await;
    assert_eq!(res.status, 403);
    assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
    assert_eq!(
        res.json["error"]["details"]["required_scopes"],
        json!(["payroll:execute"])
    );
    let res = app
        .write_as(
            &manager,
            "POST",
            "/api/v1/api-keys",
            json!({"name": "x", "scopes": ["payroll:read"]}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);

    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "", "scopes": ["payroll:fly"]}),
        )
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.invalid_fields(), vec!["name", "scopes[0]"]);
}

#[actix_web::test]
async fn created_keys_show_their_plaintext_once() {
    let app = spawn_app().await;
    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "agent", "scopes": ["payroll:read"]}),
        )
        .await;
    assert_eq!(res.status, 201);
    let key = res.data()["key"].as_str().expect("plaintext").to_owned();
    assert!(key.starts_with("mpk_live_") && key.len() >= 41);
    assert_eq!(res.data()["prefix"], &key[..12]);
    assert_eq!(res.data()["status"], "ACTIVE");
    let id = res.data()["id"].as_str().expect("id").to_owned();
    let res = app.get(&format!("/api/v1/api-keys/{id}")).await;
    assert_eq!(res.status, 200);
    assert!(res.data().get("key").is_none());
    let list = app.get("/api/v1/api-keys").await;
    assert!(!list.text.contains(&key));
    assert_eq!(list.json["pagination"]["total"], 2);
}

#[actix_web::test]
async fn expired_keys_are_refused_with_the_time() {
    let app = spawn_app().await;
    let expires = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "short", "scopes": ["payroll:read"], "expires_at": expires.to_rfc3339()}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let key = res.data()["key"].as_str().expect("plaintext").to_owned();
    assert_eq!(app.get_as(&key, "/api/v1/payroll-runs").await.status, 200);
    actix_web::rt::time::sleep(Duration::from_millis(1800)).await;
    let res = app.get_as(&key, "/api/v1/payroll-runs").await;
    assert_eq!(res.status, 401);
    assert_eq!(res.code(), "API_KEY_EXPIRED");
    assert!(
        res.json["error"]["details"]["expired_at"]
            .as_str()
            .is_some()
    );
}

#[actix_web::test]
async fn rotated_keys_work_through_their_grace_then_expire() {
    let app = spawn_app_with(|s| s.auth.rotation_grace_seconds = 1).await;
    let (old, old_id) = app.key_with(&["payroll:read", "keys:manage"]).await;
    let res = app
        .write_as(
            &old,
            "POST",
            &format!("/api/v1/api-keys/{old_id}/rotate"),
            json!({}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert_eq!(res.data()["rotated_from"], old_id.as_str());
    assert_eq!(res.data()["scopes"], json!(["keys:manage", "payroll:read"]));
    let new = res.data()["key"].as_str().expect("plaintext").to_owned();
    assert_ne!(new, old);
    assert_eq!(app.get_as(&old, "/api/v1/payroll-runs").await.status, 200);
    assert_eq!(app.get_as(&new, "/api/v1/payroll-runs").await.status, 200);
    actix_web::rt::time::sleep(Duration::from_millis(1300)).await;
    let res = app.get_as(&old, "/api/v1/payroll-runs").await;
    assert_eq!(res.status, 401);
    assert_eq!(res.code(), "API_KEY_EXPIRED");
    assert_eq!(app.get_as(&new, "/api/v1/payroll-runs").await.status, 200);
    let shown = app.get(&format!("/api/v1/api-keys/{old_id}")).await;
    assert_eq!(shown.data()["status"], "EXPIRED");
}

#[actix_web::test]
async fn revoked_keys_stop_at_once() {
    let app = spawn_app().await;
    let (key, id) = app.key_with(&["payroll:read"]).await;
    assert_eq!(app.get_as(&key, "/api/v1/payroll-runs").await.status, 200);
    let res = app
        .send(
            "DELETE",
            &format!("/api/v1/api-keys/{id}"),
            Some(&app.key),
            Some(&new_key()),
            None,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "REVOKED");
    let res = app.get_as(&key, "/api/v1/payroll-runs").await;
    assert_eq!(res.status, 401);
    assert_eq!(res.code(), "INVALID_API_KEY");
}

#[actix_web::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let app = spawn_app_with(|s| {
        s.api.rate_limit_per_second = 1;
        s.api.rate_limit_burst = 3;
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(app.get("/api/v1/payroll-runs").await);
    }
    assert!(statuses[..3].iter().all(|r| r.status == 200));
    let limited = statuses.last().expect("answers");
    assert_eq!(limited.status, 429);
    assert_eq!(limited.code(), "RATE_LIMITED");
    let retry: u64 = limited
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    assert_eq!(
        limited.json["error"]["details"]["retry_after_seconds"],
        retry
    );
}

#[actix_web::test]
async fn rotating_needs_every_scope_of_the_rotated_key() {
    let app = spawn_app().await;
    let (manager, _) = app.key_with(&["keys:manage"]).await;
    let res = app
        .write_as(
            &manager,
            "POST",
            &format!("/api/v1/api-keys/{}/rotate", app.key_id),
            json!({}),
        )
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
    assert!(res.data().is_null());
    // The admin key still works: nothing was rotated.
    assert_eq!(app.get("/api/v1/payroll-runs").await.status, 200);
}

#[actix_web::test]
async fn any_key_reads_itself_without_its_secret() {
    let app = spawn_app().await;
    let (reader, reader_id) = app.key_with(&["payroll:read"]).await;
    let res = app.get_as(&reader, "/api/v1/api-keys/current").await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["id"], reader_id.as_str());
    assert_eq!(res.data()["scopes"], json!(["payroll:read"]));
    assert_eq!(res.data()["status"], "ACTIVE");
    assert!(
        res.data().get("key").is_none_or(|k| k.is_null()),
        "{}",
        res.text
    );
    assert!(!res.text.contains(&reader));
    // Another key's id is still keys:manage only.
    let res = app
        .get_as(&reader, &format!("/api/v1/api-keys/{reader_id}"))
        .await;
    assert_eq!(res.status, 403);
    let res = app
        .send("GET", "/api/v1/api-keys/current", None, None, None, &[])
        .await;
    assert_eq!(res.status, 401);
}

/// Revoking needs what rotating needs (CONTRACT §2): every scope of the target key, unless a
/// key revokes itself.
/// `DELETE /api-keys/{target}` with `key`.
async fn revoke_with(
    app: &crate::helpers::TestApp,
    key: &str,
    target: &str,
) -> crate::helpers::Resp {
    app.send(
        "DELETE",
        &format!("/api/v1/api-keys/{target}"),
        Some(key),
        Some(&crate::helpers::new_key()),
        None,
        &[],
    )
    .await
}

#[actix_web::test]
async fn revoking_needs_every_scope_of_the_revoked_key() {
    let app = spawn_app().await;
    let (manager, manager_id) = app.key_with(&["keys:manage", "payroll:read"]).await;
    let res = revoke_with(&app, &manager, &app.key_id).await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
    // The admin key still works: nothing was revoked.
    assert_eq!(app.get("/api/v1/payroll-runs").await.status, 200);
    // A key with every scope of the target may; a key may always revoke itself.
    let (reader, reader_id) = app.key_with(&["payroll:read"]).await;
    let res = revoke_with(&app, &manager, &reader_id).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(
        app.get_as(&reader, "/api/v1/payroll-runs").await.status,
        401
    );
    let res = revoke_with(&app, &manager, &manager_id).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "REVOKED");
    // A leaked narrow key, without keys:manage, revokes itself; another key it may not touch.
    let (narrow, narrow_id) = app.key_with(&["payroll:read"]).await;
    let (other, other_id) = app.key_with(&["payroll:read"]).await;
    let res = revoke_with(&app, &narrow, &other_id).await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert_eq!(res.code(), "INSUFFICIENT_SCOPE");
    assert_eq!(app.get_as(&other, "/api/v1/payroll-runs").await.status, 200);
    let res = revoke_with(&app, &narrow, &narrow_id).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["status"], "REVOKED");
    assert_eq!(
        app.get_as(&narrow, "/api/v1/payroll-runs").await.status,
        401
    );
}

/// A key is rotated once: a second rotation (one after another, or two at once) is 409
/// `KEY_ALREADY_ROTATED` naming the successor, and mints nothing. Scopes are a sorted set.
#[actix_web::test]
async fn a_key_is_rotated_once_and_scopes_are_a_sorted_set() {
    let app = spawn_app().await;
    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "agent", "scopes": ["payroll:read", "employees:read", "payroll:read"]}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    assert_eq!(
        res.data()["scopes"],
        json!(["employees:read", "payroll:read"])
    );
    let key_id = res.data()["id"].as_str().expect("id").to_owned();
    let path = format!("/api/v1/api-keys/{key_id}/rotate");
    let first = app.post(&path, json!({})).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let again = app.post(&path, json!({})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.code(), "KEY_ALREADY_ROTATED");
    assert_eq!(
        again.json["error"]["details"]["successor_key_id"],
        first.data()["id"]
    );
    // Two rotations of a fresh key at once: one key, one 409.
    let res = app
        .post(
            "/api/v1/api-keys",
            json!({"name": "twice", "scopes": ["payroll:read"]}),
        )
        .await;
    let fresh = res.data()["id"].as_str().expect("id").to_owned();
    let path = format!("/api/v1/api-keys/{fresh}/rotate");
    let (a, b) =
        futures_util::future::join(app.post(&path, json!({})), app.post(&path, json!({}))).await;
    let mut statuses = vec![a.status.as_u16(), b.status.as_u16()];
    statuses.sort();
    assert_eq!(statuses, vec![201, 409], "{} / {}", a.text, b.text);
    let keys = app.get("/api/v1/api-keys?limit=200").await;
    let successors = keys
        .data()
        .as_array()
        .expect("keys")
        .iter()
        .filter(|k| k["rotated_from"] == fresh.as_str())
        .count();
    assert_eq!(successors, 1);
}

/// Instances started together on an empty PostgreSQL database create one bootstrap key
/// between them, not one each: the keys are counted under a lock in the transaction that
/// creates it.
#[actix_web::test]
async fn instances_started_together_create_one_bootstrap_key() {
    use payroll_entities::{api_key, db::Db};
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let Ok(base) = std::env::var("PAYROLL_TEST_DATABASE_URL") else {
        eprintln!(
            "skipped: several instances share only a PostgreSQL database; \
             set PAYROLL_TEST_DATABASE_URL (the CI's PostgreSQL suite runs it)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = payroll::config::Settings::defaults().expect("default settings");
    settings.data.dir = dir.path().to_path_buf();
    settings.auth.bootstrap_key = true;
    settings.database.url =
        payroll::config::Secret::new(crate::helpers::fresh_pg_schema(&base).await);
    let db = payroll::startup::connect_and_migrate(&settings)
        .await
        .expect("migrated");
    let pepper = payroll::startup::load_pepper(&settings).expect("pepper");
    // Eight instances, each with its own pool, reach the check at once.
    let mut instances = Vec::new();
    for _ in 0..8 {
        instances.push(
            Db::connect(&settings.database_url(), 1)
                .await
                .expect("database"),
        );
    }
    let starts = instances
        .iter()
        .map(|db| payroll::startup::bootstrap_key(&settings, db, &pepper));
    for started in futures_util::future::join_all(starts).await {
        started.expect("bootstrap");
    }
    let keys = api_key::Entity::find()
        .filter(api_key::Column::Name.eq("bootstrap"))
        .count(&db.conn)
        .await
        .expect("count");
    assert_eq!(keys, 1, "one bootstrap key for eight instances");
    // A later start finds it and creates none.
    payroll::startup::bootstrap_key(&settings, &db, &pepper)
        .await
        .expect("bootstrap");
    let all = api_key::Entity::find()
        .count(&db.conn)
        .await
        .expect("count");
    assert_eq!(all, 1);
}
