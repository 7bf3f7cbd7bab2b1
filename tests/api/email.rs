//! Payout emails over SMTP to a real server (Debian's `python3-aiosmtpd`): one message per
//! payout, and an SMTP outage delays mail but never a payout, nor doubles a message.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use sea_orm::EntityTrait;
use serde_json::json;

use crate::{
    helpers::{TestApp, spawn_app_with},
    instances::wait_completed,
    process::{Process, Server, Setup, free_port, wait_listening},
};

const PYTHON: &str = "/usr/bin/python3";

/// Whether Debian's aiosmtpd is installed. CI installs it; elsewhere its tests are skipped
/// with a notice.
fn aiosmtpd_available() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "python3-aiosmtpd is required in CI: apt-get install python3-aiosmtpd"
        );
        eprintln!("skipped: install python3-aiosmtpd (Debian) to run the SMTP tests");
    }
    ok
}

struct SmtpServer {
    _child: Process,
    log: std::path::PathBuf,
}

impl SmtpServer {
    /// `python3 -m aiosmtpd -n -l 127.0.0.1:PORT`: prints every message it receives.
    async fn start(port: u16, dir: &std::path::Path) -> SmtpServer {
        SmtpServer::start_as(port, dir, "smtp").await
    }

    /// As [`SmtpServer::start`], logging to `<name>-<port>.log` (a server started again on
    /// the same port keeps the first one's log).
    async fn start_as(port: u16, dir: &std::path::Path, name: &str) -> SmtpServer {
        let log = dir.join(format!("{name}-{port}.log"));
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(PYTHON)
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .env("PYTHONUNBUFFERED", "1")
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("aiosmtpd starts");
        let child = Process(child);
        wait_listening(port, "aiosmtpd").await;
        SmtpServer { _child: child, log }
    }

    fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The Message-IDs received, waiting until there are `count` of them.
    async fn wait_for(&self, count: usize, seconds: u64) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let ids: Vec<String> = self
                .received()
                .lines()
                .filter_map(|l| l.strip_prefix("Message-ID: ").map(str::to_owned))
                .collect();
            if ids.len() >= count || Instant::now() > deadline {
                return ids;
            }
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn pay_two(app: &TestApp) -> String {
    app.create_employee("Ada", "ada@example.com", 1000).await;
    app.create_employee("Grace", "grace@example.com", 2000)
        .await;
    app.fund(10_000).await;
    let res = app
        .post(
            "/api/v1/payroll-runs",
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31",
                   "label": "ACTION REQUIRED: our bank changed. Re-enter your wallet at evil.example"}),
        )
        .await;
    let run_id = res.data()["id"].as_str().expect("id").to_owned();
    app.act(&format!("/api/v1/payroll-runs/{run_id}/confirm"))
        .await;
    app.act(&format!("/api/v1/payroll-runs/{run_id}/balance-check"))
        .await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    run_id
}

#[actix_web::test]
async fn payout_emails_go_out_over_smtp() {
    if !aiosmtpd_available() {
        return;
    }
    let port = free_port();
    let app = spawn_app_with(|s| {
        s.email.transport = "smtp".into();
        s.email.smtp.port = port;
    })
    .await;
    let smtp = SmtpServer::start(port, &app.settings.data.dir).await;
    let run_id = pay_two(&app).await;
    let ids = smtp.wait_for(2, 20).await;
    assert_eq!(ids.len(), 2, "{}", smtp.received());
    let text = smtp.received();
    assert!(
        text.contains("To: Ada <ada@example.com>")
            || text.contains("To: \"Ada\" <ada@example.com>"),
        "{text}"
    );
    // No text a client wrote (the run's label) reaches a payee: only what the service computes
    // and the company's name (CONTRACT §11).
    assert!(!text.contains("ACTION REQUIRED"), "{text}");
    assert!(!text.contains("evil.example"), "{text}");
    assert!(text.contains("Payroll has started a payout"), "{text}");
    app.wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
}

#[actix_web::test]
async fn an_smtp_outage_delays_mail_but_never_a_payout() {
    if !aiosmtpd_available() {
        return;
    }
    let port = free_port();
    let app = spawn_app_with(|s| {
        s.email.transport = "smtp".into();
        s.email.smtp.port = port;
    })
    .await;
    // Nothing listens on the SMTP port yet: the run is paid all the same.
    let run_id = pay_two(&app).await;
    let done = app
        .wait_for_run(&run_id, 20, |r| r["status"] == "COMPLETED")
        .await;
    assert_eq!(done["payout_summary"]["completed"], 2);
    let db = app.db().await;
    let pending = payroll_entities::email_outbox::Entity::find()
        .all(&db.conn)
        .await
        .expect("outbox");
    assert_eq!(pending.len(), 2);
    // A server that is away is no fault of the messages: no attempt is counted, the error
    // is noted.
    assert!(
        pending.iter().any(|e| e.last_error.is_some()),
        "{pending:?}"
    );
    assert!(
        pending
            .iter()
            .all(|e| e.status == payroll_entities::EmailStatus::Pending && e.attempts == 0),
        "{pending:?}"
    );

    // The server comes back: each message is delivered, once.
    let smtp = SmtpServer::start(port, &app.settings.data.dir).await;
    let ids = smtp.wait_for(2, 30).await;
    assert_eq!(ids.len(), 2, "{}", smtp.received());
    actix_web::rt::time::sleep(Duration::from_millis(2500)).await;
    let ids = smtp.wait_for(3, 0).await;
    assert_eq!(ids.len(), 2, "no message twice: {ids:?}");
    assert_ne!(ids[0], ids[1]);
}

/// The SMTP server killed while runs pay and brought back: every email is delivered after it
/// returns (none given up: a server that is away counts no attempt, where two failed attempts
/// would fail a message here), each once (a repeat only after an ambiguous failure, under its
/// Message-ID); meanwhile `/metrics` and `/status` show the backlog and the failing transport.
/// The service runs as a process of its own, so its metrics are its own.
#[actix_web::test]
async fn an_smtp_server_killed_and_restarted_delivers_every_email_once() {
    if !aiosmtpd_available() {
        return;
    }
    let port = free_port();
    let port_text = port.to_string();
    let setup = Setup::on_database(None)
        .await
        .with_env("PAYROLL__EMAIL__TRANSPORT", "smtp")
        .with_env("PAYROLL__EMAIL__SMTP__PORT", &port_text)
        .with_env("PAYROLL__EMAIL__MAX_ATTEMPTS", "2");
    let server = setup.start(1).await;
    let dir = setup.dir.path().to_path_buf();
    let before = SmtpServer::start_as(port, &dir, "before").await;
    setup.import_employees(&server, "early", 3, "BASE").await;
    let first = pay(&setup, &server, 3).await;
    assert_eq!(
        before.wait_for(3, 20).await.len(),
        3,
        "{}",
        before.received()
    );
    drop(before);
    // Everyone is paid again in April: 23 payouts, 23 emails, while the server is away.
    setup.import_employees(&server, "late", 20, "BASE").await;
    let second = pay(&setup, &server, 4).await;
    for run_id in [&first, &second] {
        wait_completed(&setup, &server, run_id, 30).await;
    }
    // Long enough for a mailer counting each try to give every message up (1 s, then 2 s).
    actix_web::rt::time::sleep(Duration::from_secs(5)).await;
    let metrics = scrape(&server).await;
    let figure = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    assert_eq!(
        figure("payroll_email_outbox_pending"),
        Some(23.0),
        "{metrics}"
    );
    assert_eq!(figure("payroll_email_transport_up"), Some(0.0), "{metrics}");
    let status = status_page(&setup, &server).await;
    assert!(status.contains("id=\"health-email\""), "{status}");
    assert!(status.contains("failing since"), "{status}");
    assert!(
        status.contains("<th>Emails waiting</th><td>23</td>"),
        "{status}"
    );
    let db = crate::process::db(&setup.database_url).await;
    let outbox = payroll_entities::email_outbox::Entity::find()
        .all(&db.conn)
        .await
        .expect("outbox");
    assert!(
        outbox
            .iter()
            .all(|e| e.status != payroll_entities::EmailStatus::Failed),
        "none given up: {outbox:?}"
    );

    let after = SmtpServer::start_as(port, &dir, "after").await;
    let ids = after.wait_for(23, 30).await;
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 23, "{}", after.received());
    assert!(
        ids.len() <= 24,
        "repeated beyond an ambiguous failure: {ids:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !scrape(&server)
        .await
        .contains("payroll_email_transport_up 1")
    {
        assert!(Instant::now() < deadline, "the transport is not up again");
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    let sent = payroll_entities::email_outbox::Entity::find()
        .all(&db.conn)
        .await
        .expect("outbox");
    assert!(
        sent.iter()
            .all(|e| e.status == payroll_entities::EmailStatus::Sent),
        "{sent:?}"
    );
}

/// Creates, confirms, funds, deposits and executes the regular run of `month`.
async fn pay(setup: &Setup, server: &Server, month: u32) -> String {
    let (run_id, total) = setup.create_run(server, month).await;
    setup.run_step(server, &run_id, "confirm").await;
    setup.fund(server, total).await;
    setup.run_step(server, &run_id, "balance-check").await;
    setup.run_step(server, &run_id, "execute").await;
    run_id
}

async fn scrape(server: &Server) -> String {
    let mut res = awc::Client::default()
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("metrics");
    String::from_utf8_lossy(&res.body().limit(8 << 20).await.expect("body")).into_owned()
}

async fn status_page(setup: &Setup, server: &Server) -> String {
    let mut res = awc::Client::default()
        .get(format!("{}/status", server.base))
        .insert_header(("Authorization", format!("Bearer {}", setup.key)))
        .send()
        .await
        .expect("status");
    assert_eq!(res.status(), 200);
    String::from_utf8_lossy(&res.body().limit(8 << 20).await.expect("body")).into_owned()
}
