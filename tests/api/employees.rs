//! Employees: validation, uniqueness, updates, deactivation, listing and import.

use serde_json::{Value, json};

use crate::helpers::{evm_address, new_key, spawn_app, spawn_app_with};

const CHECKSUMMED: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const SOLANA: &str = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T";

#[actix_web::test]
async fn create_validates_every_field_at_once() {
    let app = spawn_app().await;
    let res = app.post("/api/v1/employees", json!({})).await;
    assert_eq!(res.status, 400);
    assert_eq!(
        res.invalid_fields(),
        vec!["name", "email", "salary_usd_cents", "network"]
    );

    let res = app
        .post(
            "/api/v1/employees",
            json!({"name": "A", "email": "not-an-email", "salary_usd_cents": -5, "network": "BASE",
                   "wallet_address": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD",
                   "contract_start_date": "2026-05-01", "contract_end_date": "2026-04-01"}),
        )
        .await;
    assert_eq!(
        res.invalid_fields(),
        vec![
            "email",
            "salary_usd_cents",
            "wallet_address",
            "contract_end_date"
        ]
    );
    assert!(res.text.contains("EIP-55"));
    assert!(res.json["error"]["recovery_hint"].as_str().is_some());
}

#[actix_web::test]
async fn wallets_are_checked_per_network() {
    let app = spawn_app().await;
    let ok = |email: &str, network: &str, wallet: &str| json!({"name": "N", "email": email, "salary_usd_cents": 1, "network": network, "wallet_address": wallet});
    assert_eq!(
        app.post("/api/v1/employees", ok("a@x.io", "ETHEREUM", CHECKSUMMED))
            .await
            .status,
        201
    );
    assert_eq!(
        app.post("/api/v1/employees", ok("b@x.io", "SOLANA", SOLANA))
            .await
            .status,
        201
    );
    let res = app
        .post("/api/v1/employees", ok("c@x.io", "SOLANA", CHECKSUMMED))
        .await;
    assert_eq!(res.invalid_fields(), vec!["wallet_address"]);
    let res = app
        .post("/api/v1/employees", ok("d@x.io", "POLYGON", SOLANA))
        .await;
    assert_eq!(res.invalid_fields(), vec!["wallet_address"]);
}

#[actix_web::test]
async fn emails_are_unique_case_insensitively() {
    let app = spawn_app().await;
    let first = app.create_employee("Ada", "Ada@Example.com", 100).await;
    let res = app
        .post(
            "/api/v1/employees",
            json!({"name": "Other", "email": "ada@example.COM", "salary_usd_cents": 1, "network": "BASE", "wallet_address": CHECKSUMMED}),
        )
        .await;
    assert_eq!(res.status, 409);
    assert_eq!(res.code(), "EMPLOYEE_EMAIL_TAKEN");
    assert_eq!(
        res.json["error"]["details"]["existing_employee_id"],
        first["id"]
    );
}

#[actix_web::test]
async fn patch_changes_fields_but_never_the_email() {
    let app = spawn_app().await;
    let e = app.create_employee("Ada", "ada@example.com", 100).await;
    let path = format!("/api/v1/employees/{}", e["id"].as_str().expect("id"));
    let res = app
        .write_as(&app.key, "PATCH", &path, json!({"salary_usd_cents": 250, "network": "SOLANA", "wallet_address": SOLANA, "contract_end_date": "2027-01-31"}))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["salary_usd_cents"], 250);
    assert_eq!(res.data()["network"], "SOLANA");
    assert_eq!(res.data()["contract_end_date"], "2027-01-31");
    assert_eq!(res.data()["email"], "ada@example.com");

    // Clearing a nullable field with null.
    let res = app
        .write_as(&app.key, "PATCH", &path, json!({"contract_end_date": null}))
        .await;
    assert!(res.data()["contract_end_date"].is_null());

    // Changing the network alone re-checks the stored address against it.
    let res = app
        .write_as(&app.key, "PATCH", &path, json!({"network": "BASE"}))
        .await;
    assert_eq!(res.invalid_fields(), vec!["wallet_address"]);

    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &path,
            json!({"email": "new@example.com", "salary_usd_cents": "x"}),
        )
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.invalid_fields(), vec!["email", "salary_usd_cents"]);

    let res = app.get(&path).await;
    assert_eq!(res.data()["salary_usd_cents"], 250);

    let audit = app.get("/api/v1/audit-log?action=EMPLOYEE_UPDATED").await;
    let first = &audit.data()[1];
    assert_eq!(
        first["details"]["salary_usd_cents"],
        json!({"before": 100, "after": 250})
    );
}

#[actix_web::test]
async fn delete_deactivates() {
    let app = spawn_app().await;
    let e = app.create_employee("Ada", "ada@example.com", 100).await;
    let path = format!("/api/v1/employees/{}", e["id"].as_str().expect("id"));
    let res = app
        .send("DELETE", &path, Some(&app.key), Some(&new_key()), None, &[])
        .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.data()["status"], "INACTIVE");
    assert_eq!(app.get(&path).await.data()["status"], "INACTIVE");
}

#[actix_web::test]
async fn list_filters_searches_and_pages() {
    let app = spawn_app().await;
    app.create_employee("Ada Lovelace", "ada@example.com", 100)
        .await;
    app.create_employee("Grace Hopper", "grace@navy.mil", 100)
        .await;
    let alan = app
        .create_employee("Alan Turing", "alan@example.com", 100)
        .await;
    let path = format!("/api/v1/employees/{}", alan["id"].as_str().expect("id"));
    app.write_as(
        &app.key,
        "PATCH",
        &path,
        json!({"employment_type": "CONTRACTOR"}),
    )
    .await;

    let res = app.get("/api/v1/employees?search=HOPPER").await;
    assert_eq!(res.json["pagination"]["total"], 1);
    let res = app.get("/api/v1/employees?search=example.com").await;
    assert_eq!(res.json["pagination"]["total"], 2);
    let res = app
        .get("/api/v1/employees?employment_type=CONTRACTOR")
        .await;
    assert_eq!(res.data()[0]["name"], "Alan Turing");
    let res = app.get("/api/v1/employees?search=100%25").await;
    assert_eq!(res.json["pagination"]["total"], 0);
    // LIKE wildcards in a search match themselves.
    app.create_employee("snake_case", "snake@example.org", 1)
        .await;
    app.create_employee("snakeXcase", "camel@example.org", 1)
        .await;
    let res = app.get("/api/v1/employees?search=e_c").await;
    assert_eq!(res.json["pagination"]["total"], 1, "{}", res.text);
    assert_eq!(res.data()[0]["name"], "snake_case");

    let res = app.get("/api/v1/employees?limit=2").await;
    assert_eq!(res.data().as_array().map(Vec::len), Some(2));
    assert_eq!(
        res.json["pagination"],
        json!({"total": 5, "limit": 2, "offset": 0, "has_more": true})
    );
    // Newest first.
    assert_eq!(res.data()[0]["name"], "snakeXcase");
    let res = app.get("/api/v1/employees?limit=2&offset=4").await;
    assert_eq!(res.json["pagination"]["has_more"], false);
    assert_eq!(res.data()[0]["name"], "Ada Lovelace");
}

fn row(i: usize) -> Value {
    let email = format!("person{i}@example.com");
    json!({"name": format!("Person {i}"), "wallet_address": evm_address(&email), "email": email,
           "salary_usd_cents": 100_000 + i as i64, "network": "POLYGON"})
}

#[actix_web::test]
async fn import_of_ten_thousand_rows_in_one_call() {
    let app = spawn_app().await;
    let rows: Vec<Value> = (0..10_000).map(row).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 200, "{}", &res.text[..res.text.len().min(500)]);
    assert_eq!(
        res.data(),
        &json!({"created": 10_000, "updated": 0, "total": 10_000})
    );
    let list = app.get("/api/v1/employees?limit=1").await;
    assert_eq!(list.json["pagination"]["total"], 10_000);
}

#[actix_web::test]
async fn an_import_over_the_row_cap_is_refused_whole() {
    let app = spawn_app_with(|s| s.api.max_import_rows = 3).await;
    let rows: Vec<Value> = (0..4).map(row).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 413, "{}", res.text);
    assert_eq!(res.code(), "PAYLOAD_TOO_LARGE");
    assert_eq!(res.json["error"]["details"]["limit_rows"], 3);
    assert!(
        res.json["error"]["message"]
            .as_str()
            .expect("message")
            .contains("split")
    );
    let mut csv = "name,email,salary_usd_cents,network,wallet_address\n".to_owned();
    for i in 0..4 {
        let email = format!("person{i}@example.com");
        csv += &format!("P{i},{email},100,POLYGON,{}\n", evm_address(&email));
    }
    let res = app.import_csv(csv).await;
    assert_eq!(res.status, 413, "{}", res.text);
    assert_eq!(res.json["error"]["details"]["limit_rows"], 3);
    assert_eq!(
        app.get("/api/v1/employees").await.json["pagination"]["total"],
        0
    );
    // At the cap it is taken; a body that is not an array still says so.
    let rows: Vec<Value> = (0..3).map(row).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 200, "{}", res.text);
    let res = app
        .post("/api/v1/employees/import", json!({"name": "x"}))
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    let res = app
        .send(
            "POST",
            "/api/v1/employees/import",
            Some(&app.key),
            Some(&new_key()),
            Some(b"[{\"name\": 1},".to_vec()),
            &[],
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert!(res.text.contains("malformed JSON"), "{}", res.text);
}

#[actix_web::test]
async fn rows_are_checked_as_they_are_read_and_the_row_cap_comes_first() {
    let app = spawn_app_with(|s| s.api.max_import_rows = 1500).await;
    let bad = |i: usize| json!({"name": format!("P{i}"), "email": "not-an-email", "salary_usd_cents": -1});
    // 1,200 bad rows within the cap: the first 1,000 errors listed, in row order, and a note.
    let rows: Vec<Value> = (0..1200).map(bad).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 400, "{}", &res.text[..res.text.len().min(500)]);
    let errors = res.json["error"]["details"]["validation_errors"]
        .as_array()
        .expect("errors");
    // A row's errors are listed together: the list ends within one row past 1,000.
    assert!((1001..1010).contains(&errors.len()), "{}", errors.len());
    assert_eq!(errors[0]["field"], "rows[0].email");
    let last = errors.last().expect("note");
    assert!(
        last["message"]
            .as_str()
            .expect("message")
            .contains("first 1000")
    );
    assert!(
        !res.text.contains("rows[1199]"),
        "rows after the list are not checked"
    );
    // 2,000 bad rows over a cap of 1,500: rows past the full error list are still counted,
    // so the import is refused as too large (413 before 400), JSON and CSV alike.
    let rows: Vec<Value> = (0..2000).map(bad).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 413, "{}", &res.text[..res.text.len().min(500)]);
    assert_eq!(res.json["error"]["details"]["limit_rows"], 1500);
    let mut csv = "name,email,salary_usd_cents,network,wallet_address\n".to_owned();
    for i in 0..2000 {
        csv += &format!("P{i},not-an-email,-1,BASE,0x1\n");
    }
    let res = app.import_csv(csv).await;
    assert_eq!(res.status, 413, "{}", &res.text[..res.text.len().min(500)]);
    // A row that is not an object, between good ones, is named by its index.
    let rows = json!([row(0), 7, row(2)]);
    let res = app.post("/api/v1/employees/import", rows).await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(
        res.json["error"]["details"]["validation_errors"][0]["field"],
        "rows[1]"
    );
    assert_eq!(
        app.get("/api/v1/employees").await.json["pagination"]["total"],
        0
    );
}

#[actix_web::test]
async fn import_is_all_or_nothing_and_upserts_by_email() {
    let app = spawn_app().await;
    let mut rows: Vec<Value> = (0..5).map(row).collect();
    rows[3]["wallet_address"] = json!("0x123");
    rows[4]["email"] = json!("PERSON0@example.com");
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.status, 400);
    assert_eq!(
        res.invalid_fields(),
        vec!["rows[3].wallet_address", "rows[4].email"]
    );
    assert_eq!(
        app.get("/api/v1/employees").await.json["pagination"]["total"],
        0
    );

    let existing = app
        .create_employee("Old Name", "person1@example.com", 1)
        .await;
    app.write_as(
        &app.key,
        "PATCH",
        &format!("/api/v1/employees/{}", existing["id"].as_str().expect("id")),
        json!({"employment_type": "CONSULTANT"}),
    )
    .await;
    let rows: Vec<Value> = (0..3).map(row).collect();
    let res = app.post("/api/v1/employees/import", json!(rows)).await;
    assert_eq!(res.data(), &json!({"created": 2, "updated": 1, "total": 3}));
    let updated = app
        .get(&format!(
            "/api/v1/employees/{}",
            existing["id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(updated.data()["name"], "Person 1");
    assert_eq!(updated.data()["salary_usd_cents"], 100_001);
    // Fields the rows leave out keep their value.
    assert_eq!(updated.data()["employment_type"], "CONSULTANT");
}

#[actix_web::test]
async fn import_reads_csv_with_a_header_row() {
    let app = spawn_app().await;
    let csv = format!(
        "name,email,salary_usd_cents,network,wallet_address,employment_type\n\
         Ada,ada@example.com,500000,BASE,{},CONTRACTOR\n\
         \"Hopper, Grace\",grace@example.com,400000,SOLANA,{SOLANA},\n",
        CHECKSUMMED
    );
    let res = app.import_csv(csv).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["created"], 2);
    let res = app.get("/api/v1/employees?search=hopper").await;
    assert_eq!(res.data()[0]["name"], "Hopper, Grace");
    assert_eq!(res.data()[0]["employment_type"], "FTE");

    let bad = "name,email,salary_usd_cents,network,wallet_address\nX,x@example.com,lots,BASE,0x1\n";
    let res = app.import_csv(bad).await;
    assert_eq!(res.status, 400);
    assert_eq!(
        res.invalid_fields(),
        vec!["rows[0].salary_usd_cents", "rows[0].wallet_address"]
    );
}
