//! A real local HTTP receiver for webhook tests. It records every request and answers by path:
//! `/ok` 200, `/status/{code}` that code (`/status/301` redirects to `/ok`), `/hang` never in
//! time, `/hang-once` not the first time only, `/flaky` 500 until `heal()` is called.
//! `reset_url()` is a listener that drops every connection with a TCP reset.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    pub fn event_type(&self) -> String {
        self.json()["type"].as_str().unwrap_or("").to_owned()
    }

    /// Verifies the delivery with the `standardwebhooks` crate (an independent
    /// implementation of Standard Webhooks).
    pub fn verify(&self, secret: &str) -> Result<(), String> {
        let mut headers = http::HeaderMap::new();
        for (name, value) in &self.headers {
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                headers.append(n, v);
            }
        }
        standardwebhooks::Webhook::new(secret)
            .map_err(|e| e.to_string())?
            .verify(&self.body, &headers)
            .map_err(|e| e.to_string())
    }
}

#[derive(Clone, Default)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    healed: Arc<AtomicBool>,
    hung: Arc<AtomicBool>,
}

pub struct Receiver {
    pub base: String,
    shared: Shared,
    reset_port: u16,
}

async fn record(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let path = req.path().to_owned();
    let received = Received {
        path: path.clone(),
        headers: req
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: body.to_vec(),
        at: Instant::now(),
    };
    shared.received.lock().expect("lock").push(received);
    if path == "/ok" {
        return HttpResponse::Ok().body("thanks");
    }
    if path == "/hang-once" && !shared.hung.swap(true, Ordering::SeqCst) {
        actix_web::rt::time::sleep(Duration::from_secs(120)).await;
        return HttpResponse::Ok().finish();
    }
    if path == "/hang-once" {
        return HttpResponse::Ok().finish();
    }
    if path == "/hang" {
        actix_web::rt::time::sleep(Duration::from_secs(120)).await;
        return HttpResponse::Ok().finish();
    }
    if path == "/flaky" {
        return if shared.healed.load(Ordering::SeqCst) {
            HttpResponse::NoContent().finish()
        } else {
            HttpResponse::InternalServerError().body("not yet")
        };
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let code: u16 = code.parse().unwrap_or(500);
        let status = actix_web::http::StatusCode::from_u16(code)
            .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
        let mut res = HttpResponse::build(status);
        if (300..400).contains(&code) {
            res.insert_header(("Location", "/ok"));
        }
        return res.finish();
    }
    HttpResponse::NotFound().finish()
}

impl Receiver {
    pub async fn start() -> Receiver {
        let shared = Shared::default();
        let data = web::Data::new(shared.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        let port = listener.local_addr().expect("addr").port();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(16 << 20))
                .default_service(web::to(record))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        actix_web::rt::spawn(server);

        let reset = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind reset listener");
        let reset_port = reset.local_addr().expect("addr").port();
        actix_web::rt::spawn(async move {
            while let Ok((stream, _)) = reset.accept().await {
                let _ = stream.set_zero_linger();
                drop(stream);
            }
        });
        Receiver {
            base: format!("http://127.0.0.1:{port}"),
            shared,
            reset_port,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn reset_url(&self) -> String {
        format!("http://127.0.0.1:{}/reset", self.reset_port)
    }

    pub fn heal(&self) {
        self.shared.healed.store(true, Ordering::SeqCst);
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("lock").clone()
    }

    pub fn received_at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Waits until `done` holds for the requests to `path`, or panics after `seconds`.
    pub async fn wait_for(
        &self,
        path: &str,
        seconds: u64,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let got = self.received_at(path);
            if done(&got) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver at {path} got {} requests: {:?}",
                got.len(),
                got.iter().map(Received::event_type).collect::<Vec<_>>()
            );
            actix_web::rt::time::sleep(Duration::from_millis(25)).await;
        }
    }
}
