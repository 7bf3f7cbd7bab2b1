//! The OpenAPI document describes every route the server serves.

use payroll::{http::route::Access, routes::ROUTES};
use serde_json::Value;

use crate::helpers::{TestApp, spawn_app};

/// The document the app serves.
async fn served(app: &TestApp) -> Value {
    let res = app
        .send("GET", "/api/v1/openapi.json", None, None, None, &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.json
}

#[actix_web::test]
async fn the_document_covers_every_served_route() {
    let app = spawn_app().await;
    let res = app
        .send("GET", "/api/v1/openapi.json", None, None, None, &[])
        .await;
    assert_eq!(res.status, 200);
    let doc = &res.json;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], "/api/v1");
    let paths = doc["paths"].as_object().expect("paths");

    let mut operation_ids = std::collections::HashSet::new();
    for spec in ROUTES {
        let method = spec.method.as_str().to_ascii_lowercase();
        let op = &paths
            .get(spec.path)
            .unwrap_or_else(|| panic!("{} missing", spec.path))[&method];
        assert_eq!(op["operationId"], spec.operation, "{spec:?}");
        assert!(operation_ids.insert(spec.operation));
        match spec.access {
            Access::Public => assert_eq!(op["security"], serde_json::json!([])),
            Access::AnyOf(_) => {
                assert_eq!(
                    op["x-required-scopes"],
                    serde_json::json!(spec.scope_names()),
                    "{spec:?}"
                );
            }
            Access::AnyKey => {
                assert_eq!(op["security"], serde_json::json!([{"bearer": []}]));
                assert_eq!(op["x-required-scopes"], serde_json::Value::Null);
            }
        }
        let has_idempotency = op["parameters"].as_array().is_some_and(|p| {
            p.iter()
                .any(|p| p["$ref"] == "#/components/parameters/IdempotencyKey")
        });
        assert_eq!(has_idempotency, spec.is_write(), "{spec:?}");
        assert!(
            op["responses"]
                .as_object()
                .is_some_and(|r| r.keys().any(|k| k.starts_with('2')))
        );
        if let Some(alias) = spec.alias() {
            let aliased = &paths
                .get(&alias)
                .unwrap_or_else(|| panic!("{alias} missing"))[&method];
            assert_eq!(aliased["x-alias-of"], spec.operation);
            let alias_id = format!("{}ViaRunsAlias", spec.operation);
            assert_eq!(aliased["operationId"], alias_id.as_str());
            assert_eq!(aliased["tags"], serde_json::json!(["aliases"]));
        }
        // A body the server reads must be an object it knows entirely (unknown fields: 400),
        // and a body that may be left out is not documented as JSON null.
        if let Some(body) = op.get("requestBody") {
            let schema = &body["content"]["application/json"]["schema"];
            assert!(schema.get("oneOf").is_none(), "{spec:?}: {schema}");
            let schema = if schema["type"] == "array" {
                &schema["items"]
            } else {
                schema
            };
            let name = schema["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .unwrap_or_else(|| panic!("{spec:?}: body is not a named schema"));
            assert_eq!(
                doc["components"]["schemas"][name]["additionalProperties"], false,
                "{name}"
            );
        }
    }
    // Nothing documented that is not served.
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            let served = ROUTES.iter().any(|s| {
                s.method.as_str().eq_ignore_ascii_case(method)
                    && (s.path == path || s.alias().as_deref() == Some(path.as_str()))
            });
            assert!(served, "{method} {path} documented but not served");
        }
    }
    // Every schema reference resolves.
    let text = res.text.clone();
    for piece in text.split("\"$ref\":\"").skip(1) {
        let reference = piece.split('"').next().expect("ref");
        let pointer = reference.trim_start_matches('#');
        assert!(
            doc.pointer(pointer).is_some_and(|v| !v.is_null()),
            "{reference} does not resolve"
        );
    }
    // Success bodies are enveloped.
    let create = &paths["/payroll-runs"]["post"]["responses"]["201"]["content"]["application/json"]
        ["schema"];
    assert_eq!(
        create["properties"]["data"]["$ref"],
        "#/components/schemas/RunResource"
    );
    let list: &Value =
        &paths["/employees"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(
        list["properties"]["pagination"]["$ref"],
        "#/components/schemas/Pagination"
    );
}

/// Every money input carries the limits the server enforces (CONTRACT §1).
#[actix_web::test]
async fn money_inputs_carry_their_limits_in_the_document() {
    let app = spawn_app().await;
    let doc = served(&app).await;
    let schemas = &doc["components"]["schemas"];
    for (schema, field, minimum) in [
        ("EmployeeInput", "salary_usd_cents", 0),
        ("EmployeeUpdate", "salary_usd_cents", 0),
        ("RunItem", "amount_usd_cents", 1),
        ("CreateTransferRequest", "amount_usd_cents", 1),
    ] {
        let property = &schemas[schema]["properties"][field];
        assert_eq!(
            property["maximum"], 100_000_000_000_i64,
            "{schema}.{field}: {property}"
        );
        assert_eq!(property["minimum"], minimum, "{schema}.{field}: {property}");
    }
}

/// The Idempotency-Key the document allows is exactly a UUID v4: what it allows the server
/// takes, and a UUID of another version, which the server refuses, does not match it.
#[actix_web::test]
async fn the_idempotency_key_pattern_is_the_servers() {
    let app = spawn_app().await;
    let doc = served(&app).await;
    let pattern = doc["components"]["parameters"]["IdempotencyKey"]["schema"]["pattern"]
        .as_str()
        .expect("a pattern");
    let pattern = regex::Regex::new(pattern).expect("a regular expression");
    let body = serde_json::json!({"name": "Ada", "email": "ada@example.com", "salary_usd_cents": 1,
        "network": "BASE", "wallet_address": crate::helpers::evm_address("ada@example.com")});
    for (key, allowed) in [
        (uuid::Uuid::new_v4().to_string(), true),
        (uuid::Uuid::new_v4().to_string().to_uppercase(), true),
        ("6ba7b810-9dad-11d1-80b4-00c04fd430c8".to_owned(), false), // version 1
        ("00000000-0000-4000-c000-000000000000".to_owned(), false), // another variant
        ("not-a-key".to_owned(), false),
    ] {
        assert_eq!(pattern.is_match(&key), allowed, "{key}");
        let res = app
            .send(
                "POST",
                "/api/v1/employees",
                Some(&app.key),
                Some(&key),
                Some(body.to_string().into_bytes()),
                &[],
            )
            .await;
        if allowed {
            assert!(
                res.status.is_success() || res.status == 409,
                "{key}: {}",
                res.text
            );
        } else {
            assert_eq!(res.status, 400, "{key}: {}", res.text);
            assert_eq!(res.code(), "INVALID_IDEMPOTENCY_KEY", "{key}");
        }
    }
}

/// Every `limit` and `offset` carries the bounds the server enforces: the document's edges are
/// taken, one past them is refused.
#[actix_web::test]
async fn paging_parameters_carry_the_servers_bounds() {
    let app = spawn_app().await;
    let doc = served(&app).await;
    let mut paged = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("operations") {
            for param in op["parameters"].as_array().into_iter().flatten() {
                match param["name"].as_str() {
                    Some("limit") if param["in"] == "query" => {
                        assert_eq!(param["schema"]["minimum"], 1, "{method} {path}");
                        assert_eq!(param["schema"]["maximum"], 200, "{method} {path}");
                        paged.push(path.clone());
                    }
                    Some("offset") if param["in"] == "query" => {
                        assert_eq!(param["schema"]["minimum"], 0, "{method} {path}");
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(paged.iter().any(|p| p == "/employees"), "{paged:?}");
    for (query, status) in [
        ("limit=1", 200),
        ("limit=200", 200),
        ("limit=0", 400),
        ("limit=201", 400),
        ("offset=0", 200),
        ("offset=-1", 400),
    ] {
        let res = app.get(&format!("/api/v1/employees?{query}")).await;
        assert_eq!(res.status, status, "{query}: {}", res.text);
    }
}

/// Enumerations are documented with the spellings the server sends and takes.
#[actix_web::test]
async fn enumerations_are_documented_in_their_wire_spelling() {
    use payroll_entities::{
        ActorType, ApiKeyStatus, EmployeeStatus, EmploymentType, Network, PayoutStatus, RunStatus,
        RunType,
    };
    fn wire<T: Copy + std::fmt::Display>(all: &[T]) -> Vec<String> {
        all.iter().map(|v| v.to_string()).collect()
    }
    let app = spawn_app().await;
    let doc = served(&app).await;
    let schemas = &doc["components"]["schemas"];
    for (name, spellings) in [
        ("ApiKeyStatus", wire(ApiKeyStatus::ALL)),
        ("ActorType", wire(ActorType::ALL)),
        ("EmployeeStatus", wire(EmployeeStatus::ALL)),
        ("EmploymentType", wire(EmploymentType::ALL)),
        ("Network", wire(Network::ALL)),
        ("PayoutStatus", wire(PayoutStatus::ALL)),
        ("RunStatus", wire(RunStatus::ALL)),
        ("RunType", wire(RunType::ALL)),
    ] {
        let documented: Vec<String> = schemas[name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} has no enum"))
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect();
        assert_eq!(documented, spellings, "{name}");
    }
    assert_eq!(schemas["ApiKeyStatus"]["enum"][0], "ACTIVE");
}

/// The closed sets and date forms of query parameters are the server's: every documented value
/// is taken, and a value outside them (an empty one included) is refused.
#[actix_web::test]
async fn query_value_sets_and_dates_are_the_servers() {
    let app = spawn_app().await;
    let doc = &served(&app).await;
    let param = |path: &str, name: &str| -> Value {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .unwrap_or_else(|| panic!("{path} {name}"))["schema"]
            .clone()
    };
    let sorts = param("/payroll-runs", "sort");
    for sort in sorts["enum"].as_array().expect("sort enum") {
        let sort = sort.as_str().expect("text");
        let res = app.get(&format!("/api/v1/payroll-runs?sort={sort}")).await;
        assert_eq!(res.status, 200, "{sort}: {}", res.text);
    }
    let kinds = param("/events", "type");
    for kind in kinds["enum"].as_array().expect("type enum") {
        let kind = kind.as_str().expect("text");
        let res = app.get(&format!("/api/v1/events?type={kind}")).await;
        assert_eq!(res.status, 200, "{kind}: {}", res.text);
    }
    assert!(param("/webhooks", "status")["$ref"].is_string());
    let dates = param("/payroll-runs", "created_after");
    let local = dates["anyOf"][2]["pattern"]
        .as_str()
        .expect("local pattern");
    let local = regex::Regex::new(local).expect("regex");
    for (value, documented, status) in [
        ("2026-03-01T00:00:00Z", true, 200),
        ("2026-03-01", true, 200),
        ("2026-03-01T10:30", true, 200),
        ("2026-03-01T10:30:15.5", true, 200),
        ("", false, 400),
        ("yesterday", false, 400),
    ] {
        let path = format!("/api/v1/payroll-runs?created_after={value}");
        assert_eq!(app.get(&path).await.status, status, "{value}");
        if value.contains('T') && !value.ends_with('Z') {
            assert_eq!(local.is_match(value), documented, "{value}");
        }
    }
    for (path, bad) in [
        ("/api/v1/payroll-runs?sort=", "sort"),
        ("/api/v1/payroll-runs?sort=name", "sort"),
        ("/api/v1/events?type=", "type"),
        ("/api/v1/webhooks?status=", "status"),
    ] {
        let res = app.get(path).await;
        assert_eq!(res.status, 400, "{path}");
        assert_eq!(res.invalid_fields(), vec![bad.to_owned()], "{path}");
    }
}

/// An empty body counts as `{}`: where `{}` is valid the document lets the body be left out,
/// and the server takes a request without one.
#[actix_web::test]
async fn bodies_that_require_no_field_may_be_left_out() {
    let app = spawn_app().await;
    let doc = served(&app).await;
    let update = &doc["paths"]["/employees/{employee_id}"]["patch"]["requestBody"];
    assert_eq!(update["required"], false, "{update}");
    let create = &doc["paths"]["/employees"]["post"]["requestBody"];
    assert_eq!(create["required"], true, "{create}");
    let employee = app.create_employee("Ada", "ada@example.com", 100).await;
    let id = employee["id"].as_str().expect("id");
    let res = app
        .bodiless("PATCH", &format!("/api/v1/employees/{id}"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["name"], "Ada");
}
