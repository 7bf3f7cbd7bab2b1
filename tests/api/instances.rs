//! Shutdown and several instances, with the real binary as child processes: SIGTERM mid-run
//! stops cleanly and loses nothing; two instances on one PostgreSQL database share runs, the
//! withdrawal rate limit and webhook deliveries, and one killed mid-execution leaves every
//! payout paid exactly once.

use std::{
    collections::{HashMap, HashSet},
    process::Command,
    time::{Duration, Instant},
};

use payroll_entities::{
    EmailStatus, db::Db, email_outbox, event, payout, run_lease, sandbox_withdrawal,
};
use sea_orm::{EntityTrait, PaginatorTrait};
use serde_json::{Value, json};

use crate::{
    helpers::assert_within_rate_limit,
    process::{Server, Setup, db, withdrawn},
    receiver::Receiver,
};

/// Imports `employees` employees (each regular run pays them all).
async fn import(setup: &Setup, server: &Server, employees: usize) {
    setup
        .import_employees(server, "inst", employees, "BASE")
        .await;
}

/// Creates the run of `month` on `creator`, confirms it on `confirmer`; returns id and total.
pub(crate) async fn confirmed_run(
    setup: &Setup,
    creator: &Server,
    confirmer: &Server,
    month: u32,
) -> (String, i64) {
    let run = setup.create_run(creator, month).await;
    setup.run_step(confirmer, &run.0, "confirm").await;
    run
}

pub(crate) async fn deposit(setup: &Setup, server: &Server, run_id: &str) {
    let check = setup.run_step(server, run_id, "balance-check").await;
    assert_eq!(check["data"]["run_status"], "DEPOSITED", "{check}");
}

pub(crate) async fn wait_completed(setup: &Setup, server: &Server, run_id: &str, seconds: u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let run = setup
            .call(server, "GET", &format!("/payroll-runs/{run_id}"), None)
            .await;
        if run["data"]["status"] == "COMPLETED" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} not completed: {run}\n--- logs:\n{}\n{}",
            setup.log(1),
            setup.log(2)
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every payout withdrawn exactly once, under its first attempt's id, and money conserved.
pub(crate) async fn assert_paid_exactly_once(database: &Db, total: i64) {
    let withdrawals = sandbox_withdrawal::Entity::find()
        .all(&database.conn)
        .await
        .expect("withdrawals");
    let payouts = payout::Entity::find()
        .all(&database.conn)
        .await
        .expect("payouts");
    assert_eq!(
        withdrawals.len(),
        payouts.len(),
        "one withdrawal per payout"
    );
    let mut by_client: HashMap<&str, usize> = HashMap::new();
    for w in &withdrawals {
        *by_client.entry(w.client_id.as_str()).or_default() += 1;
    }
    for p in &payouts {
        assert_eq!(p.status.as_str(), "COMPLETED", "payout {}", p.id);
        assert_eq!(p.attempt, 1);
        let id = format!("{}-1", p.id);
        assert_eq!(
            by_client.get(id.as_str()),
            Some(&1),
            "payout {} withdrawn",
            p.id
        );
    }
    let paid: i64 = withdrawals.iter().map(|w| w.amount_usd_cents).sum();
    assert_eq!(paid, total, "money conserved");
}

/// Every row of every table of the server's database as text, and on SQLite the bytes of its
/// files (the database, its write-ahead log).
async fn database_dump(setup: &Setup) -> String {
    use sea_orm::{ConnectionTrait, Statement};
    let database = db(&setup.database_url).await;
    let backend = database.backend();
    let mut dump = String::new();
    if backend == sea_orm::DatabaseBackend::Postgres {
        let tables = database
            .conn
            .query_all_raw(Statement::from_string(
                backend,
                "SELECT tablename::text AS t FROM pg_tables WHERE schemaname = current_schema()",
            ))
            .await
            .expect("tables");
        for table in tables {
            let name: String = table.try_get("", "t").expect("name");
            let rows = database
                .conn
                .query_all_raw(Statement::from_string(
                    backend,
                    format!("SELECT r::text AS row FROM \"{name}\" r"),
                ))
                .await
                .expect("rows");
            for row in rows {
                dump.push_str(&row.try_get::<String>("", "row").expect("row"));
                dump.push('\n');
            }
        }
    } else {
        for entry in std::fs::read_dir(setup.dir.path()).expect("data dir") {
            let path = entry.expect("entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("payroll.db") {
                dump.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&path).expect("read"),
                ));
            }
        }
    }
    database.conn.close_by_ref().await.ok();
    dump
}

async fn instance_id(server: &Server) -> String {
    let mut res = awc::Client::default()
        .get(format!("{}/readyz", server.base))
        .send()
        .await
        .expect("readyz");
    let body: Value = res.json().await.expect("json");
    body["instance"].as_str().expect("instance id").to_owned()
}

fn sigterm(server: &Server) {
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// SIGTERM while a run pays out: the process exits 0 within a bounded time, every withdrawal
/// it committed was sent (those still waiting for a token were handed back), its leases are
/// given up, and after a restart the run completes with each payout paid exactly once.
#[actix_web::test]
async fn sigterm_mid_run_stops_cleanly_and_loses_nothing() {
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "40")
        .with_env("PAYROLL__EXCHANGE__BURST", "4")
        .with_env("PAYROLL__LOG__LEVEL", "info");
    let mut first = setup.start(1).await;
    import(&setup, &first, 150).await;
    let run = confirmed_run(&setup, &first, &first, 3).await;
    setup.fund(&first, run.1).await;
    deposit(&setup, &first, &run.0).await;
    setup.run_step(&first, &run.0, "execute").await;

    let database = db(&setup.database_url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while withdrawn(&database).await < 20 {
        assert!(Instant::now() < deadline, "withdrawals did not start");
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = Instant::now();
    sigterm(&first);
    // Until it exits, a request is answered as before or, once it stops, refused with a 503
    // that says so and closes the connection.
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(2))
        .finish();
    let status = loop {
        if let Some(status) = first.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(45),
            "no exit after SIGTERM: {}",
            setup.log(1)
        );
        if let Ok(mut res) = client.get(format!("{}/healthz", first.base)).send().await {
            if res.status() == 503 {
                assert_eq!(res.headers().get("retry-after").expect("Retry-After"), "1");
                assert_eq!(
                    res.headers().get("connection").expect("Connection"),
                    "close"
                );
                // The process may exit between the head and the body; a body read is checked.
                if let Ok(body) = res.json::<Value>().await {
                    assert_eq!(body["error"]["code"], "SERVICE_UNAVAILABLE", "{body}");
                    assert!(
                        body["error"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("shutting down")),
                        "{body}"
                    );
                }
            } else {
                assert_eq!(res.status(), 200, "{:?}", res.body().await);
            }
        }
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}\n{}", setup.log(1));
    let log = setup.log(1);
    assert!(log.contains("stopped"), "{log}");
    let at_stop = withdrawn(&database).await;
    assert!(at_stop < 150, "stopped mid-run ({at_stop} withdrawals)");

    // Nothing half-handed-over: a payout with a committed client id was sent.
    let sent: HashSet<String> = sandbox_withdrawal::Entity::find()
        .all(&database.conn)
        .await
        .expect("withdrawals")
        .into_iter()
        .map(|w| w.client_id)
        .collect();
    let payouts = payout::Entity::find()
        .all(&database.conn)
        .await
        .expect("payouts");
    for p in &payouts {
        if let Some(id) = &p.client_withdrawal_id {
            assert!(
                sent.contains(id),
                "{id} committed but never sent nor handed back\n{}",
                setup.log(1)
            );
        }
    }
    assert_eq!(
        run_lease::Entity::find()
            .count(&database.conn)
            .await
            .expect("leases"),
        0,
        "leases given up"
    );

    let second = setup.start(2).await;
    wait_completed(&setup, &second, &run.0, 60).await;
    assert_paid_exactly_once(&database, run.1).await;
    drop(second);
}

/// A second SIGTERM cuts the shutdown short: the first waits for a request in flight (its body
/// still arriving), the second stops the workers at once, and the process exits 0.
#[actix_web::test]
async fn a_second_sigterm_stops_at_once() {
    use std::io::Write as _;
    let setup = Setup::new().await.with_env("PAYROLL__LOG__LEVEL", "info");
    let mut server = setup.start(1).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut slow = std::net::TcpStream::connect(&address).expect("connect");
    write!(
        slow,
        "POST /api/v1/employees HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Idempotency-Key: 6f1d3c2a-8b7e-4f4e-9a51-2d0c7b9e4a10\r\nContent-Type: application/json\r\n\
         Content-Length: 200\r\n\r\n{{\"name\": ",
        setup.key
    )
    .expect("head sent");
    slow.flush().expect("flush");
    // The head is read and the request counted in flight well within this.
    actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    sigterm(&server);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !setup.log(1).contains("new requests are refused") {
        assert!(Instant::now() < deadline, "no stop: {}", setup.log(1));
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    actix_web::rt::time::sleep(Duration::from_secs(1)).await;
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "the first SIGTERM waits for the request in flight: {}",
        setup.log(1)
    );
    let asked = Instant::now();
    sigterm(&server);
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "no exit after the second SIGTERM: {}",
            setup.log(1)
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}\n{}", setup.log(1));
    let log = setup.log(1);
    assert!(log.contains("a second stop signal"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    drop(slow);
}

/// Two instances on one PostgreSQL database: runs created, confirmed and executed through
/// both; one instance is killed (`kill -9`) while it pays runs of its own. The other takes
/// them over once their leases expire; every payout is paid exactly once, the withdrawal rate
/// limit held across both, every event reached the webhook receiver and every payee's email
/// was sent.
#[actix_web::test]
async fn two_instances_share_the_work_and_survive_a_kill() {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_err() {
        eprintln!(
            "two_instances_share_the_work_and_survive_a_kill: several instances need PostgreSQL; \
             set PAYROLL_TEST_DATABASE_URL (the CI's PostgreSQL suite runs it)"
        );
        return;
    }
    let (rate, burst) = (20.0, 4.0);
    let receiver = Receiver::start().await;
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__EXCHANGE__WITHDRAWALS_PER_SECOND", "20")
        .with_env("PAYROLL__EXCHANGE__BURST", "4")
        .with_env("PAYROLL__EXCHANGE__IN_FLIGHT_WINDOW", "8")
        .with_env("PAYROLL__WEBHOOKS__ALLOW_HTTP", "true")
        .with_env("PAYROLL__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true")
        .with_env("PAYROLL__WEBHOOKS__TIMEOUT_MS", "1000");
    let mut a = setup.start(1).await;
    let b = setup.start(2).await;
    let a_id = instance_id(&a).await;
    let b_id = instance_id(&b).await;
    assert_ne!(a_id, b_id);
    setup
        .call(
            &b,
            "POST",
            "/webhooks",
            Some(json!({"url": receiver.url("/ok"), "events": ["*"]})),
        )
        .await;
    import(&setup, &a, 40).await;
    // Funded twice over: a run executed while others pay out counts their withdrawals in
    // flight twice for a moment (the exchange took them, their payouts are still PENDING).
    setup.fund(&b, 2 * 4 * (100..140).sum::<i64>()).await;
    // Each run is created on one instance, then confirmed, deposited and executed on the
    // other, which takes its lease and pays it.
    let mut runs = Vec::new();
    for (month, (creator, worker)) in [(3, (&a, &b)), (4, (&b, &a)), (5, (&a, &b)), (6, (&b, &a))] {
        let run = confirmed_run(&setup, creator, worker, month).await;
        deposit(&setup, worker, &run.0).await;
        setup.run_step(worker, &run.0, "execute").await;
        runs.push(run);
    }

    let database = db(&setup.database_url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leases = run_lease::Entity::find()
            .all(&database.conn)
            .await
            .expect("leases");
        let owners: HashSet<&str> = leases.iter().map(|l| l.owner.as_str()).collect();
        if owners.contains(a_id.as_str())
            && owners.contains(b_id.as_str())
            && withdrawn(&database).await >= 20
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both instances did not start paying: {leases:?}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    a.child.kill().expect("kill -9");
    a.child.wait().ok();
    let at_kill = withdrawn(&database).await;
    assert!(
        at_kill < 160,
        "killed mid-execution ({at_kill} withdrawals)"
    );

    for (run_id, _) in &runs {
        wait_completed(&setup, &b, run_id, 90).await;
    }
    let total: i64 = runs.iter().map(|(_, t)| t).sum();
    assert_paid_exactly_once(&database, total).await;

    // The rate limit held across both instances: in any window [t_i, t_j] at most
    // burst + rate·(t_j − t_i) withdrawals. The sandbox stamps each when its transaction runs,
    // a little after its token was taken, and two busy processes widen that gap; without the
    // shared limit the two would send at twice the rate, far beyond this bound.
    let mut times: Vec<i64> = sandbox_withdrawal::Entity::find()
        .all(&database.conn)
        .await
        .expect("withdrawals")
        .iter()
        .map(|w| w.created_at.timestamp_millis())
        .collect();
    times.sort_unstable();
    assert_within_rate_limit(&times, rate, burst, 0.25);

    // Every event reached the receiver, each under its own webhook-id.
    let events: HashSet<String> = event::Entity::find()
        .all(&database.conn)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(events.len() > 160, "{} events", events.len());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delivered: HashSet<String> = receiver
            .received_at("/ok")
            .iter()
            .filter_map(|r| r.header("webhook-id").map(str::to_owned))
            .collect();
        let missing = events.difference(&delivered).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} events not delivered",
            events.len()
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }

    // And every payee's email went out.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let emails = email_outbox::Entity::find()
            .all(&database.conn)
            .await
            .expect("emails");
        let sent = emails
            .iter()
            .filter(|e| e.status == EmailStatus::Sent)
            .count();
        if emails.len() == 160 && sent == 160 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{sent} of {} emails sent",
            emails.len()
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    drop(b);
}

/// A whole run with a webhook, a second API key and a secret rotation, logged at debug level
/// in JSON: the log names requests and runs, and holds no secret.
#[actix_web::test]
async fn the_log_of_a_full_run_holds_no_secret() {
    let receiver = Receiver::start().await;
    let setup = Setup::new()
        .await
        .with_env("PAYROLL__LOG__LEVEL", "debug")
        .with_env("PAYROLL__LOG__FORMAT", "json")
        .with_env("PAYROLL__WEBHOOKS__ALLOW_HTTP", "true")
        .with_env("PAYROLL__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true");
    let server = setup.start(1).await;
    let created = setup
        .call(
            &server,
            "POST",
            "/webhooks",
            Some(json!({"url": receiver.url("/ok"), "events": ["*"]})),
        )
        .await;
    let webhook_id = created["data"]["id"].as_str().expect("id").to_owned();
    let mut secrets = vec![
        created["data"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    ];
    let second = setup
        .call(
            &server,
            "POST",
            "/api-keys",
            Some(json!({"name": "reader", "scopes": ["payroll:read"]})),
        )
        .await;
    let second_key = second["data"]["key"].as_str().expect("key").to_owned();
    let res = awc::Client::default()
        .get(format!("{}/api/v1/payroll-runs", server.base))
        .insert_header(("Authorization", format!("Bearer {second_key}")))
        .send()
        .await
        .expect("request");
    assert_eq!(res.status().as_u16(), 200);

    import(&setup, &server, 5).await;
    let run = confirmed_run(&setup, &server, &server, 3).await;
    setup.fund(&server, run.1).await;
    deposit(&setup, &server, &run.0).await;
    setup.run_step(&server, &run.0, "execute").await;
    wait_completed(&setup, &server, &run.0, 30).await;
    let rotated = setup
        .call(
            &server,
            "POST",
            &format!("/webhooks/{webhook_id}/rotate-secret"),
            None,
        )
        .await;
    secrets.push(
        rotated["data"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    );
    setup
        .call(
            &server,
            "POST",
            &format!("/webhooks/{webhook_id}/test"),
            None,
        )
        .await;
    receiver
        .wait_for("/ok", 30, |r| {
            r.iter().any(|d| d.event_type() == "payroll.run.completed")
                && r.iter().any(|d| d.event_type() == "webhook.test")
        })
        .await;
    // What an operator sees: the metrics and the status page.
    let client = awc::Client::default();
    let mut shown = String::new();
    for (path, key) in [("/metrics", None), ("/status", Some(&setup.key))] {
        let mut req = client.get(format!("{}{path}", server.base));
        if let Some(key) = key {
            req = req.insert_header(("Authorization", format!("Bearer {key}")));
        }
        let body = req
            .send()
            .await
            .expect("request")
            .body()
            .limit(16 << 20)
            .await
            .expect("body");
        shown.push_str(&String::from_utf8_lossy(&body));
    }
    drop(server);
    // Everything at rest: every row of every table (audit entries, idempotency records,
    // webhook endpoints and deliveries, keys, …) and, on SQLite, the database files themselves.
    let at_rest = database_dump(&setup).await;

    let log = setup.log(1);
    let pepper = std::fs::read_to_string(setup.dir.path().join("key_pepper")).expect("pepper");
    let mut forbidden = vec![setup.key.clone(), second_key, pepper.trim().to_owned()];
    for secret in &secrets {
        forbidden.push(secret.clone());
        forbidden.push(secret.trim_start_matches("whsec_").to_owned());
    }
    assert!(at_rest.contains(&webhook_id), "the dump holds the data");
    for secret in &forbidden {
        assert!(secret.len() >= 16, "a real secret: {secret}");
        assert!(!log.contains(secret.as_str()), "a secret reached the log");
        assert!(
            !at_rest.contains(secret.as_str()),
            "a secret is stored in plain text"
        );
        assert!(
            !shown.contains(secret.as_str()),
            "a secret is shown on /metrics or /status"
        );
    }
    // The log is JSON lines whose spans name the request and the run.
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(lines.len() > 20, "{log}");
    let has = |field: &str, value: &str| {
        lines.iter().any(|l| {
            l["spans"]
                .as_array()
                .is_some_and(|spans| spans.iter().any(|s| s[field] == value))
        })
    };
    assert!(has("run_id", &run.0), "no line in the run's span");
    let request_id = lines
        .iter()
        .find_map(|l| {
            l["spans"]
                .as_array()?
                .iter()
                .find_map(|s| s["request_id"].as_str())
        })
        .expect("a line in a request's span");
    assert!(request_id.starts_with("req_"), "{request_id}");
    assert!(
        lines.iter().any(|l| l["payout_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("pay_"))),
        "payout changes are logged at debug with their payout id"
    );
}

/// The first start prints the bootstrap key without migration logging around it: the
/// migrations are told in one `info` line with their count.
#[actix_web::test]
async fn the_first_start_tells_its_migrations_in_one_line() {
    let setup = Setup::bare(None);
    let server = setup.spawn(
        1,
        &[
            ("PAYROLL__AUTH__BOOTSTRAP_KEY", "true"),
            ("PAYROLL__LOG__LEVEL", "info"),
        ],
    );
    setup.wait_ready(&server, 1).await;
    let log = setup.log(1);
    assert!(log.contains("Created the bootstrap API key"), "{log}");
    assert!(!log.contains("sea_orm_migration"), "{log}");
    assert_eq!(
        log.matches("database migrations applied").count(),
        1,
        "{log}"
    );
    let before_key = &log[..log.find("Created the bootstrap API key").expect("key")];
    assert!(before_key.lines().count() <= 3, "{log}");
}
