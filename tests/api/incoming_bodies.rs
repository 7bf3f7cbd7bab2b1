//! What comes in must come in whole, and in time (CONTRACT §4): a body that ends before its
//! `Content-Length` or its last chunk is refused (400, `reason: "incomplete body"`) before the
//! handler runs and with its Idempotency-Key left free; a body slower than
//! `api.body_read_timeout_ms` is answered 408 and its connection closed, while other clients
//! are served. Raw sockets, both framings, a JSON route and the CSV import.

use std::time::{Duration, Instant};

use actix_web::rt::net::TcpStream;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{TestApp, evm_address, new_key, spawn_app, spawn_app_with};

/// How the body is framed.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    Chunked,
}

/// Sends `head` fields and `sent` of `body` (framed as told), then closes the sending half;
/// answers the status and the answer's body.
async fn send_part(
    app: &TestApp,
    path: &str,
    content_type: &str,
    idempotency_key: &str,
    body: &[u8],
    sent: usize,
    framing: Framing,
) -> (u16, Value) {
    let address = app.address.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let framing_header = match framing {
        Framing::Length => format!("Content-Length: {}\r\n", body.len()),
        Framing::Chunked => "Transfer-Encoding: chunked\r\n".to_owned(),
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: {idempotency_key}\r\nContent-Type: {content_type}\r\n{framing_header}\r\n",
        app.key
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    match framing {
        Framing::Length => stream.write_all(&body[..sent]).await.expect("body"),
        Framing::Chunked => {
            // One chunk that announces the whole body and carries only part of it.
            let chunk_head = format!("{:x}\r\n", body.len());
            stream
                .write_all(chunk_head.as_bytes())
                .await
                .expect("chunk");
            stream.write_all(&body[..sent]).await.expect("body");
        }
    }
    stream.shutdown().await.expect("half-close");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    parse(&answer)
}

/// The status and JSON body of a raw HTTP/1.1 answer (not chunked: ours have a length).
fn parse(answer: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// 100 CSV rows, salaries of 5,000,000 cents.
fn csv_rows() -> String {
    let mut csv = String::from("name,email,salary_usd_cents,network,wallet_address\n");
    for i in 0..100 {
        let email = format!("cut{i}@example.com");
        csv.push_str(&format!(
            "Person {i},{email},5000000,BASE,{}\n",
            evm_address(&email)
        ));
    }
    csv
}

async fn employee_count(app: &TestApp) -> u64 {
    let res = app.get("/api/v1/employees?limit=1").await;
    assert_eq!(res.status, 200, "{}", res.text);
    res.json["pagination"]["total"].as_u64().expect("total")
}

#[actix_web::test]
async fn a_body_cut_short_is_no_body_and_leaves_its_key_free() {
    let app = spawn_app().await;
    let csv = csv_rows();
    // Cut inside row 51's salary: "5000000" becomes "50".
    let row_51 = csv.find("cut50@example.com").expect("row 51");
    let cut = row_51 + "cut50@example.com,".len() + 2;
    let employee = json!({"name": "Ada", "email": "ada@example.com", "salary_usd_cents": 500000,
        "network": "BASE", "wallet_address": evm_address("ada@example.com")})
    .to_string();
    for framing in [Framing::Length, Framing::Chunked] {
        for (path, content_type, body, sent) in [
            ("/api/v1/employees/import", "text/csv", csv.as_bytes(), cut),
            (
                "/api/v1/employees",
                "application/json",
                employee.as_bytes(),
                employee.len() / 2,
            ),
        ] {
            let key = new_key();
            let (status, answer) =
                send_part(&app, path, content_type, &key, body, sent, framing).await;
            assert_eq!(status, 400, "{path} {framing:?}: {answer}");
            assert_eq!(answer["error"]["code"], "INVALID_REQUEST_BODY");
            assert_eq!(
                answer["error"]["details"]["reason"], "incomplete body",
                "{answer}"
            );
            assert_eq!(
                employee_count(&app).await,
                0,
                "{path} {framing:?}: nothing written"
            );
            // The whole body under the same key runs: nothing was kept of the first.
            let whole = app
                .send(
                    "POST",
                    path,
                    Some(&app.key),
                    Some(&key),
                    Some(body.to_vec()),
                    &[("Content-Type", content_type)],
                )
                .await;
            assert!(
                whole.status.is_success(),
                "{path} {framing:?}: {}",
                whole.text
            );
            // Cleared for the next round: the import is an upsert, the employee is removed.
            let ids: Vec<String> = app.get("/api/v1/employees?limit=200").await.json["data"]
                .as_array()
                .expect("list")
                .iter()
                .filter_map(|e| e["id"].as_str().map(str::to_owned))
                .collect();
            let db = app.db().await;
            use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
            payroll_entities::employee::Entity::delete_many()
                .filter(payroll_entities::employee::Column::Id.is_in(ids))
                .exec(&db.conn)
                .await
                .expect("cleared");
        }
    }
}

#[actix_web::test]
async fn slow_bodies_are_cut_at_the_deadline_while_others_are_served() {
    const CONNECTIONS: usize = 200;
    let app = spawn_app_with(|s| {
        s.api.body_read_timeout_ms = 2000;
        s.api.rate_limit_burst = 1000;
        s.api.rate_limit_per_second = 1000;
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut drips = Vec::new();
    for _ in 0..CONNECTIONS {
        let address = address.clone();
        let key = app.key.clone();
        drips.push(actix_web::rt::spawn(async move {
            let mut stream = TcpStream::connect(&address).await.expect("connect");
            let head = format!(
                "POST /api/v1/employees HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {key}\r\n\
                 Idempotency-Key: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
                new_key()
            );
            stream.write_all(head.as_bytes()).await.expect("head");
            let opened = Instant::now();
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            // A byte a second until the server answers and closes.
            loop {
                tokio::select! {
                    read = stream.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    },
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        if stream.write_all(b" ").await.is_err() {
                            // Closed on its side; read what it said.
                            let _ = stream.read_to_end(&mut answer).await;
                            break;
                        }
                    }
                }
            }
            (opened.elapsed(), answer)
        }));
    }
    // Others are served meanwhile.
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let list = app.get("/api/v1/employees").await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    for drip in drips {
        // Cut at the deadline, counted from the request's head: not before it, and not much
        // after (the slack is for a machine busy with the other tests).
        let (open_for, answer) = drip.await.expect("joined");
        assert!(
            open_for >= Duration::from_millis(1900)
                && open_for < Duration::from_millis(2000 + 3000),
            "closed after {open_for:?}"
        );
        let (status, body) = parse(&answer);
        assert_eq!(status, 408, "{body}");
        assert_eq!(body["error"]["code"], "REQUEST_TIMEOUT");
        assert_eq!(body["error"]["details"]["limit_ms"], 2000);
    }
    assert_eq!(employee_count(&app).await, 0);
}

/// Import A's head and the first `half` bytes of its CSV body, the rest held back.
async fn import_held_open(app: &TestApp, csv: &str, half: usize) -> TcpStream {
    let address = app.address.trim_start_matches("http://");
    let mut a = TcpStream::connect(address).await.expect("connect");
    let head = format!(
        "POST /api/v1/employees/import HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: {}\r\nContent-Type: text/csv\r\nContent-Length: {}\r\n\r\n",
        app.key,
        new_key(),
        csv.len()
    );
    a.write_all(head.as_bytes()).await.expect("head");
    a.write_all(&csv.as_bytes()[..half]).await.expect("half");
    a
}

/// Imports one row, for `email`, as CSV under `key`.
async fn import_one(app: &TestApp, key: &str, email: &str) -> crate::helpers::Resp {
    let csv = format!(
        "name,email,salary_usd_cents,network,wallet_address\nLater,{email},100,BASE,{}\n",
        evm_address(email)
    );
    app.send(
        "POST",
        "/api/v1/employees/import",
        Some(&app.key),
        Some(key),
        Some(csv.into_bytes()),
        &[("Content-Type", "text/csv")],
    )
    .await
}

#[actix_web::test]
async fn one_import_at_a_time_the_others_are_told_when_to_come_back() {
    let app = spawn_app().await;
    let csv = csv_rows();
    let half = csv.len() / 2;
    // Import A holds the place while B, one row, is tried. Whichever the server admits first
    // runs: when B did (A refused or not yet read), both are tried again, B under a new email.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut went_first = 0u64;
    let (mut a, refused, b_key, b_email) = loop {
        let a = import_held_open(&app, &csv, half).await;
        let b_email = format!("later{went_first}@example.com");
        let b_key = new_key();
        let res = import_one(&app, &b_key, &b_email).await;
        if res.status == 429 {
            break (a, res, b_key, b_email);
        }
        assert_eq!(res.status, 200, "{}", res.text);
        went_first += 1;
        drop(a);
        assert!(Instant::now() < deadline, "A never held the import place");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(refused.code(), "RATE_LIMITED", "{}", refused.text);
    let details = &refused.json["error"]["details"];
    assert_eq!(details["reason"], "import_in_progress", "{}", refused.text);
    assert_eq!(details["limit"], 1);
    assert_eq!(refused.header("retry-after"), Some("5"));
    assert_eq!(details["retry_after_seconds"], 5);
    assert_eq!(refused.header("connection"), Some("close"));
    let hint = refused.json["error"]["recovery_hint"]
        .as_str()
        .unwrap_or("");
    assert!(hint.contains("same Idempotency-Key"), "{hint}");
    let found = app
        .get(&format!("/api/v1/employees?search={b_email}"))
        .await;
    assert_eq!(found.json["data"], json!([]), "nothing of B was written");

    // A goes on and completes whole.
    a.write_all(&csv.as_bytes()[half..]).await.expect("rest");
    let mut answer = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (status, body) = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), a.read(&mut buf))
            .await
            .expect("A answered in time")
            .expect("read");
        assert!(n > 0, "A's connection closed without an answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= length {
                break parse(&answer);
            }
        }
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["created"], 100, "{body}");

    // B, sent again under the key of its refusal, runs once the place is free.
    let res = import_one(&app, &b_key, &b_email).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(res.data()["created"], 1);
    assert_eq!(employee_count(&app).await, 101 + went_first);
}
