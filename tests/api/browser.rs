//! `/status` and `/status/runs/{run_id}` as a browser renders them (headless Chromium), while a
//! run pays out and after it: the charts are drawn with data points, the pages load nothing
//! but themselves (Chromium's own network log), and a screenshot of each is kept under
//! `target/screenshots/` (the README shows two of them).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::{
    helpers::{TestApp, spawn_app_with},
    metrics::funded_run,
    process::output,
    status::series_points,
};

/// Chromium, or `None` (with a notice) when it is absent and not required.
fn chromium() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin/chromium");
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("PAYROLL_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "PAYROLL_REQUIRE_BROWSER=1 but /usr/bin/chromium is not installed"
    );
    eprintln!("NOTICE: /usr/bin/chromium is not installed; the browser test of /status is skipped");
    None
}

/// Runs headless Chromium with these extra arguments; returns its stdout. Off the test's
/// thread: the application under test serves on it.
async fn run_chromium(browser: &Path, profile: &Path, args: Vec<String>) -> String {
    let browser = browser.to_owned();
    let profile = profile.to_owned();
    let mut command = Command::new("timeout");
    command
        .arg("120")
        .arg(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args);
    let output = output(command).await;
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Where screenshots are kept: `target/screenshots/` (beside the test build's own folder), so
/// CI keeps them with the build.
fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target folder")
        .join("screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots folder");
    dir
}

/// What the browser saw of one page.
struct Seen {
    dom: String,
    /// Every URL a request was made for on the page's behalf (initiated by its origin).
    requested: Vec<String>,
}

/// Loads `url` in Chromium: its DOM, the requests the page made (from `--log-net-log`), and a
/// full-height screenshot written to `shot`.
async fn look(browser: &Path, dir: &Path, name: &str, url: &str, shot: &Path) -> Seen {
    let net_log = dir.join(format!("{name}.netlog.json"));
    let dom = run_chromium(
        browser,
        &dir.join(format!("profile-{name}-dom")),
        vec![
            "--window-size=1280,900".into(),
            format!("--log-net-log={}", net_log.display()),
            "--dump-dom".into(),
            url.to_owned(),
        ],
    )
    .await;
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&net_log).expect("net log written"))
            .expect("the net log is JSON");
    let origin = url.split("/status").next().expect("an origin").to_owned();
    let requested = log["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter(|e| e["params"]["initiator"].as_str() == Some(origin.as_str()))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_owned))
        .collect();
    run_chromium(
        browser,
        &dir.join(format!("profile-{name}-shot")),
        vec![
            "--window-size=1280,2200".into(),
            format!("--screenshot={}", shot.display()),
            url.to_owned(),
        ],
    )
    .await;
    let (width, height, distinct) = png_figures(shot);
    assert_eq!((width, height), (1280, 2200), "{name}");
    assert!(
        distinct >= 3,
        "{name}: the screenshot is (nearly) one flat colour: {distinct} colours"
    );
    Seen { dom, requested }
}

/// A page the service serves stands alone: no script, and every request it made went back to
/// the service (its favicon at most).
fn assert_self_contained(name: &str, seen: &Seen, origin: &str) {
    assert!(!seen.dom.contains("<script"), "{name}: {}", seen.dom);
    for url in &seen.requested {
        assert!(
            url.starts_with(origin),
            "{name} made a request elsewhere: {url}"
        );
    }
}

#[actix_web::test]
async fn the_status_pages_render_in_a_browser_while_a_run_pays_and_after() {
    let Some(browser) = chromium() else {
        return;
    };
    // One withdrawal a second: the run is still paying out while the browser looks.
    let app = spawn_app_with(|s| {
        s.server.status_page_public = true;
        s.exchange.withdrawals_per_second = 1;
        s.exchange.burst = 1;
    })
    .await;
    let total = 44;
    let run_id = funded_run(&app, total, "Browser").await;
    let res = app
        .act(&format!("/api/v1/payroll-runs/{run_id}/execute"))
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    wait_for_a_sample(&app).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let shots = screenshots();
    let origin = app.url("");
    let status = app.url("/status");
    let run_page = app.url(&format!("/status/runs/{run_id}"));

    for moment in ["during", "after"] {
        if moment == "after" {
            app.wait_for_run(&run_id, 90, |r| r["status"] == "COMPLETED")
                .await;
        }
        let name = format!("status-{moment}");
        let seen = look(
            &browser,
            dir.path(),
            &name,
            &status,
            &shots.join(format!("{name}.png")),
        )
        .await;
        assert_self_contained(&name, &seen, &origin);
        let dom = &seen.dom;
        assert!(dom.contains(&run_id), "{dom}");
        let done = regex_like_progress(dom, total as u32);
        assert!(done.is_some(), "no progress of {total} payouts in {dom}");
        if moment == "during" {
            assert!(dom.contains("PAYING_OUT"), "{dom}");
        } else {
            assert_eq!(done, Some(total as u32), "{dom}");
        }
        assert!(dom.contains("ExchangeActor"), "{dom}");
        assert!(dom.contains("<h2>Last hour</h2>"), "{dom}");
        assert_eq!(dom.matches("<svg role=\"img\"").count(), 8, "{dom}");
        assert!(series_points(dom, "up").is_some_and(|n| n >= 1), "{dom}");
        assert!(
            series_points(dom, "requests").is_some_and(|n| n >= 1),
            "{dom}"
        );

        let name = format!("status-run-{moment}");
        let seen = look(
            &browser,
            dir.path(),
            &name,
            &run_page,
            &shots.join(format!("{name}.png")),
        )
        .await;
        assert_self_contained(&name, &seen, &origin);
        let dom = &seen.dom;
        assert!(dom.contains(&run_id), "{dom}");
        assert_eq!(dom.matches("<svg role=\"img\"").count(), 2, "{dom}");
        assert!(
            series_points(dom, "completed").is_some_and(|n| n >= 2),
            "{dom}"
        );
        assert!(series_points(dom, "limit").is_some_and(|n| n >= 2), "{dom}");
        if moment == "after" {
            assert!(dom.contains(&format!("{total} / {total} done")), "{dom}");
            assert!(dom.contains("payroll.run.completed"), "{dom}");
        }
    }
    actix_web::rt::time::sleep(Duration::from_millis(10)).await;
}

/// Waits until the status history holds two samples (one every 10 s): rates are drawn from the
/// second on.
async fn wait_for_a_sample(app: &TestApp) {
    let deadline = std::time::Instant::now() + Duration::from_secs(35);
    loop {
        let res = app.send("GET", "/status", None, None, None, &[]).await;
        assert_eq!(res.status, 200, "{}", res.text);
        if series_points(&res.text, "requests").is_some() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no second sample in 35 s: {}",
            res.text
        );
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The "N / total done" of a run's progress, if the DOM has it.
fn regex_like_progress(dom: &str, total: u32) -> Option<u32> {
    let suffix = format!(" / {total} done");
    dom.match_indices(&suffix).find_map(|(at, _)| {
        let before = &dom[..at];
        let digits: String = before
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        digits.parse().ok().filter(|done| *done <= total)
    })
}

/// Width, height and the number of distinct colours of a PNG (decoded, so a broken file fails).
fn png_figures(path: &Path) -> (u32, u32, usize) {
    let file = std::fs::File::open(path).expect("screenshot written");
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("buffer size")];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let pixel = info.color_type.samples() * (info.bit_depth as usize).div_ceil(8);
    let mut colours = std::collections::HashSet::new();
    for chunk in buf[..info.buffer_size()].chunks(pixel) {
        colours.insert(chunk.to_vec());
        if colours.len() > 64 {
            break;
        }
    }
    (info.width, info.height, colours.len())
}
