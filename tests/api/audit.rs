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
