//! The `payroll` client commands, run as the built binary against a spawned server.

use std::process::{Command, Output};

use serde_json::Value;

use crate::{
    helpers::{TestApp, spawn_app, spawn_app_with},
    process::output,
    receiver::Receiver,
};

/// Runs `payroll ARGS` with the app's URL and key; output captured.
async fn payroll(app: &TestApp, key: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(args)
        .env("PAYROLL_BASE_URL", &app.address)
        .env_remove("PAYROLL_API_KEY");
    if let Some(key) = key {
        command.env("PAYROLL_API_KEY", key);
    }
    output(command).await
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

#[actix_web::test]
async fn a_run_from_import_to_execute_wait() {
    let app = spawn_app().await;
    let key = app.key.clone();
    let csv = app.settings.data.dir.join("staff.csv");
    std::fs::write(
        &csv,
        "name,email,salary_usd_cents,network,wallet_address\n\
         Ada,ada@example.com,500000,BASE,0x0000000000000000000000000000000000000011\n\
         Grace,grace@example.com,400000,SOLANA,4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T\n",
    )
    .expect("csv");
    let out = payroll(
        &app,
        Some(&key),
        &["employees", "import", csv.to_str().expect("path")],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["data"]["created"], 2);

    let out = payroll(
        &app,
        Some(&key),
        &[
            "runs",
            "create",
            "--period-start",
            "2026-03-01",
            "--period-end",
            "2026-03-31",
            "--label",
            "March",
        ],
    )
    .await;
    let run = json(&out);
    assert_eq!(run["data"]["period_end"], "2026-03-31T23:59:59.999Z");
    let run_id = run["data"]["id"].as_str().expect("id").to_owned();
    assert_eq!(
        code(&payroll(&app, Some(&key), &["runs", "confirm", &run_id]).await),
        0
    );
    let out = payroll(&app, Some(&key), &["runs", "balance-check", &run_id]).await;
    assert_eq!(json(&out)["data"]["deficit_usdc_cents"], 900_000);
    assert_eq!(
        code(
            &payroll(
                &app,
                Some(&key),
                &["treasury", "transfer", "--amount-usd-cents", "900000"]
            )
            .await
        ),
        0
    );
    let out = payroll(&app, Some(&key), &["runs", "balance-check", &run_id]).await;
    assert_eq!(json(&out)["data"]["run_status"], "DEPOSITED");

    // --wait returns once every payout is terminal, with the run as the API shows it.
    let out = payroll(
        &app,
        Some(&key),
        &[
            "runs",
            "execute",
            &run_id,
            "--wait",
            "--interval",
            "0.1",
            "--timeout",
            "60",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let done = json(&out);
    assert_eq!(done["data"]["status"], "COMPLETED");
    assert_eq!(done["data"]["payout_summary"]["completed"], 2);

    // Lists as CSV: every payout, with a header row.
    let out = payroll(&app, Some(&key), &["runs", "payouts", &run_id, "-f", "csv"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.starts_with("id,payroll_run_id,"));
    // A table shows money as dollars.
    let out = payroll(&app, Some(&key), &["runs", "list", "-f", "table"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("9000.00") && text.contains("COMPLETED"),
        "{text}"
    );
}

#[actix_web::test]
async fn json_output_is_the_apis_body() {
    let app = spawn_app().await;
    let out = payroll(&app, Some(&app.key), &["openapi"]).await;
    let direct = app
        .send("GET", "/api/v1/openapi.json", None, None, None, &[])
        .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), direct.text);

    // The invocation's Idempotency-Key: the same write sent twice is done once.
    let key = uuid::Uuid::new_v4().to_string();
    let args = [
        "keys",
        "create",
        "--name",
        "agent",
        "--scopes",
        "payroll:read",
        "--idempotency-key",
        key.as_str(),
    ];
    let first = json(&payroll(&app, Some(&app.key), &args).await);
    let second = json(&payroll(&app, Some(&app.key), &args).await);
    assert_eq!(first["data"]["id"], second["data"]["id"]);
    assert!(first["data"]["key"].as_str().is_some());
    assert!(
        second["data"]["key"].is_null(),
        "a replay never shows the secret"
    );
}

#[actix_web::test]
async fn exit_codes_say_what_went_wrong() {
    let app = spawn_app_with(|s| s.exchange.sandbox.completion_delay_ms = 600_000).await;
    // 2: usage, before any request.
    let out = payroll(&app, None, &["runs", "list"]).await;
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("PAYROLL_API_KEY"));
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "runs",
            "create",
            "--period-start",
            "yesterday",
            "--period-end",
            "2026-03-31",
        ],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--period-start"));
    let out = payroll(&app, Some(&app.key), &["runs", "frobnicate"]).await;
    assert_eq!(code(&out), 2);
    // 1: the API answered an error; its body is printed.
    let out = payroll(
        &app,
        Some(&app.key),
        &["runs", "get", "run_01ARZ3NDEKTSV4RRFFQ69G5FAV"],
    )
    .await;
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["error"]["code"], "RESOURCE_NOT_FOUND");
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "runs",
            "get",
            "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "-f",
            "table",
        ],
    )
    .await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("hint: "));
    // 3: the server cannot be reached; the message names the URL.
    let out = payroll(
        &app,
        Some(&app.key),
        &["runs", "list", "--base-url", "http://127.0.0.1:1"],
    )
    .await;
    assert_eq!(code(&out), 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://127.0.0.1:1"));
    // 4: --wait gave up (withdrawals settle only after ten minutes here).
    app.create_employee("Ada", "ada@example.com", 1000).await;
    app.fund(1000).await;
    let run = app
        .post(
            "/api/v1/payroll-runs",
            serde_json::json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let run_id = run.data()["id"].as_str().expect("id").to_owned();
    app.act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "runs",
            "execute",
            &run_id,
            "--wait",
            "--timeout",
            "1",
            "--interval",
            "0.2",
        ],
    )
    .await;
    assert_eq!(code(&out), 4, "{}", String::from_utf8_lossy(&out.stderr));
}

#[actix_web::test]
async fn help_and_completions() {
    let app = spawn_app().await;
    let out = payroll(&app, None, &["runs", "execute", "--help"]).await;
    assert_eq!(code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Example:"));
    let out = payroll(&app, None, &["completions", "bash"]).await;
    assert_eq!(code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("payroll"));
}

/// Reads one HTTP/1.1 message (headers and a Content-Length body) from a stream.
fn read_message(stream: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return data;
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return data,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// A proxy to `upstream` that forwards its first request, waits for the answer and then
/// drops the connection without passing it on; later connections are piped through.
fn dropping_proxy(upstream: u16) -> u16 {
    use std::{
        io::Write,
        net::{TcpListener, TcpStream},
        thread,
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("proxy");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut client) = conn else { break };
            thread::spawn(move || {
                let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                if n == 0 {
                    let request = read_message(&mut client);
                    server.write_all(&request).ok();
                    let _answer = read_message(&mut server);
                    // The write happened; the client never hears of it.
                    return;
                }
                let (mut c2, mut s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                thread::spawn(move || std::io::copy(&mut s2, &mut c2).ok());
                std::io::copy(&mut client, &mut server).ok();
            });
        }
    });
    port
}

#[actix_web::test]
async fn a_write_retried_after_a_dropped_connection_runs_once() {
    let app = spawn_app().await;
    let upstream: u16 = app
        .address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let proxy = dropping_proxy(upstream);
    let url = format!("http://127.0.0.1:{proxy}");
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "employees",
            "create",
            "--base-url",
            &url,
            "--name",
            "Ada",
            "--email",
            "ada@example.com",
            "--salary-usd-cents",
            "1000",
            "--network",
            "BASE",
            "--wallet-address",
            "0x0000000000000000000000000000000000000011",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let created = json(&out);
    let list = app.get("/api/v1/employees").await;
    assert_eq!(
        list.json["pagination"]["total"], 1,
        "the retry must not create a second employee"
    );
    assert_eq!(list.data()[0]["id"], created["data"]["id"]);
    let audit = app.get("/api/v1/audit-log?action=EMPLOYEE_CREATED").await;
    assert_eq!(audit.json["pagination"]["total"], 1);
}

#[actix_web::test]
async fn a_profile_supplies_the_url_and_key() {
    let app = spawn_app().await;
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".config/payroll")).expect("dir");
    std::fs::write(
        home.path().join(".config/payroll/config.toml"),
        format!(
            "[profiles.test]\nbase_url = \"{}\"\napi_key = \"{}\"\n",
            app.address, app.key
        ),
    )
    .expect("config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["runs", "list", "--profile", "test"])
        .env("HOME", home.path())
        .env_remove("PAYROLL_API_KEY")
        .env_remove("PAYROLL_BASE_URL");
    let out = output(command).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["pagination"]["total"], 0);
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["runs", "list", "--profile", "nope"])
        .env("HOME", home.path())
        .env_remove("PAYROLL_API_KEY");
    let out = output(command).await;
    assert_eq!(code(&out), 2);
}

/// An app that may deliver to a local plain-HTTP receiver.
async fn spawn_app_for_local_webhooks() -> TestApp {
    spawn_app_with(|s| {
        s.webhooks.allow_http = true;
        s.webhooks.allow_private_networks = true;
    })
    .await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `webhooks deliveries` until `done` holds for the listed deliveries.
async fn wait_for_deliveries(
    app: &TestApp,
    webhook_id: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = payroll(app, Some(&app.key), &["webhooks", "deliveries", webhook_id]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let list = json(&out)["data"].as_array().expect("list").clone();
        if done(&list) {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "deliveries: {list:#?}"
        );
        actix_web::rt::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[actix_web::test]
async fn webhooks_create_list_get_and_delete() {
    let app = spawn_app_for_local_webhooks().await;
    let receiver = Receiver::start().await;
    let url = receiver.url("/ok");
    // Events as a comma list and as a repeated flag; the secret is shown in this answer.
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "webhooks",
            "create",
            "--url",
            &url,
            "--events",
            "payroll.run.*,payout.failed",
            "--events",
            "webhook.test",
            "--description",
            "ops channel",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let created = json(&out);
    let webhook = &created["data"];
    let webhook_id = webhook["id"].as_str().expect("id").to_owned();
    assert!(webhook_id.starts_with("wh_"), "{created}");
    assert_eq!(webhook["url"], url.as_str());
    assert_eq!(
        webhook["events"],
        serde_json::json!(["payroll.run.*", "payout.failed", "webhook.test"])
    );
    assert_eq!(webhook["description"], "ops channel");
    assert_eq!(webhook["status"], "ACTIVE");
    assert!(
        webhook["secret"]
            .as_str()
            .is_some_and(|s| s.starts_with("whsec_")),
        "{created}"
    );

    // Lists and gets never show the secret.
    let out = payroll(&app, Some(&app.key), &["webhooks", "list"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let list = json(&out);
    assert_eq!(list["pagination"]["total"], 1);
    assert_eq!(list["data"][0]["id"], webhook_id.as_str());
    assert!(list["data"][0].get("secret").is_none(), "{list}");
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "list", "--status", "DISABLED"],
    )
    .await;
    assert_eq!(json(&out)["pagination"]["total"], 0);
    let out = payroll(&app, Some(&app.key), &["webhooks", "list", "-f", "table"]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("ID  ") && table.contains(&webhook_id) && table.contains(&url),
        "{table}"
    );
    let out = payroll(&app, Some(&app.key), &["webhooks", "get", &webhook_id]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let got = json(&out);
    assert_eq!(got["data"]["id"], webhook_id.as_str());
    assert!(got["data"].get("secret").is_none(), "{got}");

    // The same create under one Idempotency-Key is one endpoint; the replay hides the secret.
    let key = uuid::Uuid::new_v4().to_string();
    let args = [
        "webhooks",
        "create",
        "--url",
        url.as_str(),
        "--events",
        "*",
        "--idempotency-key",
        key.as_str(),
    ];
    let first = json(&payroll(&app, Some(&app.key), &args).await);
    let second = json(&payroll(&app, Some(&app.key), &args).await);
    assert_eq!(first["data"]["id"], second["data"]["id"]);
    assert!(first["data"]["secret"].as_str().is_some());
    assert!(second["data"]["secret"].is_null(), "{second}");

    let out = payroll(&app, Some(&app.key), &["webhooks", "delete", &webhook_id]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let deleted = json(&out);
    assert_eq!(deleted["data"]["id"], webhook_id.as_str());
    assert_eq!(deleted["data"]["deleted"], true);
    let out = payroll(&app, Some(&app.key), &["webhooks", "get", &webhook_id]).await;
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["error"]["code"], "RESOURCE_NOT_FOUND");
    let out = payroll(&app, Some(&app.key), &["webhooks", "list"]).await;
    assert_eq!(json(&out)["pagination"]["total"], 1);
}

#[actix_web::test]
async fn webhooks_test_deliveries_retry_and_rotate() {
    let app = spawn_app_for_local_webhooks().await;
    let receiver = Receiver::start().await;
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "webhooks",
            "create",
            "--url",
            &receiver.url("/ok"),
            "--events",
            "webhook.test",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let created = json(&out);
    let webhook_id = created["data"]["id"].as_str().expect("id").to_owned();
    let secret = created["data"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();

    // `test` answers 202 with the PENDING delivery; the receiver gets it, signed.
    let out = payroll(&app, Some(&app.key), &["webhooks", "test", &webhook_id]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let delivery = json(&out)["data"].clone();
    let delivery_id = delivery["id"].as_str().expect("id").to_owned();
    assert_eq!(delivery["event_type"], "webhook.test");
    assert_eq!(delivery["webhook_id"], webhook_id.as_str());
    let got = receiver.wait_for("/ok", 10, |r| !r.is_empty()).await;
    assert_eq!(got[0].event_type(), "webhook.test");
    got[0]
        .verify(&secret)
        .expect("signed with the printed secret");

    // `deliveries` lists it with its attempt, and filters by status and event type.
    let list = wait_for_deliveries(&app, &webhook_id, |d| {
        d.len() == 1 && d[0]["status"] == "SUCCEEDED"
    })
    .await;
    assert_eq!(list[0]["id"], delivery_id.as_str());
    assert_eq!(list[0]["attempts"][0]["response_status"], 200);
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "webhooks",
            "deliveries",
            &webhook_id,
            "--status",
            "SUCCEEDED",
            "--event-type",
            "webhook.test",
            "--limit",
            "5",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["pagination"]["total"], 1);
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "deliveries", &webhook_id, "--status", "FAILED"],
    )
    .await;
    assert_eq!(json(&out)["pagination"]["total"], 0);
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "deliveries", &webhook_id, "--status", "LOST"],
    )
    .await;
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["error"]["code"], "INVALID_QUERY_PARAMETER");

    // `retry-delivery` sends the finished delivery once more.
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "retry-delivery", &webhook_id, &delivery_id],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["data"]["id"], delivery_id.as_str());
    let got = receiver.wait_for("/ok", 10, |r| r.len() == 2).await;
    assert_eq!(got[1].header("webhook-id"), got[0].header("webhook-id"));

    // `rotate-secret` prints the new secret once; `enable` on an ACTIVE endpoint keeps it so.
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "rotate-secret", &webhook_id],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rotated = json(&out);
    let new_secret = rotated["data"]["secret"].as_str().expect("new secret");
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    let out = payroll(&app, Some(&app.key), &["webhooks", "enable", &webhook_id]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["data"]["status"], "ACTIVE");
}

#[actix_web::test]
async fn webhooks_usage_and_api_errors() {
    let app = spawn_app_for_local_webhooks().await;
    // 2: a required flag is missing; nothing is sent.
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "create", "--events", "*"],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--url"), "{}", stderr(&out));
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "create", "--url", "https://example.com/hook"],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--events"), "{}", stderr(&out));
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "retry-delivery", "wh_1"],
    )
    .await;
    assert_eq!(code(&out), 2);
    let out = payroll(&app, Some(&app.key), &["webhooks", "list"]).await;
    assert_eq!(json(&out)["pagination"]["total"], 0, "nothing was created");
    // 1: the API refuses the body and says which field.
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "webhooks",
            "create",
            "--url",
            "https://example.com/hook",
            "--events",
            "payroll.run.exploded",
        ],
    )
    .await;
    assert_eq!(code(&out), 1);
    let error = json(&out);
    assert_eq!(error["error"]["code"], "INVALID_REQUEST_BODY");
    assert_eq!(
        error["error"]["details"]["validation_errors"][0]["field"],
        "events[0]"
    );
    let out = payroll(
        &app,
        Some(&app.key),
        &["webhooks", "test", "wh_01ARZ3NDEKTSV4RRFFQ69G5FAV"],
    )
    .await;
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["error"]["code"], "RESOURCE_NOT_FOUND");

    // Every subcommand's help shows an example.
    for sub in [
        "create",
        "list",
        "get",
        "delete",
        "enable",
        "rotate-secret",
        "test",
        "deliveries",
        "retry-delivery",
    ] {
        let out = payroll(&app, None, &["webhooks", sub, "--help"]).await;
        assert_eq!(code(&out), 0, "{sub}");
        let help = String::from_utf8_lossy(&out.stdout);
        let example = help.split_once("Example").map(|(_, e)| e).unwrap_or("");
        assert!(
            example.contains(&format!("\n  payroll webhooks {sub} ")),
            "{sub}: {help}"
        );
    }
}

/// A CA and a certificate for 127.0.0.1 signed by it: (CA PEM, server certificate, server key).
fn test_pki() -> (
    String,
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "payroll test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    params
        .extended_key_usages
        .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    let key = rcgen::KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &ca).expect("server certificate");
    (ca.pem(), cert.der().clone(), key.into())
}

/// A TLS listener on 127.0.0.1 that passes each connection's plaintext to `upstream`: the
/// real app behind HTTPS. Returns its port.
async fn tls_front(
    upstream: u16,
    cert: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> u16 {
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    actix_web::rt::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            actix_web::rt::spawn(async move {
                // A client that refuses the certificate ends here.
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut app) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut app).await;
            });
        }
    });
    port
}

#[actix_web::test]
async fn https_with_a_private_ca() {
    let app = spawn_app().await;
    let upstream: u16 = app
        .address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let (ca_pem, cert, key) = test_pki();
    let port = tls_front(upstream, cert, key).await;
    let url = format!("https://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("dir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).expect("CA file");
    let ca_path = ca_file.to_str().expect("path");

    // Trusted through --ca-cert: a read and a write over TLS.
    let out = payroll(
        &app,
        Some(&app.key),
        &["runs", "list", "--base-url", &url, "--ca-cert", ca_path],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["pagination"]["total"], 0);
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "keys",
            "create",
            "--name",
            "over-tls",
            "--scopes",
            "payroll:read",
            "--base-url",
            &url,
            "--ca-cert",
            ca_path,
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["data"]["name"], "over-tls");

    // Not trusted: exit 3 at once (no retries), saying it is the certificate.
    let started = std::time::Instant::now();
    let out = payroll(&app, Some(&app.key), &["runs", "list", "--base-url", &url]).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains("TLS handshake failed")
            && message.contains("certificate")
            && message.contains("--ca-cert")
            && message.contains(&url),
        "{message}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "a refused certificate is not retried"
    );

    // PAYROLL_CA_CERT, and a profile's ca_cert.
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["webhooks", "list"])
        .env("PAYROLL_BASE_URL", &url)
        .env("PAYROLL_API_KEY", &app.key)
        .env("PAYROLL_CA_CERT", &ca_file);
    let out = output(command).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["pagination"]["total"], 0);
    std::fs::create_dir_all(dir.path().join(".config/payroll")).expect("dir");
    std::fs::write(
        dir.path().join(".config/payroll/config.toml"),
        format!(
            "[profiles.tls]\nbase_url = \"{url}\"\napi_key = \"{}\"\nca_cert = \"{ca_path}\"\n",
            app.key
        ),
    )
    .expect("config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["keys", "list", "--profile", "tls"])
        .env("HOME", dir.path())
        .env_remove("PAYROLL_API_KEY")
        .env_remove("PAYROLL_BASE_URL")
        .env_remove("PAYROLL_CA_CERT");
    let out = output(command).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["pagination"]["total"], 2);

    // A CA file that is missing or holds no certificate is a usage error.
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "runs",
            "list",
            "--base-url",
            &url,
            "--ca-cert",
            "/nonexistent/ca.pem",
        ],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("/nonexistent/ca.pem"),
        "{}",
        stderr(&out)
    );
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").expect("file");
    let out = payroll(
        &app,
        Some(&app.key),
        &[
            "runs",
            "list",
            "--base-url",
            &url,
            "--ca-cert",
            empty.to_str().expect("path"),
        ],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no PEM certificate"),
        "{}",
        stderr(&out)
    );
}

#[actix_web::test]
async fn payouts_resolve_sends_the_outcome_and_shows_the_refusal() {
    let app = spawn_app().await;
    let key = app.key.clone();
    app.create_employee("Res", "res@example.com", 1_000).await;
    app.fund(1_000).await;
    let run_id = app
        .deposited_run(
            serde_json::json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}),
        )
        .await;
    let listed = app
        .get(&format!("/api/v1/payroll-runs/{run_id}/payouts"))
        .await;
    let payout_id = listed.data()[0]["id"].as_str().expect("id").to_owned();
    // Not stuck: the API refuses, and the CLI prints its error body and exits 1.
    let out = payroll(
        &app,
        Some(&key),
        &[
            "payouts",
            "resolve",
            &payout_id,
            "--outcome",
            "failed",
            "--note",
            "checked",
        ],
    )
    .await;
    assert_eq!(code(&out), 1, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["error"]["code"], "INVALID_STATUS_TRANSITION");
    // An outcome the API does not know is a usage error, sent nowhere.
    let out = payroll(
        &app,
        Some(&key),
        &["payouts", "resolve", &payout_id, "--outcome", "paid"],
    )
    .await;
    assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
}

#[actix_web::test]
async fn tables_name_money_in_dollars() {
    let app = spawn_app().await;
    app.create_employee("Dollar", "dollar@example.com", 500_000)
        .await;
    let run_id = app
        .create_run(serde_json::json!({"period_start": "2026-03-01", "period_end": "2026-03-31"}))
        .await;
    let out = payroll(
        &app,
        Some(&app.key),
        &["runs", "get", &run_id, "-f", "table"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("total_amount (USD)  5000.00"), "{table}");
    assert!(
        !table.contains("usd_cents"),
        "cents named over a dollars figure: {table}"
    );
    let out = payroll(
        &app,
        Some(&app.key),
        &["runs", "payouts", &run_id, "-f", "table"],
    )
    .await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("AMOUNT (USD)"), "{table}");
    assert!(!table.contains("USD_CENTS"), "{table}");
}

/// The CLI's CSV defuses formulas as the server's does, full-width forms too; its tables never
/// write a control character to the terminal (an earlier version's data may hold one: written
/// here straight into the database, as the API refuses it now).
#[actix_web::test]
async fn csv_output_defuses_formulas_and_tables_never_drive_the_terminal() {
    let app = spawn_app().await;
    let employee = app
        .create_employee("＝HYPERLINK(\"http://evil\")", "formula@example.com", 100)
        .await;
    let out = payroll(&app, Some(&app.key), &["employees", "list", "-f", "csv"]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(csv.contains("'＝HYPERLINK"), "{csv}");
    let db = app.db().await;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    payroll_entities::employee::Entity::update_many()
        .col_expr(
            payroll_entities::employee::Column::Name,
            Expr::value("Eve\u{1b}[2J\u{1b}]0;pwned\u{7}\u{202e}"),
        )
        .filter(payroll_entities::employee::Column::Id.eq(employee["id"].as_str().expect("id")))
        .exec(&db.conn)
        .await
        .expect("written");
    for format in ["table", "csv"] {
        let out = payroll(&app, Some(&app.key), &["employees", "list", "-f", format]).await;
        assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
        if format == "table" {
            assert!(
                !out.stdout.iter().any(|b| *b == 0x1b || *b == 0x07),
                "a control character reached the terminal: {:?}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("\\u{001b}"));
            assert!(!String::from_utf8_lossy(&out.stdout).contains('\u{202e}'));
        }
    }
}

/// A "server" that answers every request with a chunked body of `total` bytes of JSON-ish
/// filler (or until the client goes); the bytes it managed to write are counted.
fn flooding_server(
    total: usize,
    content_type: &'static str,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::{
        io::Write,
        net::TcpListener,
        sync::{Arc, atomic::AtomicUsize, atomic::Ordering},
        thread,
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("flood");
    let port = listener.local_addr().expect("addr").port();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut client) = conn else { break };
            let counter = counter.clone();
            thread::spawn(move || {
                let _request = read_message(&mut client);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\
                     transfer-encoding: chunked\r\n\r\n"
                );
                if client.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < total {
                    let framed =
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                    if client.write_all(&framed).is_err() {
                        return;
                    }
                    sent += chunk.len();
                    counter.fetch_add(chunk.len(), Ordering::Relaxed);
                }
                client.write_all(b"0\r\n\r\n").ok();
            });
        }
    });
    (port, written)
}

#[actix_web::test]
async fn an_answer_larger_than_16_mib_is_not_read() {
    // 256 MiB offered; the CLI stops at 16 MiB, says so and does not retry.
    let (port, written) = flooding_server(256 << 20, "application/json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args(["runs", "list"])
        .env("PAYROLL_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("PAYROLL_API_KEY", "mpk_test_flood");
    let out = output(command).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("larger than 16 MiB"),
        "{}",
        stderr(&out)
    );
    let sent = written.load(std::sync::atomic::Ordering::Relaxed);
    // What the kernel's buffers hold beside the 16 MiB read, never the whole flood.
    assert!(sent < 64 << 20, "{} MiB written to the CLI", sent >> 20);
}

#[actix_web::test]
async fn a_runs_payouts_csv_is_written_out_as_it_arrives_whatever_its_size() {
    // A run's payouts as CSV are one answer, as long as the run: written to stdout as they
    // come, never held whole, so the 16 MiB cap does not apply to them.
    let total = 24 << 20;
    let (port, _) = flooding_server(total, "text/csv; charset=utf-8");
    let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
    command
        .args([
            "runs",
            "payouts",
            "run_01J00000000000000000000000",
            "-f",
            "csv",
        ])
        .env("PAYROLL_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("PAYROLL_API_KEY", "mpk_test_flood");
    let out = output(command).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(out.stdout.len(), total);
}

/// CONTRACT §14, §16: the CLI takes a session token as its key; the agent's execute is held,
/// and the human approves from the CLI; sessions, approvals and wallet holds have commands.
#[actix_web::test]
async fn an_agent_session_prepares_and_a_human_approves_from_the_cli() {
    let app = spawn_app().await;
    let human = app.key.clone();
    app.create_employee("Ada", "ada@example.com", 150_000).await;
    app.fund(1_000_000).await;
    let out = payroll(
        &app,
        Some(&human),
        &[
            "agent-sessions",
            "create",
            "--description",
            "March payroll agent",
            "--scopes",
            "payroll:read,payroll:write,payroll:execute,treasury:read",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let session = json(&out)["data"].clone();
    let token = session["token"].as_str().expect("token").to_owned();
    let session_id = session["id"].as_str().expect("id").to_owned();

    let out = payroll(
        &app,
        Some(&token),
        &[
            "runs",
            "create",
            "--period-start",
            "2026-03-01",
            "--period-end",
            "2026-03-31",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let run_id = json(&out)["data"]["id"].as_str().expect("run").to_owned();
    for step in ["confirm", "balance-check"] {
        let out = payroll(&app, Some(&token), &["runs", step, &run_id]).await;
        assert_eq!(
            code(&out),
            0,
            "{step}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = payroll(&app, Some(&token), &["runs", "execute", &run_id]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
    let approval = json(&out)["data"].clone();
    assert_eq!(approval["status"], "PENDING", "{approval}");
    let approval_id = approval["id"].as_str().expect("approval").to_owned();

    // The agent cannot approve; the human lists and approves.
    let out = payroll(&app, Some(&token), &["approvals", "approve", &approval_id]).await;
    assert_eq!(code(&out), 1);
    let out = payroll(
        &app,
        Some(&human),
        &["approvals", "list", "--status", "PENDING", "-f", "json"],
    )
    .await;
    assert_eq!(json(&out)["data"][0]["id"], approval_id.as_str());
    let out = payroll(&app, Some(&human), &["approvals", "approve", &approval_id]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(json(&out)["data"]["status"], "APPROVED");
    let out = payroll(&app, Some(&human), &["runs", "sync", &run_id, "--wait"]).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let out = payroll(
        &app,
        Some(&human),
        &[
            "audit",
            "list",
            "--agent-session-id",
            &session_id,
            "--actor-type",
            "AGENT_SESSION",
        ],
    )
    .await;
    let entries = json(&out)["data"].as_array().expect("entries").clone();
    assert!(
        entries
            .iter()
            .any(|e| e["operation"] == "executePayrollRun"),
        "{entries:?}"
    );

    // A rejection needs its reason; a revoked session is refused from then on.
    let out = payroll(
        &app,
        Some(&human),
        &["agent-sessions", "revoke", &session_id],
    )
    .await;
    assert_eq!(json(&out)["data"]["status"], "REVOKED");
    let out = payroll(&app, Some(&token), &["runs", "list"]).await;
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["error"]["code"], "INVALID_API_KEY");
    let out = payroll(&app, Some(&human), &["approvals", "reject", &approval_id]).await;
    assert_eq!(code(&out), 2, "--reason is required");
}

/// Each command's help lists only the options that apply to it: server commands the
/// configuration file, client commands the connection and output options; the root lists both.
#[actix_web::test]
async fn help_lists_only_the_options_that_apply() {
    let help = |args: &'static [&'static str]| async move {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
        command.args(args).arg("--help");
        let out = output(command).await;
        assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let client = [
        "--api-key",
        "--base-url",
        "--profile",
        "--ca-cert",
        "--format",
        "--idempotency-key",
    ];
    for server in [
        &["serve"][..],
        &["migrate"],
        &["admin"],
        &["admin", "create-key"],
        &["admin", "exchange", "check"],
    ] {
        let text = help(server).await;
        assert!(text.contains("--config"), "{server:?}: {text}");
        for option in client {
            assert!(!text.contains(option), "{server:?} lists {option}: {text}");
        }
    }
    for api in [
        &["runs", "list"][..],
        &["runs"],
        &["employees", "import"],
        &["mcp"],
    ] {
        let text = help(api).await;
        assert!(!text.contains("--config"), "{api:?} lists --config: {text}");
        assert!(
            text.contains("--api-key") && text.contains("--base-url"),
            "{api:?}: {text}"
        );
    }
    let text = help(&["openapi"]).await;
    assert!(
        !text.contains("--config") && !text.contains("--api-key"),
        "{text}"
    );
    let text = help(&[]).await;
    assert!(
        text.contains("--config") && text.contains("--api-key"),
        "{text}"
    );
    // Hidden is not refused: each option still parses after any subcommand.
    for args in [
        &[
            "runs",
            "list",
            "--api-key",
            "mpk_live_x",
            "--base-url",
            "http://127.0.0.1:9",
        ][..],
        &[
            "--format",
            "json",
            "runs",
            "list",
            "--base-url",
            "http://127.0.0.1:9",
        ],
        &["serve", "--config", "/nonexistent/payroll.toml"],
        &[
            "admin",
            "create-key",
            "--name",
            "x",
            "--scopes",
            "payroll:read",
            "--config",
            "/nonexistent/payroll.toml",
        ],
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payroll"));
        command.args(args).env_remove("PAYROLL_API_KEY");
        let out = output(command).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(code(&out), 0, "{args:?}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.starts_with("payroll: "), "{args:?}: {stderr}");
    }
}
