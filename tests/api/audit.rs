//! The audit log: one entry per request with the key that made it.

use serde_json::json;

use crate::helpers::spawn_app;

#[actix_web::test]
async fn reads_writes_and_refusals_are_audited_with_the_key() {
    let app = spawn_app().await;
    let (reader, reader_id) = app.key_with(&["employees:read"]).await;
    let read = app.get_as(&reader, "/api/v1/employees").await;
    assert_eq!(read.status, 200);
    let refused = app
        .write_as(&reader, "POST", "/api/v1/employees", json!({"name": "x"}))
        .await;
    assert_eq!(refused.status, 403);
    let written = app.create_employee("Ada", "ada@example.com", 100).await;

    let res = app
        .get(&format!("/api/v1/audit-log?api_key_id={reader_id}"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let entries = res.data().as_array().expect("list");
    assert_eq!(entries.len(), 2, "{entries:?}");
    let refusal = &entries[0];
    assert_eq!(refusal["status_code"], 403);
    assert_eq!(refusal["operation"], "createEmployee");
    assert_eq!(refusal["method"], "POST");
    assert!(refusal["action"].is_null());
    assert!(refusal["idempotency_key"].as_str().is_some());
    let read_entry = &entries[1];
    assert_eq!(read_entry["status_code"], 200);
    assert_eq!(read_entry["operation"], "listEmployees");
    assert_eq!(read_entry["api_key_id"], reader_id.as_str());
    assert_eq!(read_entry["request_id"], read.json["request_id"]);

    let res = app.get("/api/v1/audit-log?action=EMPLOYEE_CREATED").await;
    let entries = res.data().as_array().expect("list");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["resource_id"], written["id"]);
    assert_eq!(entries[0]["resource_type"], "employee");
    assert_eq!(entries[0]["api_key_id"], app.key_id.as_str());
    assert_eq!(entries[0]["status_code"], 201);
    assert_eq!(entries[0]["details"]["after"]["email"], "ada@example.com");

    let res = app
        .get(&format!(
            "/api/v1/audit-log?resource_id={}",
            written["id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(res.json["pagination"]["total"], 1);
}

#[actix_web::test]
async fn unauthenticated_refusals_are_audited_without_a_key() {
    let app = spawn_app().await;
    let res = app
        .send("GET", "/api/v1/payroll-runs", None, None, None, &[])
        .await;
    assert_eq!(res.status, 401);
    let request_id = res.json["request_id"].as_str().expect("id").to_owned();
    let res = app.get("/api/v1/audit-log?operation=listPayrollRuns").await;
    let entries = res.data().as_array().expect("list");
    let entry = entries
        .iter()
        .find(|e| e["request_id"] == request_id.as_str())
        .expect("entry of the refused request");
    assert!(entry["api_key_id"].is_null());
    assert_eq!(entry["status_code"], 401);
    assert_eq!(entry["actor_type"], "API_KEY");
}

#[actix_web::test]
async fn admin_commands_are_audited_as_admin() {
    let app = spawn_app().await;
    let res = app.get("/api/v1/audit-log?action=API_KEY_CREATED").await;
    let entries = res.data().as_array().expect("list");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["actor_type"], "ADMIN");
    assert_eq!(entries[0]["resource_id"], app.key_id.as_str());
}

/// The audit log cannot be used to fill the disk (CONTRACT §12, §13): a path is stored cut to
/// `audit.path_max_chars` with `path_truncated: true`; refusals without a key are stored up to
/// `audit.unauthenticated_per_second` per peer and counted beyond; a key's requests are always
/// recorded, however many.
#[actix_web::test]
async fn long_paths_are_cut_and_refusals_without_a_key_are_limited_per_peer() {
    use payroll_entities::audit_entry;
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let app = crate::helpers::spawn_app_with(|s| s.audit.unauthenticated_per_second = 20).await;
    let db = app.db().await;
    let long = format!("/api/v1/{}", "a".repeat(20_000));
    let res = app.send("GET", &long, None, None, None, &[]).await;
    assert_eq!(res.status, 404, "{}", res.text);
    let request_id = res.json["request_id"].as_str().expect("id").to_owned();
    let stored = wait_for_entry(&db, &request_id).await;
    assert_eq!(stored.path.as_deref().map(str::len), Some(512));
    assert_eq!(stored.details["path_truncated"], true);

    // 200 refusals without a key, at once, from one address: about 20 stored.
    let started = std::time::Instant::now();
    let mut refused = Vec::new();
    for _ in 0..200 {
        let res = app
            .send("GET", "/api/v1/employees", None, None, None, &[])
            .await;
        assert_eq!(res.status, 401);
        refused.push(res.json["request_id"].as_str().expect("id").to_owned());
    }
    let seconds = started.elapsed().as_secs_f64();
    // 200 requests with a key, refused too (no such employee): every one stored.
    let mut keyed = Vec::new();
    for _ in 0..200 {
        let res = app
            .get("/api/v1/employees/emp_01ARZ3NDEKTSV4RRFFQ69G5FAV")
            .await;
        assert_eq!(res.status, 404);
        keyed.push(res.json["request_id"].as_str().expect("id").to_owned());
    }
    let flushed = app.get("/api/v1/audit-log?limit=1").await;
    assert_eq!(flushed.status, 200);
    let count = |ids: Vec<String>| {
        let db = db.clone();
        async move {
            audit_entry::Entity::find()
                .filter(audit_entry::Column::RequestId.is_in(ids))
                .count(&db.conn)
                .await
                .expect("count")
        }
    };
    let stored_refusals = count(refused).await;
    let allowed = 20.0 + 20.0 * seconds + 1.0;
    assert!(
        (stored_refusals as f64) <= allowed && stored_refusals >= 20,
        "{stored_refusals} refusals stored in {seconds:.2} s"
    );
    assert_eq!(count(keyed).await, 200);
}

async fn wait_for_entry(
    db: &payroll_entities::db::Db,
    request_id: &str,
) -> payroll_entities::audit_entry::Model {
    use payroll_entities::audit_entry;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(entry) = audit_entry::Entity::find()
            .filter(audit_entry::Column::RequestId.eq(request_id))
            .one(&db.conn)
            .await
            .expect("entry")
        {
            return entry;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no entry for {request_id}"
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Every change of an employee's wallet or network, by any path, leaves its own entry with
/// both addresses: an update and an import, never an import that leaves the wallet alone.
#[actix_web::test]
async fn wallet_changes_leave_their_own_entry_with_both_addresses() {
    use crate::helpers::evm_address;
    let app = crate::helpers::spawn_app().await;
    let ada = app.create_employee("Ada", "ada@example.com", 1000).await;
    let ada_id = ada["id"].as_str().expect("id").to_owned();
    let first = evm_address("ada@example.com");
    let second = evm_address("ada-new@example.com");
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{ada_id}"),
            json!({"wallet_address": second}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    // An import that changes the wallet back, and one that changes nothing.
    let third = evm_address("ada-third@example.com");
    for wallet in [&third, &third] {
        let res = app
            .post(
                "/api/v1/employees/import",
                json!([{"name": "Ada", "email": "ada@example.com", "salary_usd_cents": 1000,
                        "network": "BASE", "wallet_address": wallet}]),
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
    }
    let res = app
        .get("/api/v1/audit-log?action=EMPLOYEE_WALLET_CHANGED")
        .await;
    let entries = res.data().as_array().expect("list").clone();
    assert_eq!(entries.len(), 2, "{}", res.text);
    let mut seen: Vec<(String, String, String)> = entries
        .iter()
        .map(|e| {
            assert_eq!(e["resource_id"], ada_id.as_str());
            assert_eq!(e["api_key_id"], app.key_id.as_str());
            (
                e["details"]["via"].as_str().unwrap_or("").to_owned(),
                e["details"]["wallet_address"]["before"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                e["details"]["wallet_address"]["after"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("importEmployees".to_owned(), second.clone(), third.clone()),
            ("updateEmployee".to_owned(), first.clone(), second.clone()),
        ]
    );
}
