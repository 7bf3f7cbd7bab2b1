//! `payroll mcp` driven by the official Python MCP SDK (`tests/mcp/client.py`) against a
//! spawned server: the tools listed for every scope and for `payroll:read` alone, a run paid
//! through the tools, errors as tool errors with the API's envelope, an unreachable server.
//!
//! The interpreter is `PAYROLL_TEST_PYTHON` (default `~/.cache/payroll-venv/bin/python`) with
//! the `mcp` package. Without it the test is skipped with a NOTICE, unless
//! `PAYROLL_REQUIRE_MCP=1`, where it fails.

use std::{path::PathBuf, process::Command};

use crate::{helpers::spawn_app, process::output};

/// The Python interpreter with the MCP SDK, if there is one.
fn python() -> Option<PathBuf> {
    let path = std::env::var_os("PAYROLL_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/payroll-venv/bin/python"))
        })?;
    let has_sdk = Command::new(&path)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|out| out.status.success());
    if has_sdk {
        return Some(path);
    }
    assert!(
        std::env::var("PAYROLL_REQUIRE_MCP").as_deref() != Ok("1"),
        "PAYROLL_REQUIRE_MCP=1 but {} is missing or lacks the mcp package \
         (pip install mcp==2.3.0)",
        path.display()
    );
    eprintln!(
        "NOTICE: {} is missing or lacks the mcp package; the MCP test is skipped \
         (set PAYROLL_TEST_PYTHON)",
        path.display()
    );
    None
}

#[actix_web::test]
async fn an_agent_pays_a_run_through_the_mcp_tools() {
    let Some(python) = python() else {
        return;
    };
    let app = spawn_app().await;
    let (read_key, _) = app.key_with(&["payroll:read"]).await;
    let closed = crate::process::free_port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let mut command = Command::new("timeout");
    command
        .arg("300")
        .arg(&python)
        .arg(script)
        .env("PAYROLL_BIN", env!("CARGO_BIN_EXE_payroll"))
        .env("PAYROLL_BASE_URL", &app.address)
        .env("ADMIN_KEY", &app.key)
        .env("READ_KEY", &read_key)
        .env("CLOSED_URL", format!("http://127.0.0.1:{closed}"));
    let out = output(command).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("a run paid through the tools"), "{stdout}");
}
