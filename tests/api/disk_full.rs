//! SQLite out of disk space (CONTRACT §4, §13): the service's data folder on a tmpfs of a few
//! megabytes, filled up. Writes answer 503 (`reason: "database"`), never 500; reads go on;
//! `/readyz` says the database refuses writes; the process stays up. Once space returns,
//! writes work again by themselves, a write refused meanwhile and sent again under its key
//! lands once, and the audit entries of the reads made meanwhile are written.
//!
//! It mounts a tmpfs (root only): `.ci/run` sets `PAYROLL_REQUIRE_TMPFS=1`, so there a machine
//! where the mount fails fails the test; elsewhere it is skipped with a notice. I/O errors are
//! not injected; they take the same path as out-of-space (one classification, unit-tested).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use payroll_entities::audit_entry;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};

use crate::helpers::{Resp, TestApp, evm_address, new_key, spawn_app_with};

/// A tmpfs of `megabytes` MB mounted on a new folder, unmounted when dropped.
struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("folder");
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m,mode=0700")])
            .arg("tmpfs")
            .arg(&mount)
            .output()
            .is_ok_and(|o| o.status.success());
        if mounted {
            return Some(SmallDisk { _dir: dir, mount });
        }
        assert!(
            std::env::var("PAYROLL_REQUIRE_TMPFS").as_deref() != Ok("1"),
            "PAYROLL_REQUIRE_TMPFS=1 but a tmpfs could not be mounted (root is needed)"
        );
        eprintln!(
            "NOTICE: a tmpfs could not be mounted (not root?); the disk-full test is skipped"
        );
        None
    }

    /// Fills what is left with one file; answers its path.
    fn fill(&self) -> PathBuf {
        let path = self.mount.join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        // The last partial block, byte by byte.
        while file.write_all(&[0]).is_ok() {}
        let _ = file.flush();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// `POST /employees/import` of `body` under `key`.
async fn import(app: &TestApp, key: &str, body: &Value) -> Resp {
    app.send(
        "POST",
        "/api/v1/employees/import",
        Some(&app.key),
        Some(key),
        Some(body.to_string().into_bytes()),
        &[],
    )
    .await
}

fn employees(prefix: &str, n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                let email = format!("{prefix}{i}@example.com");
                json!({"name": format!("Person {prefix} {i} with a longer name to fill pages"),
                       "email": email, "salary_usd_cents": 100_000 + i as i64,
                       "network": "BASE", "wallet_address": evm_address(&email)})
            })
            .collect(),
    )
}

#[actix_web::test]
async fn a_full_disk_refuses_writes_with_503_reads_go_on_and_space_back_heals() {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_ok() {
        return;
    }
    let Some(disk) = SmallDisk::mount(8) else {
        return;
    };
    let data: &Path = &disk.mount;
    let data = data.to_path_buf();
    let app = spawn_app_with(move |s| {
        s.data.dir = data;
    })
    .await;
    let first = import(&app, &new_key(), &employees("before", 20)).await;
    assert_eq!(first.status, 200, "{}", first.text);

    let filler = disk.fill();
    // Imports until the database cannot take them: each is answered 503, never 500, and soon.
    let mut refused: Option<(String, Value)> = None;
    let mut landed = 20usize;
    for batch in 0..200 {
        let key = new_key();
        let body = employees(&format!("b{batch}-"), 100);
        let started = Instant::now();
        let res = import(&app, &key, &body).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered after {:?}",
            started.elapsed()
        );
        match res.status.as_u16() {
            200 => landed += 100,
            503 => {
                assert_eq!(
                    res.json["error"]["details"]["reason"], "database",
                    "{}",
                    res.text
                );
                assert!(res.header("retry-after").is_some());
                refused = Some((key, body));
                break;
            }
            other => panic!("import answered {other}: {}", res.text),
        }
    }
    let (key, body) = refused.expect("the full disk refused a write");
    // Writes are now refused at once; reads go on.
    let again = app
        .send(
            "POST",
            "/api/v1/employees",
            Some(&app.key),
            Some(&new_key()),
            Some(
                json!({"name": "Late", "email": "late@example.com", "salary_usd_cents": 1,
                       "network": "BASE", "wallet_address": evm_address("late@example.com")})
                .to_string()
                .into_bytes(),
            ),
            &[],
        )
        .await;
    assert_eq!(again.status, 503, "{}", again.text);
    let read = app.get("/api/v1/employees?limit=5").await;
    assert_eq!(read.status, 200, "{}", read.text);
    let read_id = read.header("x-request-id").expect("request id").to_owned();
    let ready = app.send("GET", "/readyz", None, None, None, &[]).await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert_eq!(ready.json["database"], "refusing_writes", "{}", ready.text);
    assert!(ready.json["since"].is_string());
    let healthy = app.send("GET", "/healthz", None, None, None, &[]).await;
    assert_eq!(healthy.status, 200);

    // Space back: the refused import, sent again under its key, lands once.
    std::fs::remove_file(&filler).expect("filler removed");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let res = import(&app, &key, &body).await;
        if res.status == 200 {
            landed += 100;
            break;
        }
        assert!(
            res.status == 503 || res.code() == "IDEMPOTENCY_KEY_IN_USE",
            "{}",
            res.text
        );
        assert!(
            Instant::now() < deadline,
            "writes did not come back: {}",
            res.text
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
    let replay = import(&app, &key, &body).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let all = app.get("/api/v1/employees?limit=1").await;
    assert_eq!(
        all.json["pagination"]["total"].as_u64(),
        Some(landed as u64),
        "{}",
        all.text
    );
    let ready = app.send("GET", "/readyz", None, None, None, &[]).await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    // The read made while the disk was full has its audit entry.
    let database = app.db().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = audit_entry::Entity::find()
            .filter(audit_entry::Column::RequestId.eq(read_id.as_str()))
            .count(&database.conn)
            .await
            .expect("audit");
        if found == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no audit entry for {read_id}");
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    }
}
