//! A private PostgreSQL cluster per test, which the test may crash, stop, restart and cut the
//! connections of: `initdb` into a temporary folder and `pg_ctl` on a free port, with the
//! binaries of `pg_config --bindir` (as root, run as the `postgres` user, as `initdb` refuses
//! root). The shared server at 127.0.0.1:5432 is never touched.
//!
//! These tests run where the PostgreSQL server binaries are installed; `.ci/run` sets
//! `PAYROLL_REQUIRE_PG_CLUSTER=1`, so there a machine without them fails rather than skips.
//! They run in the pass without `PAYROLL_TEST_DATABASE_URL` (they bring their own database),
//! so the suite's second pass does not run them again.

use std::{path::PathBuf, process::Command, time::Instant};

use crate::process::{free_port, output};

pub(crate) struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

/// Whether these tests run here: the server binaries are there and this is the pass without
/// a shared test database. `None` (with a notice) when they are skipped.
pub(crate) fn available() -> Option<PathBuf> {
    if std::env::var("PAYROLL_TEST_DATABASE_URL").is_ok() {
        eprintln!(
            "NOTICE: private-cluster tests run in the pass without PAYROLL_TEST_DATABASE_URL"
        );
        return None;
    }
    let bindir = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|dir| dir.join("initdb").exists() && dir.join("pg_ctl").exists());
    if bindir.is_none() {
        assert!(
            std::env::var("PAYROLL_REQUIRE_PG_CLUSTER").as_deref() != Ok("1"),
            "PAYROLL_REQUIRE_PG_CLUSTER=1 but the PostgreSQL server binaries (pg_config --bindir) are not installed"
        );
        eprintln!(
            "NOTICE: PostgreSQL's server binaries are not installed; the database fault tests are skipped"
        );
    }
    bindir
}

impl PgCluster {
    /// A new cluster, started, trusting local connections as `postgres`.
    pub(crate) async fn start(bin: PathBuf) -> PgCluster {
        let dir = tempfile::tempdir().expect("cluster folder");
        let as_postgres = is_root();
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(
                status.success(),
                "the cluster folder could not be given to postgres"
            );
        }
        let cluster = PgCluster {
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        let data = cluster.data().display().to_string();
        cluster
            .run(
                "initdb",
                &[
                    "-D",
                    &data,
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ],
            )
            .await;
        cluster.start_server().await;
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The server's log, for failure messages.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it takes connections.
    pub(crate) async fn start_server(&self) {
        let data = self.data().display().to_string();
        let log = self.log_path().display().to_string();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=100",
            self.port,
            self.dir.path().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60", "start",
            ],
        )
        .await;
    }

    /// A crash: every server process killed at once (`pg_ctl stop -m immediate`); the next
    /// start recovers from the log.
    pub(crate) async fn crash(&self) {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"])
            .await;
    }

    /// Every client connection cut (`pg_terminate_backend`), as a failover does; the server
    /// goes on.
    pub(crate) async fn terminate_connections(&self) {
        let port = self.port.to_string();
        let psql = self.bin.join("psql");
        let mut command = Command::new(psql);
        command.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-Atc",
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        ]);
        let out = output(command).await;
        assert!(
            out.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn run(&self, program: &str, args: &[&str]) {
        let binary = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        command.args(args).current_dir(self.dir.path());
        let started = Instant::now();
        let out = output(command).await;
        assert!(
            out.status.success(),
            "{program} {args:?} failed after {:?}: {}{}\n--- server log:\n{}",
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let binary = self.bin.join("pg_ctl");
        let data = self.data();
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        command
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command.status().ok();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
