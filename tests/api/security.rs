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
