//! The request pipeline: routes, request ids, versions, media types, sizes, malformed input.

use serde_json::json;

use crate::helpers::{new_key, spawn_app, spawn_app_with};

#[actix_web::test]
async fn health_and_readiness_answer_without_auth() {
    let app = spawn_app().await;
    let res = app.send("GET", "/healthz", None, None, None, &[]).await;
    assert_eq!(res.status, 200);
    let res = app.send("GET", "/readyz", None, None, None, &[]).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.json["database"], "ok");
}

#[actix_web::test]
async fn unknown_routes_and_methods_answer_json_errors() {
    let app = spawn_app().await;
    let res = app.get("/api/v1/nothing-here").await;
    assert_eq!(res.status, 404);
    assert_eq!(res.code(), "ROUTE_NOT_FOUND");
    assert_eq!(res.json["error"]["details"]["path"], "/api/v1/nothing-here");
    assert!(
        res.json["error"]["recovery_hint"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );

    // Outside the API too, and before authentication.
    let res = app.send("GET", "/nope", None, None, None, &[]).await;
    assert_eq!(res.status, 404);
    assert_eq!(res.code(), "ROUTE_NOT_FOUND");
    let res = app.send("GET", "/api/v1/nope", None, None, None, &[]).await;
    assert_eq!(res.code(), "ROUTE_NOT_FOUND");

    let res = app
        .send("PUT", "/api/v1/employees", Some(&app.key), None, None, &[])
        .await;
    assert_eq!(res.status, 405);
    assert_eq!(res.code(), "METHOD_NOT_ALLOWED");
    assert_eq!(
        res.json["error"]["details"]["allowed_methods"],
        json!(["GET", "POST"])
    );
    assert_eq!(res.header("allow"), Some("GET, POST"));
}

#[actix_web::test]
async fn request_ids_are_generated_or_adopted() {
    let app = spawn_app().await;
    let res = app.get("/api/v1/employees").await;
    let id = res.header("x-request-id").expect("request id").to_owned();
    assert!(id.starts_with("req_"));
    assert_eq!(res.json["request_id"], id.as_str());
    assert_eq!(res.json["api_version"], "2026-03-01");
    assert_eq!(res.header("api-version"), Some("2026-03-01"));

    let res = app
        .send(
            "GET",
            "/api/v1/employees",
            Some(&app.key),
            None,
            None,
            &[("X-Request-Id", "client-trace_42")],
        )
        .await;
    assert_eq!(res.header("x-request-id"), Some("client-trace_42"));
    assert_eq!(res.json["request_id"], "client-trace_42");

    // Not adoptable: generated instead, also on errors.
    let res = app
        .send(
            "GET",
            "/api/v1/nope",
            None,
            None,
            None,
            &[("X-Request-Id", "bad id with spaces")],
        )
        .await;
    let id = res.header("x-request-id").expect("request id");
    assert!(id.starts_with("req_"));
    assert_eq!(res.json["request_id"], id);
}

#[actix_web::test]
async fn unsupported_api_versions_are_refused() {
    let app = spawn_app().await;
    let res = app
        .send(
            "GET",
            "/api/v1/employees",
            Some(&app.key),
            None,
            None,
            &[("Api-Version", "2020-01-01")],
        )
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.code(), "UNSUPPORTED_API_VERSION");
    let res = app
        .send(
            "GET",
            "/api/v1/employees",
            Some(&app.key),
            None,
            None,
            &[("Api-Version", "2026-03-01")],
        )
        .await;
    assert_eq!(res.status, 200);
}

#[actix_web::test]
async fn malformed_and_mistyped_bodies_are_400_listing_fields() {
    let app = &spawn_app().await;
    let send = |body: &'static [u8]| async move {
        let idem = new_key();
        app.send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&idem),
            Some(body.to_vec()),
            &[],
        )
        .await
    };
    let res = send(b"{not json").await;
    assert_eq!(res.status, 400);
    assert_eq!(res.code(), "INVALID_REQUEST_BODY");
    assert!(
        res.json["error"]["details"]["validation_errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("malformed JSON"))
    );

    let res = send(b"[1,2]").await;
    assert_eq!(res.code(), "INVALID_REQUEST_BODY");

    let res =
        send(br#"{"name": 5, "salary_usd_cents": "lots", "network": "MARS", "nickname": "x"}"#)
            .await;
    assert_eq!(res.status, 400);
    let fields = res.invalid_fields();
    for f in ["name", "salary_usd_cents", "network", "nickname"] {
        assert!(fields.contains(&f.to_owned()), "{f} not in {fields:?}");
    }

    let res = send(br#"{"name":"A","email":"a@x.io","salary_usd_cents":1.5,"network":"BASE","wallet_address":"0x0000000000000000000000000000000000000001"}"#).await;
    assert_eq!(res.invalid_fields(), vec!["salary_usd_cents"]);

    let res = send(br#"{"name":"A","email":"a@x.io","salary_usd_cents":99999999999999999999,"network":"BASE","wallet_address":"0x0000000000000000000000000000000000000001"}"#).await;
    assert_eq!(res.invalid_fields(), vec!["salary_usd_cents"]);

    // Nothing was written by any of them.
    let res = app.get("/api/v1/employees").await;
    assert_eq!(res.json["pagination"]["total"], 0);
}

#[actix_web::test]
async fn oversized_bodies_are_413_and_other_media_types_415() {
    let app = spawn_app_with(|s| s.api.max_body_bytes = 2048).await;
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(4096));
    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&new_key()),
            Some(big.into_bytes()),
            &[],
        )
        .await;
    assert_eq!(res.status, 413);
    assert_eq!(res.code(), "PAYLOAD_TOO_LARGE");
    assert_eq!(res.json["error"]["details"]["limit_bytes"], 2048);

    let res = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&new_key()),
            Some(b"name=x".to_vec()),
            &[("Content-Type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!(res.status, 415);
    assert_eq!(res.code(), "UNSUPPORTED_MEDIA_TYPE");
}

#[actix_web::test]
async fn bad_ids_are_not_found_and_bad_queries_are_400() {
    let app = spawn_app().await;
    for path in [
        "/api/v1/employees/emp_nope",
        "/api/v1/employees/run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "/api/v1/employees/emp_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "/api/v1/payroll-runs/%F0%9F%92%B8",
        "/api/v1/runs/run_01ARZ3NDEKTSV4RRFFQ69G5FAV/payouts",
        "/api/v1/api-keys/key_x",
    ] {
        let res = app.get(path).await;
        assert_eq!(res.status, 404, "{path}: {}", res.text);
        assert_eq!(res.code(), "RESOURCE_NOT_FOUND", "{path}");
    }
    for query in [
        "limit=0",
        "limit=201",
        "limit=abc",
        "offset=-1",
        "status=SLEEPING",
        "bogus=1",
    ] {
        let res = app.get(&format!("/api/v1/employees?{query}")).await;
        assert_eq!(res.status, 400, "{query}");
        assert_eq!(res.code(), "INVALID_QUERY_PARAMETER", "{query}");
        assert!(!res.invalid_fields().is_empty());
    }
    let res = app
        .get("/api/v1/payroll-runs?created_after=yesterday")
        .await;
    assert_eq!(res.invalid_fields(), vec!["created_after"]);
}

#[actix_web::test]
async fn docs_page_lists_every_error_code() {
    let app = spawn_app().await;
    let res = app.send("GET", "/api/v1/docs", None, None, None, &[]).await;
    assert_eq!(res.status, 200);
    for code in payroll::http::error::ErrorCode::ALL {
        assert!(
            res.text.contains(&format!("id=\"{}\"", code.as_str())),
            "{}",
            code.as_str()
        );
    }
}

#[actix_web::test]
async fn hostile_bodies_are_refused_cleanly() {
    let app = spawn_app().await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let invalid_utf8 = vec![b'{', b'"', b'n', 0xff, 0xfe, b'"', b':', b'1', b'}'];
    let nul = b"{\"name\": \"a\x00b\"}".to_vec();
    for body in [
        deep.into_bytes(),
        invalid_utf8,
        nul,
        b"null".to_vec(),
        b"\"text\"".to_vec(),
    ] {
        let res = app
            .send(
                "POST",
                "/api/v1/employees",
                Some(&app.key),
                Some(&new_key()),
                Some(body),
                &[],
            )
            .await;
        assert_eq!(res.status, 400, "{}", res.text);
        assert_eq!(res.code(), "INVALID_REQUEST_BODY");
    }
    // A CSV import over the import limit is 413 like any other body.
    let app = spawn_app_with(|s| {
        s.api.max_body_bytes = 1024;
        s.api.max_import_bytes = 4096;
    })
    .await;
    let csv = "name,email\n".to_owned() + &"a,b@c.de\n".repeat(1000);
    let res = app.import_csv(csv).await;
    assert_eq!(res.status, 413);
    assert_eq!(res.json["error"]["details"]["limit_bytes"], 4096);
    assert_eq!(
        app.get("/api/v1/employees").await.json["pagination"]["total"],
        0
    );
}
