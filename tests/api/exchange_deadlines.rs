//! Deadlines on the exchange (CONTRACT §7): one overall deadline covers each call to the
//! exchange, connect, head and body alike. A stand-in of OKX that sends its answers' heads at
//! once and their bodies a byte every 200 ms holds no request beyond that deadline, nor the
//! requests behind it.

use std::{
    io::{Read, Write},
    net::TcpListener,
    time::{Duration, Instant},
};

use crate::helpers::{TestApp, spawn_app_with};

/// An HTTP server on loopback that answers every request with a 200 whose body of 200 bytes
/// comes one byte every 200 ms; answers its base URL.
fn dribbling_exchange() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let body = format!(
                    "{{\"code\":\"0\",\"msg\":\"\",\"data\":[]}}{}",
                    " ".repeat(168)
                );
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if stream.write_all(answer.as_bytes()).is_err() {
                    return;
                }
                for b in body.bytes() {
                    std::thread::sleep(Duration::from_millis(200));
                    if stream.write_all(&[b]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{address}")
}

async fn okx_app(base_url: String) -> TestApp {
    spawn_app_with(move |s| {
        s.exchange.provider = "okx".into();
        s.exchange.okx.base_url = base_url;
        s.exchange.allow_insecure_http = true;
        s.exchange.okx.api_key = "key".into();
        s.exchange.okx.secret_key = "secret".into();
        s.exchange.okx.passphrase = "passphrase".into();
        s.exchange.okx.timeout_ms = 1000;
    })
    .await
}

#[actix_web::test]
async fn a_slow_answer_body_is_cut_at_the_deadline_and_holds_nothing_behind_it() {
    let app = okx_app(dribbling_exchange()).await;
    let started = Instant::now();
    let (first, second) = futures_util::future::join(
        app.get("/api/v1/treasury/balance"),
        app.get("/api/v1/treasury/balance"),
    )
    .await;
    let took = started.elapsed();
    for res in [&first, &second] {
        assert_eq!(res.status, 502, "{}", res.text);
        assert_eq!(res.code(), "CEX_CONNECTION_FAILED");
    }
    // The deadline is 1 s; both answered well within twice that, not after the 40 s the body
    // takes.
    assert!(
        took < Duration::from_millis(2500),
        "the balance reads took {took:?}"
    );
    // And again: nothing was left waiting on the first calls.
    let started = Instant::now();
    let third = app.get("/api/v1/treasury/balance").await;
    assert_eq!(third.status, 502, "{}", third.text);
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}
