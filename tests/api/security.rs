//! Security properties that a browser or a second process would try: the HTML pages' headers,
//! no CORS, and one server per SQLite file.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use crate::{
    helpers::spawn_app,
    process::{Setup, free_port, output},
};

#[actix_web::test]
async fn html_pages_send_the_browser_security_headers_and_the_api_no_cors() {
    let app = spawn_app().await;
    for path in ["/status", "/api/v1/docs"] {
        let res = app.get(path).await;
        assert_eq!(res.status, 200, "{path}: {}", res.text);
        let csp = res.header("content-security-policy").unwrap_or("");
        for directive in [
            "default-src 'none'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(
            !csp.contains("script-src"),
            "{path}: no script may run: {csp}"
        );
        assert_eq!(res.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(res.header("referrer-policy"), Some("no-referrer"));
        assert_eq!(res.header("x-frame-options"), Some("DENY"));
    }
    // JSON answers are never sniffed as something else, and no origin is allowed to read
    // them from a browser.
    let res = app
        .send(
            "GET",
            "/api/v1/payroll-runs",
            Some(&app.key),
            None,
            None,
            &[("Origin", "https://evil.example")],
        )
        .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(res.header("access-control-allow-origin"), None);
    let preflight = app
        .send(
            "OPTIONS",
            "/api/v1/payroll-runs",
            None,
            None,
            None,
            &[
                ("Origin", "https://evil.example"),
                ("Access-Control-Request-Method", "POST"),
            ],
        )
        .await;
    assert_eq!(preflight.header("access-control-allow-origin"), None);
}

#[actix_web::test]
async fn a_second_server_on_one_sqlite_file_refuses_to_start() {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_ok() {
        eprintln!("the SQLite lock is a SQLite matter: this test runs in the SQLite suite");
        return;
    }
    let setup = Setup::new().await;
    let first = setup.start(1).await;
    // The same data folder (so the same payroll.db), another port.
    let mut second = Command::new(env!("CARGO_BIN_EXE_payroll"));
    second
        .arg("serve")
        .env("PAYROLL__SERVER__PORT", free_port().to_string())
        .env("PAYROLL__DATA__DIR", setup.dir.path())
        .env("PAYROLL__DATABASE__URL", &setup.database_url)
        .env("PAYROLL__AUTH__BOOTSTRAP_KEY", "false")
        .stdin(Stdio::null());
    let out = actix_web::rt::time::timeout(Duration::from_secs(30), output(second))
        .await
        .expect("the second server stops by itself");
    assert!(!out.status.success(), "the second server started");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("another `payroll serve` is running on the SQLite database"),
        "{stderr}"
    );
    // The first one goes on serving; once it is gone, the file is free again.
    let runs = setup.call(&first, "GET", "/payroll-runs", None).await;
    assert!(runs["data"].is_array());
    let mut first = first;
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reaped");
    let again = setup.start(2).await;
    setup.call(&again, "GET", "/payroll-runs", None).await;
}

/// Every table a refused request could have changed, counted.
async fn table_counts(db: &payroll_entities::db::Db) -> Vec<(&'static str, i64)> {
    use sea_orm::{ConnectionTrait, Statement};
    let mut counts = Vec::new();
    for table in [
        "employees",
        "payroll_runs",
        "payouts",
        "jobs",
        "api_keys",
        "webhook_endpoints",
        "webhook_deliveries",
        "treasury_transfers",
        "idempotency_records",
        "events",
        "email_outbox",
        "exchange_holds",
    ] {
        let row = db
            .conn
            .query_one_raw(Statement::from_string(
                db.backend(),
                format!("SELECT COUNT(*) AS n FROM {table}"),
            ))
            .await
            .expect("count")
            .expect("row");
        counts.push((table, row.try_get::<i64>("", "n").expect("n")));
    }
    counts
}

/// Every guarded operation of the route table, called with every kind of key that must be
/// refused: 401 or 403 with the contract's code, nothing changed, and an audit entry for each.
#[actix_web::test]
async fn every_route_refuses_every_unusable_key_and_changes_nothing() {
    use payroll::{http::route::Access, routes::ROUTES};
    // Every refusal is recorded here: the per-peer limit on refusals without a usable key
    // (audit.unauthenticated_per_second) is proven in tests/api/audit.rs.
    let app = crate::helpers::spawn_app_with(|s| {
        s.auth.rotation_grace_seconds = 0;
        s.audit.unauthenticated_per_second = 1_000_000;
    })
    .await;
    // Something to find behind every path parameter, so a refusal is not a 404 in disguise.
    let employee = app
        .create_employee("Guarded", "guarded@example.com", 1_000)
        .await;
    let employee_id = employee["id"].as_str().expect("id").to_owned();
    let run_id = app
        .create_run(serde_json::json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let payouts = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let payout_id = payouts.data()[0]["id"].as_str().expect("payout").to_owned();

    // The keys: revoked, expired, rotated past its grace (0 s), and one lacking every scope
    // a guarded route asks for but its own family.
    let (revoked, revoked_id) = app.key_with(&["payroll:read"]).await;
    let res = app
        .bodiless("DELETE", &format!("/api/v1/api-keys/{revoked_id}"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let expires = chrono::Utc::now() + chrono::Duration::milliseconds(600);
    let res = app
        .post(
            "/api/v1/api-keys",
            serde_json::json!({"name": "short", "scopes": ["payroll:read"], "expires_at": expires.to_rfc3339()}),
        )
        .await;
    let expired = res.data()["key"].as_str().expect("plaintext").to_owned();
    let (rotated, rotated_id) = app.key_with(&["payroll:read"]).await;
    let res = app
        .post(
            &format!("/api/v1/api-keys/{rotated_id}/rotate"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    let (webhooks_only, _) = app.key_with(&["webhooks:manage"]).await;
    let (audit_only, _) = app.key_with(&["audit:read"]).await;
    actix_web::rt::time::sleep(Duration::from_millis(800)).await;

    let db = app.db().await;
    let before = table_counts(&db).await;
    let audited_before = audit_refusals(&db).await;
    let unknown = "mpk_live_0123456789abcdefghij0123456789abcdefgh".to_owned();
    let mut sent = 0;
    for spec in ROUTES {
        if spec.access == Access::Public {
            continue;
        }
        let path = format!(
            "/api/v1{}",
            spec.path
                .replace("{run_id}", &run_id)
                .replace("{payout_id}", &payout_id)
                .replace("{employee_id}", &employee_id)
                .replace("{job_id}", "job_01ARZ3NDEKTSV4RRFFQ69G5FAV")
                .replace("{key_id}", &rotated_id)
                .replace("{webhook_id}", "wh_01ARZ3NDEKTSV4RRFFQ69G5FAV")
                .replace("{delivery_id}", "whd_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        );
        let lacking = if spec.path.starts_with("/webhooks") {
            &audit_only
        } else {
            &webhooks_only
        };
        let mut cases: Vec<(Option<&str>, Option<&str>, u16, &str)> = vec![
            (None, None, 401, "INVALID_API_KEY"),
            (None, Some("Bearer nope"), 401, "INVALID_API_KEY"),
            (Some(&unknown), None, 401, "INVALID_API_KEY"),
            (Some(&revoked), None, 401, "INVALID_API_KEY"),
            (Some(&expired), None, 401, "API_KEY_EXPIRED"),
            (Some(&rotated), None, 401, "API_KEY_EXPIRED"),
        ];
        if spec.access != Access::AnyKey {
            cases.push((Some(lacking), None, 403, "INSUFFICIENT_SCOPE"));
        }
        for (key, header, status, code) in cases {
            let idem = crate::helpers::new_key();
            let headers: Vec<(&str, &str)> =
                header.map(|h| ("Authorization", h)).into_iter().collect();
            let res = app
                .send(
                    spec.method.as_str(),
                    &path,
                    key,
                    spec.is_write().then_some(idem.as_str()),
                    spec.is_write().then(|| b"{}".to_vec()),
                    &headers,
                )
                .await;
            assert_eq!(res.status, status, "{spec:?} with {code}: {}", res.text);
            assert_eq!(res.code(), code, "{spec:?}");
            sent += 1;
        }
    }
    assert_eq!(
        table_counts(&db).await,
        before,
        "a refused request changed something"
    );
    // Refusals are audited in batches (audit.flush_interval_ms): wait for them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let audited = audit_refusals(&db).await - audited_before;
        if audited == sent {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{audited} refusals audited of {sent}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn audit_refusals(db: &payroll_entities::db::Db) -> i64 {
    use sea_orm::{ConnectionTrait, Statement};
    db.conn
        .query_one_raw(Statement::from_string(
            db.backend(),
            "SELECT COUNT(*) AS n FROM audit_entries WHERE status_code IN (401, 403)",
        ))
        .await
        .expect("count")
        .and_then(|r| r.try_get::<i64>("", "n").ok())
        .unwrap_or(0)
}

/// No SQL is built by formatting text into it: every value reaches the database as a bound
/// parameter (SeaORM's query builder or `Statement::from_sql_and_values`). This reads the
/// sources and fails on a `format!` whose text is SQL.
#[test]
fn no_sql_is_built_by_string_formatting() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = ["src", "actors/src", "entities/src", "migration/src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("source");
            let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for (at, _) in flat.match_indices("format!(") {
                let literal = flat[at + "format!(".len()..]
                    .trim_start()
                    .trim_start_matches(['r', '#', '"'])
                    .to_ascii_uppercase();
                if ["SELECT ", "UPDATE ", "INSERT ", "DELETE ", "WITH "]
                    .iter()
                    .any(|kw| literal.starts_with(kw))
                {
                    offenders.push(format!(
                        "{}: {}",
                        path.display(),
                        &flat[at..(at + 80).min(flat.len())]
                    ));
                }
            }
        }
    }
    assert!(files > 50, "the sources were read ({files} files)");
    assert!(
        offenders.is_empty(),
        "SQL built by formatting: {offenders:#?}"
    );
}

/// An `Idempotency-Key` belongs to the key lineage that used it: another client sending the
/// same one gets its own operation, never the first client's stored answer.
#[actix_web::test]
async fn idempotency_keys_are_scoped_to_their_key_lineage() {
    let app = spawn_app().await;
    let (a, _) = app.key_with(&["employees:write", "employees:read"]).await;
    let (b, _) = app.key_with(&["employees:write", "employees:read"]).await;
    let shared = crate::helpers::new_key();
    let body = |email: &str| {
        serde_json::to_vec(&serde_json::json!({
            "name": "Idem", "email": email, "salary_usd_cents": 1_000, "network": "BASE",
            "wallet_address": crate::helpers::evm_address(email),
        }))
        .expect("json")
    };
    let first = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&a),
            Some(&shared),
            Some(body("a@example.com")),
            &[],
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    // B, same key and same body: its own operation runs (the email is taken now), no replay.
    let same = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&b),
            Some(&shared),
            Some(body("a@example.com")),
            &[],
        )
        .await;
    assert_eq!(same.status, 409, "{}", same.text);
    assert_eq!(same.code(), "EMPLOYEE_EMAIL_TAKEN");
    assert_eq!(same.header("idempotent-replayed"), None);
    // B, same key, another body: a new employee, not A's answer and not a 422.
    let other = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&b),
            Some(&shared),
            Some(body("b@example.com")),
            &[],
        )
        .await;
    assert_eq!(other.status, 201, "{}", other.text);
    assert_ne!(other.data()["id"], first.data()["id"]);
    // A replays its own.
    let replay = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&a),
            Some(&shared),
            Some(body("a@example.com")),
            &[],
        )
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.data()["id"], first.data()["id"]);
}

/// A payee's name goes into an email header: a line break in it is refused at every input.
#[actix_web::test]
async fn names_cannot_carry_mail_headers() {
    let app = spawn_app().await;
    let evil = "Eve\r\nBcc: everyone@example.com";
    let row = |email: &str| {
        serde_json::json!({"name": evil, "email": email, "salary_usd_cents": 1_000,
            "network": "BASE", "wallet_address": crate::helpers::evm_address(email)})
    };
    let res = app.post("/api/v1/employees", row("eve@example.com")).await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["name"]);
    let res = app
        .post(
            "/api/v1/employees/import",
            serde_json::json!([row("eve@example.com")]),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["rows[0].name"]);
    let ok = app.create_employee("Eve", "eve@example.com", 1_000).await;
    let res = app
        .write_as(
            &app.key,
            "PATCH",
            &format!("/api/v1/employees/{}", ok["id"].as_str().expect("id")),
            serde_json::json!({"name": evil}),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text);
    assert_eq!(res.invalid_fields(), vec!["name"]);
    // An email address with a line break is no address at all.
    let res = app
        .post(
            "/api/v1/employees",
            serde_json::json!({"name": "Mallory",
            "email": "m@example.com\r\nBcc: x@example.com", "salary_usd_cents": 1,
            "network": "BASE", "wallet_address": crate::helpers::evm_address("m")}),
        )
        .await;
    assert_eq!(res.invalid_fields(), vec!["email"]);
}

/// Slow and oversized clients cost the server a connection each, never its service: a
/// slowloris client trickling a request head is cut off, and an import ten times over the
/// limit is refused with 413, while everybody else is answered as usual.
#[actix_web::test]
async fn slow_and_oversized_clients_do_not_stop_the_others() {
    use std::io::{Read, Write};
    let app = crate::helpers::spawn_app_with(|s| {
        s.api.max_body_bytes = 64 * 1024;
        s.api.max_import_bytes = 1024 * 1024;
    })
    .await;
    let port: u16 = app
        .address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    // Slowloris: a few connections that send their head one byte every half second.
    let mut slow = Vec::new();
    for _ in 0..8 {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        slow.push(stream);
    }
    let started = std::time::Instant::now();
    let head = b"GET /api/v1/payroll-runs HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut cut_off = vec![false; slow.len()];
    let mut sent = 0;
    // The 10 MB import, meanwhile.
    let big = vec![b'x'; 10 * 1024 * 1024];
    let idem = crate::helpers::new_key();
    let import = app.send(
        "POST",
        "/api/v1/employees/import",
        Some(&app.key),
        Some(&idem),
        Some(big),
        &[("Content-Type", "text/csv")],
    );
    let others = async {
        for _ in 0..20 {
            let res = app.get("/api/v1/payroll-runs").await;
            assert_eq!(res.status, 200);
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (imported, ()) = futures_util::join!(import, others);
    assert_eq!(imported.status, 413, "{}", imported.text);
    assert_eq!(imported.code(), "PAYLOAD_TOO_LARGE");
    while started.elapsed() < Duration::from_secs(12) && cut_off.iter().any(|c| !c) {
        for (i, stream) in slow.iter_mut().enumerate() {
            if cut_off[i] {
                continue;
            }
            let byte = head.get(sent % head.len()).copied().unwrap_or(b'a');
            if stream.write_all(&[byte]).is_err() {
                cut_off[i] = true;
                continue;
            }
            let mut buf = [0u8; 512];
            match stream.read(&mut buf) {
                // Closed, or answered with the timeout's error: either way, cut off.
                Ok(_) => cut_off[i] = true,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => cut_off[i] = true,
            }
        }
        sent += 1;
        // Everybody else is still served while the slow ones hang on.
        let res = app.get("/api/v1/payroll-runs").await;
        assert_eq!(res.status, 200);
        actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        cut_off.iter().all(|c| *c),
        "slow clients still connected after {:?}",
        started.elapsed()
    );
}

/// A key revoked on one instance is refused at once on another sharing the database, though
/// that one had just verified (and held) it.
#[actix_web::test]
async fn a_revoked_key_is_refused_at_once_on_every_instance() {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "two instances share one PostgreSQL database: \
             set PAYROLL_TEST_DATABASE_URL (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let setup = Setup::new().await;
    let first = setup.start(1).await;
    let second = setup.start(2).await;
    let created = setup
        .call(
            &first,
            "POST",
            "/api-keys",
            Some(serde_json::json!({"name": "agent", "scopes": ["payroll:read"]})),
        )
        .await;
    let key = created["data"]["key"].as_str().expect("key").to_owned();
    let key_id = created["data"]["id"].as_str().expect("id").to_owned();
    let client = awc::Client::default();
    let read = |server: &crate::process::Server| {
        client
            .get(format!("{}/api/v1/payroll-runs", server.base))
            .insert_header(("Authorization", format!("Bearer {key}")))
            .send()
    };
    // Give the second instance's listener a moment to be up, then have it verify the key.
    actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(read(&second).await.expect("request").status().as_u16(), 200);
    setup
        .call(&first, "DELETE", &format!("/api-keys/{key_id}"), None)
        .await;
    // Well inside the one second the second instance would otherwise hold the key.
    actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    let res = read(&second).await.expect("request");
    assert_eq!(
        res.status().as_u16(),
        401,
        "the revoked key still works elsewhere"
    );
}

/// A log written to a file is plain text: colour codes are for a terminal only.
#[actix_web::test]
async fn a_log_written_to_a_file_has_no_colour_codes() {
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__LOG__LEVEL", "info")
        .with_env("PAYROLL__LOG__FORMAT", "pretty");
    let server = setup.start(1).await;
    setup.call(&server, "GET", "/payroll-runs", None).await;
    drop(server);
    let log = setup.log(1);
    assert!(log.contains("listening"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
}

/// Figures on the status page read as people write them.
#[actix_web::test]
async fn the_status_page_rounds_the_rate() {
    let app = crate::helpers::spawn_app_with(|s| s.exchange.withdrawals_per_second = 6).await;
    let page = app.get("/status").await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("· 6 withdrawals per second"),
        "{}",
        page.text
    );
}

/// The data folder is the service's own (CONTRACT §13): the folder `0700`, and every file the
/// service writes there `0600`: the database and its journals, the key pepper, the outbox's
/// messages (payees' names, emails, wallets and amounts).
#[actix_web::test]
async fn files_in_the_data_folder_are_the_services_own() {
    use std::os::unix::fs::PermissionsExt as _;
    let app = crate::helpers::spawn_app().await;
    app.create_employee("Ada", "ada@example.com", 1000).await;
    app.fund(10_000).await;
    let run_id = app
        .deposited_run(
            serde_json::json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let dir = app.settings.data.dir.clone();
    let outbox = dir.join("outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_dir(&outbox).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "no email written");
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    assert_eq!(mode(&outbox), 0o700);
    let mut files = Vec::new();
    for folder in [&dir, &outbox] {
        for entry in std::fs::read_dir(folder).expect("folder") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    // The database's own files where it is SQLite (PostgreSQL keeps its data elsewhere).
    let wanted: &[&str] = if std::env::var("PAYROLL_TEST_DATABASE_URL").is_ok() {
        &["key_pepper"]
    } else {
        &["payroll.db", "payroll.db-wal", "key_pepper"]
    };
    for wanted in wanted {
        assert!(names.iter().any(|n| n == wanted), "{wanted} in {names:?}");
    }
    assert!(names.iter().any(|n| n.ends_with(".eml")), "{names:?}");
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
}

/// Years are 0001–9999 and free text refuses control characters, bidi controls and line
/// separators (CONTRACT §1): `+10001-01-01` no longer slips past a regular run's overlap rule
/// (it compared wrongly as text on SQLite), and ESC, NUL, U+202E or U+2028 reach no name,
/// email, label, note or description.
#[actix_web::test]
async fn years_are_four_digits_and_text_holds_no_control_character() {
    use serde_json::json;
    let app = crate::helpers::spawn_app().await;
    app.create_employee("Ada", "ada@example.com", 1000).await;
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.text);
    for (start, end) in [
        ("+10001-01-01", "+10001-12-31"),
        ("2026-03-05", "+10001-12-31"),
        ("0000-01-01", "2026-12-31"),
    ] {
        let res = app
            .post(
                "/api/v1/payroll-runs",
                json!({"period_start": start, "period_end": end}),
            )
            .await;
        assert_eq!(res.status, 400, "{start}..{end}: {}", res.text);
        assert!(
            res.invalid_fields()
                .iter()
                .any(|f| f == "period_start" || f == "period_end"),
            "{}",
            res.text
        );
    }
    let wallet = crate::helpers::evm_address("x@example.com");
    let refused = [
        ("\u{1b}[31m", "ESC"),
        ("\u{0}", "NUL"),
        ("\u{202e}", "bidi"),
        ("\u{2028}", "line separator"),
        ("\u{85}", "C1"),
    ];
    for (bad, what) in refused {
        let cases = [
            (
                "/api/v1/employees",
                json!({"name": format!("Eve{bad}"), "email": "eve@example.com", "salary_usd_cents": 1,
                       "network": "BASE", "wallet_address": wallet}),
                "name",
            ),
            (
                "/api/v1/employees",
                json!({"name": "Eve", "email": format!("eve{bad}@example.com"), "salary_usd_cents": 1,
                       "network": "BASE", "wallet_address": wallet}),
                "email",
            ),
            (
                "/api/v1/payroll-runs",
                json!({"period_start": "2026-05-01", "period_end": "2026-05-31", "label": format!("May{bad}")}),
                "label",
            ),
            (
                "/api/v1/payroll-runs",
                json!({"period_start": "2026-05-01", "period_end": "2026-05-31", "note": format!("n{bad}")}),
                "note",
            ),
            (
                "/api/v1/treasury/transfers",
                json!({"amount_usd_cents": 1, "note": format!("n{bad}")}),
                "note",
            ),
            (
                "/api/v1/webhooks",
                json!({"url": "https://example.com/hook", "events": ["*"], "description": format!("d{bad}")}),
                "description",
            ),
            (
                "/api/v1/api-keys",
                json!({"name": format!("k{bad}"), "scopes": ["payroll:read"]}),
                "name",
            ),
        ];
        for (path, body, field) in cases {
            let res = app.post(path, body).await;
            assert_eq!(res.status, 400, "{what} in {path} {field}: {}", res.text);
            assert!(
                res.invalid_fields().iter().any(|f| f == field),
                "{what} in {path} {field}: {}",
                res.text
            );
        }
    }
}

/// Instances of one database share the key pepper (CONTRACT §13): one started with another
/// refuses to start and says why, rather than refusing every key; an unsafe setting is named
/// by a WARN line at start.
#[actix_web::test]
async fn an_instance_with_another_pepper_refuses_to_start_and_unsafe_settings_are_named() {
    let setup = crate::process::Setup::bare(None)
        .with_env("PAYROLL__WEBHOOKS__ALLOW_HTTP", "true")
        .with_env("PAYROLL__SERVER__STATUS_PAGE_PUBLIC", "true");
    let first = setup.spawn(
        1,
        &[("PAYROLL__AUTH__KEY_PEPPER", "pepper-of-the-first-one")],
    );
    setup.wait_ready(&first, 1).await;
    let log = setup.log(1);
    assert!(
        log.contains("unsafe setting: webhooks.allow_http = true"),
        "{log}"
    );
    assert!(
        log.contains("unsafe setting: server.status_page_public = true"),
        "{log}"
    );
    drop(first);
    let mut second = setup.spawn(2, &[("PAYROLL__AUTH__KEY_PEPPER", "another-pepper")]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = second.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "it started: {}",
            setup.log(2)
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(!status.success());
    let log = setup.log(2);
    assert!(log.contains("auth.key_pepper"), "{log}");
    assert!(log.contains("another key pepper"), "{log}");
    assert!(
        !log.contains("pepper-of-the-first-one") && !log.contains("another-pepper"),
        "{log}"
    );
    // The first one's pepper still works.
    let again = setup.spawn(
        3,
        &[("PAYROLL__AUTH__KEY_PEPPER", "pepper-of-the-first-one")],
    );
    setup.wait_ready(&again, 3).await;
}
