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
    process::{Process, free_port, wait_listening},
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
        let log = dir.join(format!("smtp-{port}.log"));
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
            json!({"period_start": "2026-03-01", "period_end": "2026-03-31", "label": "March"}),
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
    assert!(text.contains("Run:      March"), "{text}");
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
    assert!(
        pending
            .iter()
            .all(|e| e.status == payroll_entities::EmailStatus::Pending
                && e.attempts >= 1
                && e.last_error.is_some())
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
