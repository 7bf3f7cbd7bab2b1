//! Spawns the real application on 127.0.0.1:0 against a fresh database: a SQLite file in a
//! temporary folder, or, when `PAYROLL_TEST_DATABASE_URL` is set, a fresh schema of that
//! PostgreSQL database.

use std::time::Duration;

use awc::http::StatusCode;
use payroll::{config::Settings, http::auth, startup::Application};
use serde_json::{Value, json};

pub struct TestApp {
    pub address: String,
    /// A key with every scope.
    pub key: String,
    pub key_id: String,
    pub settings: Settings,
    pub client: awc::Client,
    _dir: tempfile::TempDir,
}

/// One answer, its body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: awc::http::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The error code of an error answer.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    pub fn data(&self) -> &Value {
        &self.json["data"]
    }

    /// The `field`s of `details.validation_errors`.
    pub fn invalid_fields(&self) -> Vec<String> {
        self.json["error"]["details"]["validation_errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e["field"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Default settings for a test server; `adjust` changes them before start.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = Settings::defaults().expect("default settings");
    settings.server.port = 0;
    settings.data.dir = dir.path().to_path_buf();
    settings.auth.bootstrap_key = false;
    settings.audit.flush_interval_ms = 50;
    settings.log.level = "warn".into();
    settings.database.max_connections = 5;
    // Quick settlement and polling; the funds watch only where a test turns it on.
    settings.exchange.withdrawals_per_second = 0;
    settings.exchange.sandbox.completion_delay_ms = 100;
    settings.runs.poll_interval_ms = 50;
    settings.runs.funds_watch_interval_ms = 3_600_000;
    if let Ok(base) = std::env::var("PAYROLL_TEST_DATABASE_URL") {
        settings.database.url = payroll::config::Secret::new(fresh_pg_schema(&base).await);
    }
    adjust(&mut settings);
    if std::env::var("TEST_LOG").is_ok() {
        payroll::telemetry::init(&settings.log);
    }
    let scopes = auth::all_scope_names();
    let admin = payroll::cli::admin::create_key(&settings, "test-admin", &scopes, None)
        .await
        .expect("admin key");
    let app = Application::build(settings.clone())
        .await
        .expect("app builds");
    let port = app.port();
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        key: admin.key.flatten().expect("plaintext"),
        key_id: admin.id,
        settings,
        client: awc::Client::builder()
            .timeout(Duration::from_secs(60))
            .finish(),
        _dir: dir,
    }
}

/// A new schema in the test database, and a URL whose connections use it.
pub async fn fresh_pg_schema(base: &str) -> String {
    use sea_orm::{ConnectionTrait, Database};
    let schema = format!("t_{}", ulid::Ulid::new().to_string().to_lowercase());
    let conn = Database::connect(base).await.expect("PostgreSQL reachable");
    conn.execute_unprepared(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create schema");
    conn.close().await.ok();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

impl TestApp {
    /// A connection of the test's own to the app's database.
    pub async fn db(&self) -> payroll_entities::db::Db {
        payroll_entities::db::Db::connect(&self.settings.database_url(), 2)
            .await
            .expect("database")
    }

    /// Moves cents from the treasury wallet to the exchange account.
    pub async fn fund(&self, cents: i64) {
        let res = self
            .post(
                "/api/v1/treasury/transfers",
                json!({"amount_usd_cents": cents}),
            )
            .await;
        assert_eq!(res.status, 201, "{}", res.text);
    }

    /// A POST with a fresh key and no body.
    pub async fn act(&self, path: &str) -> Resp {
        self.bodiless("POST", path).await
    }

    /// A write (`method`) with a fresh key and no body.
    pub async fn bodiless(&self, method: &str, path: &str) -> Resp {
        self.send(method, path, Some(&self.key), Some(&new_key()), None, &[])
            .await
    }

    /// Syncs the run until `done` holds for it, or panics after `seconds`.
    /// Creates a run from `body`; returns its id.
    pub async fn create_run(&self, body: Value) -> String {
        let res = self.post("/api/v1/payroll-runs", body).await;
        assert_eq!(res.status, 201, "{}", res.text);
        res.data()["id"].as_str().expect("run id").to_owned()
    }

    /// Creates a run from `body` and confirms it; returns its id.
    pub async fn confirmed_run(&self, body: Value) -> String {
        let run_id = self.create_run(body).await;
        let res = self
            .act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
        assert_eq!(res.data()["status"], "CONFIRMED");
        run_id
    }

    /// Creates, confirms and balance-checks a run the exchange already covers; returns its id.
    pub async fn deposited_run(&self, body: Value) -> String {
        let run_id = self.confirmed_run(body).await;
        let res = self
            .act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
            .await;
        assert_eq!(res.data()["run_status"], "DEPOSITED", "{}", res.text);
        run_id
    }

    pub async fn wait_for_run(
        &self,
        run_id: &str,
        seconds: u64,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            let res = self
                .act(&format!("/api/v1/payroll-runs/{run_id}/sync"))
                .await;
            assert_eq!(res.status, 200, "{}", res.text);
            if done(res.data()) {
                return res.data().clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "run did not get there: {}",
                res.text
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    /// Sends a request; `key` None sends no Authorization header.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        idempotency_key: Option<&str>,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let has_content_type = headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
        // A kept-alive connection the server closed just as it was taken fails to connect
        // before anything is sent: that one is tried again on a new connection.
        let mut attempt = 0;
        let mut res = loop {
            attempt += 1;
            let mut req = self.client.request(method.clone(), self.url(path));
            if let Some(key) = key {
                req = req.insert_header(("Authorization", format!("Bearer {key}")));
            }
            if let Some(idem) = idempotency_key {
                req = req.insert_header(("Idempotency-Key", idem.to_owned()));
            }
            for (name, value) in headers {
                req = req.insert_header((*name, *value));
            }
            let sent = match &body {
                Some(body) => {
                    if !has_content_type {
                        req = req.insert_header(("Content-Type", "application/json"));
                    }
                    req.send_body(body.clone()).await
                }
                None => req.send().await,
            };
            match sent {
                Err(awc::error::SendRequestError::Connect(_)) if attempt < 3 => continue,
                sent => break sent.expect("request sent"),
            }
        };
        let bytes = res
            .body()
            .limit(512 * 1024 * 1024)
            .await
            .expect("body read");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Resp {
            status: res.status(),
            headers: res.headers().clone(),
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, Some(&self.key), None, None, &[])
            .await
    }

    pub async fn get_as(&self, key: &str, path: &str) -> Resp {
        self.send("GET", path, Some(key), None, None, &[]).await
    }

    /// A write with a fresh Idempotency-Key.
    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.write_as(&self.key, "POST", path, body).await
    }

    /// `POST /employees/import` of a CSV document.
    pub async fn import_csv(&self, csv: impl Into<Vec<u8>>) -> Resp {
        self.send(
            "POST",
            "/api/v1/employees/import",
            Some(&self.key),
            Some(&new_key()),
            Some(csv.into()),
            &[("Content-Type", "text/csv")],
        )
        .await
    }

    pub async fn write_as(&self, key: &str, method: &str, path: &str, body: Value) -> Resp {
        let bytes = serde_json::to_vec(&body).expect("json");
        self.send(method, path, Some(key), Some(&new_key()), Some(bytes), &[])
            .await
    }

    /// A new key with exactly these scopes.
    pub async fn key_with(&self, scopes: &[&str]) -> (String, String) {
        let res = self
            .post(
                "/api/v1/api-keys",
                json!({"name": "scoped", "scopes": scopes}),
            )
            .await;
        assert_eq!(res.status, 201, "{}", res.text);
        (
            res.data()["key"].as_str().expect("plaintext").to_owned(),
            res.data()["id"].as_str().expect("id").to_owned(),
        )
    }

    pub async fn create_employee(&self, name: &str, email: &str, salary: i64) -> Value {
        let res = self
            .post(
                "/api/v1/employees",
                json!({
                    "name": name,
                    "email": email,
                    "salary_usd_cents": salary,
                    "network": "BASE",
                    "wallet_address": evm_address(email),
                }),
            )
            .await;
        assert_eq!(res.status, 201, "{}", res.text);
        res.data().clone()
    }
}

/// A valid lower-case EVM address derived from a seed.
pub fn evm_address(seed: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut out = String::from("0x");
    let mut i = 0u64;
    while out.len() < 42 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (seed, i).hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
        i += 1;
    }
    out.truncate(42);
    out
}

/// In any window [t_i, t_j] of these send times (milliseconds, sorted) at most
/// burst + rate·(t_j − t_i) withdrawals. The exchange stamps each when its transaction runs, up
/// to `stamp_delay` seconds after its token was taken.
pub fn assert_within_rate_limit(times: &[i64], rate: f64, burst: f64, stamp_delay: f64) {
    for i in 0..times.len() {
        for j in i..times.len() {
            let seconds = (times[j] - times[i]) as f64 / 1000.0;
            let count = (j - i + 1) as f64;
            assert!(
                count <= burst + rate * (seconds + stamp_delay),
                "{count} withdrawals in {seconds}s (rate {rate}/s, burst {burst})"
            );
        }
    }
}
