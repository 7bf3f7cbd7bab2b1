//! Tests that run the service as a process (`payroll serve`, killed with `kill -9`), and the
//! other processes tests talk to: free ports, children killed with their test, commands run to
//! their end.

use std::{
    net::TcpListener,
    ops::{Deref, DerefMut},
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use payroll::{config::Settings, http::auth};
use payroll_entities::{db::Db, sandbox_withdrawal};
use sea_orm::{EntityTrait, PaginatorTrait};
use serde_json::{Value, json};

use crate::helpers::{evm_address, fresh_pg_schema, new_key};

/// A child process, killed and reaped when dropped: a failed assertion leaves none running.
pub(crate) struct Process(pub(crate) Child);

impl Deref for Process {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// A `payroll serve` process and its base URL.
pub(crate) struct Server {
    pub(crate) child: Process,
    pub(crate) base: String,
}

pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) database_url: String,
    pub(crate) key: String,
    client: awc::Client,
    /// More `PAYROLL__…` variables for the server.
    env: Vec<(String, String)>,
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until something accepts connections on `port`.
pub(crate) async fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a command to its end off the test's thread; its output captured.
pub(crate) async fn output(mut command: Command) -> Output {
    actix_web::rt::task::spawn_blocking(move || command.output().expect("the command runs"))
        .await
        .expect("joined")
}

impl Setup {
    pub(crate) async fn new() -> Setup {
        let url = match std::env::var("PAYROLL_TEST_DATABASE_URL") {
            Ok(base) => Some(fresh_pg_schema(&base).await),
            Err(_) => None,
        };
        Setup::on_database(url).await
    }

    /// Servers of the database at `url` (a SQLite file in the setup's folder when `None`),
    /// with a key of every scope.
    pub(crate) async fn on_database(url: Option<String>) -> Setup {
        let mut setup = Setup::bare(url);
        let mut settings = Settings::defaults().expect("settings");
        settings.data.dir = setup.dir.path().to_path_buf();
        settings.database.url = payroll::config::Secret::new(setup.database_url.clone());
        setup.key = payroll::cli::admin::create_key(
            &settings,
            "crash-test",
            &auth::all_scope_names(),
            None,
        )
        .await
        .expect("key")
        .key
        .flatten()
        .expect("plaintext");
        setup
    }

    /// As [`Setup::on_database`], without a key: the database is left as it is (empty, say)
    /// until a server starts on it.
    pub(crate) fn bare(url: Option<String>) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut settings = Settings::defaults().expect("settings");
        settings.data.dir = dir.path().to_path_buf();
        if let Some(url) = url {
            settings.database.url = payroll::config::Secret::new(url);
        }
        let database_url = settings.database_url();
        Setup {
            dir,
            database_url,
            key: String::new(),
            client: awc::Client::builder()
                .timeout(Duration::from_secs(30))
                .finish(),
            env: Vec::new(),
        }
    }

    pub(crate) fn with_env(mut self, name: &str, value: &str) -> Setup {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    fn log_path(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("server-{n}.log"))
    }

    /// Starts `payroll serve` as a child process and waits until it answers.
    pub(crate) async fn start(&self, n: usize) -> Server {
        let server = self.spawn(n, &[]);
        self.wait_ready(&server, n).await;
        server
    }

    /// Starts `payroll serve` as a child process, with these environment variables besides
    /// the setup's, and answers at once.
    pub(crate) fn spawn(&self, n: usize, env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let log = std::fs::File::create(self.log_path(n)).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_payroll"))
            .arg("serve")
            .env("PAYROLL__SERVER__PORT", port.to_string())
            .env("PAYROLL__DATA__DIR", self.dir.path())
            .env("PAYROLL__DATABASE__URL", &self.database_url)
            .env("PAYROLL__AUTH__BOOTSTRAP_KEY", "false")
            .env("PAYROLL__LOG__LEVEL", "warn")
            .env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "150")
            .env("PAYROLL__EXCHANGE__BURST", "10")
            .env("PAYROLL__EXCHANGE__IN_FLIGHT_WINDOW", "32")
            .env("PAYROLL__EXCHANGE__RECONCILE_GRACE_MS", "500")
            .env("PAYROLL__EXCHANGE__SANDBOX__COMPLETION_DELAY_MS", "200")
            .env("PAYROLL__RUNS__POLL_INTERVAL_MS", "100")
            .env("PAYROLL__RUNS__LEASE_TTL_MS", "1500")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("server starts");
        Server {
            child: Process(child),
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Waits until server `n` answers `/readyz` 200.
    pub(crate) async fn wait_ready(&self, server: &Server, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(res) = self
                .client
                .get(format!("{}/readyz", server.base))
                .send()
                .await
                && res.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server {n} did not start: {}",
                self.log(n)
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log(&self, n: usize) -> String {
        std::fs::read_to_string(self.log_path(n)).unwrap_or_default()
    }

    /// Imports `count` employees paid on `network`, with emails `{prefix}{i}@example.com`
    /// and salaries of 100 + i cents.
    pub(crate) async fn import_employees(
        &self,
        server: &Server,
        prefix: &str,
        count: usize,
        network: &str,
    ) {
        let rows: Vec<Value> = (0..count)
            .map(|i| {
                let email = format!("{prefix}{i}@example.com");
                json!({"name": format!("{prefix} {i}"), "wallet_address": evm_address(&email),
                       "email": email, "salary_usd_cents": 100 + i as i64, "network": network})
            })
            .collect();
        self.call(server, "POST", "/employees/import", Some(json!(rows)))
            .await;
    }

    /// Creates the regular run of `month` (2026); returns its id and total.
    pub(crate) async fn create_run(&self, server: &Server, month: u32) -> (String, i64) {
        let run = self
            .call(
                server,
                "POST",
                "/payroll-runs",
                Some(json!({"period_start": format!("2026-{month:02}-01"),
                            "period_end": format!("2026-{month:02}-28")})),
            )
            .await;
        let id = run["data"]["id"].as_str().expect("run id").to_owned();
        let total = run["data"]["total_amount_usd_cents"]
            .as_i64()
            .expect("total");
        (id, total)
    }

    /// `POST /payroll-runs/{run_id}/{step}` (confirm, balance-check, execute, sync, …).
    pub(crate) async fn run_step(&self, server: &Server, run_id: &str, step: &str) -> Value {
        self.call(
            server,
            "POST",
            &format!("/payroll-runs/{run_id}/{step}"),
            None,
        )
        .await
    }

    /// Moves `cents` from the treasury wallet to the exchange account.
    pub(crate) async fn fund(&self, server: &Server, cents: i64) {
        self.call(
            server,
            "POST",
            "/treasury/transfers",
            Some(json!({"amount_usd_cents": cents})),
        )
        .await;
    }

    /// Like [`Setup::call`], but answers the status with the body instead of asserting success.
    pub(crate) async fn try_call(
        &self,
        server: &Server,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.try_call_as(&self.key, server, method, path, body)
            .await
    }

    /// [`Setup::try_call`] with another key (or an agent session's token).
    pub(crate) async fn try_call_as(
        &self,
        key: &str,
        server: &Server,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .client
            .request(method.clone(), format!("{}/api/v1{path}", server.base))
            .insert_header(("Authorization", format!("Bearer {key}")));
        if method != awc::http::Method::GET {
            req = req.insert_header(("Idempotency-Key", new_key()));
        }
        let mut res = match body {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        }
        .expect("request");
        let bytes = res.body().limit(64 << 20).await.expect("body");
        (
            res.status().as_u16(),
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    pub(crate) async fn call(
        &self,
        server: &Server,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, json) = self.try_call(server, method, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {json}\n--- server log:\n{}{}",
            self.log(1),
            self.log(2)
        );
        json
    }
}

pub(crate) async fn db(url: &str) -> Db {
    Db::connect(url, 2).await.expect("database")
}

pub(crate) async fn withdrawn(db: &Db) -> u64 {
    sandbox_withdrawal::Entity::find()
        .count(&db.conn)
        .await
        .expect("count")
}
