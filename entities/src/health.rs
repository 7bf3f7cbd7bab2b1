//! The database's health as this process sees it (CONTRACT §13 "Infrastructure faults").
//!
//! One classification ([`classify`]) tells an infrastructure fault (the database unreachable,
//! busy, out of space, failing its I/O) from a bug; every layer asks it, so a fault is answered
//! 503 and a bug 500, whichever code path met it.
//!
//! One state per database handle ([`DbHealth`]): *up*, *unreachable since …*, or *refusing
//! writes since …* (out of space, I/O errors, a read-only server). A fault reported by any
//! caller wakes the prober ([`watch`]), which asks the database on a connection of its own
//! (never waiting behind a busy pool) within [`PROBE_DEADLINE`]; it also asks every second
//! whatever happens, and clears the state on the first answer that works. While the database
//! is unreachable the request gate answers at once instead of waiting out the pool's acquire
//! timeout, and the workers back off and log the outage once.
//!
//! The prober also reads the database's clock, so that leases written and read by several
//! instances expire by one clock ([`DbHealth::clock_now`]).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use sea_orm::{
    ConnAcquireErr, ConnectOptions, ConnectionTrait, Database, DatabaseBackend, DatabaseConnection,
    DbErr, RuntimeErr, Statement,
};
use tokio::sync::{Notify, watch as tokio_watch};

use crate::time;

/// How often the prober asks the database, whatever happens.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long one probe may take before the database counts as unreachable.
pub const PROBE_DEADLINE: Duration = Duration::from_millis(1000);
/// Free space a SQLite database's filesystem needs, once a write failed for lack of it,
/// before writes are taken again: a tiny probe write may still fit where real writes do not
/// (SQLite reuses its log's space).
pub const SQLITE_FREE_BYTES: u64 = 4 << 20;

/// What kind of infrastructure fault a database error shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The connection was refused, reset or lost; the server is shutting down or starting up.
    Unreachable,
    /// The database is there but cannot take this now: a pool timeout, SQLite busy or locked
    /// beyond its busy timeout, out of memory or connections, a query cancelled.
    Busy,
    /// A serialization failure or deadlock that survived its retries.
    Conflict,
    /// No space left for the write.
    Full,
    /// The disk or the database file failed an I/O.
    Io,
    /// The server accepts reads only (a standby after a failover, a read-only file).
    ReadOnly,
}

impl Fault {
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Unreachable => "unreachable",
            Fault::Busy => "busy",
            Fault::Conflict => "conflict",
            Fault::Full => "out of space",
            Fault::Io => "I/O error",
            Fault::ReadOnly => "read-only",
        }
    }

    /// Whether the database refuses writes until this is mended, while reads go on.
    pub fn refuses_writes(self) -> bool {
        matches!(self, Fault::Full | Fault::Io | Fault::ReadOnly)
    }
}

/// The infrastructure fault an error shows, or `None` for a bug (a constraint violated, a
/// value that does not decode, a statement the database refuses as written).
pub fn classify(err: &DbErr) -> Option<Fault> {
    match err {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => Some(Fault::Busy),
        DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed) => Some(Fault::Unreachable),
        DbErr::Conn(runtime) => Some(of_runtime(runtime).unwrap_or(Fault::Unreachable)),
        DbErr::Exec(runtime) | DbErr::Query(runtime) => of_runtime(runtime),
        _ => None,
    }
}

fn of_runtime(err: &RuntimeErr) -> Option<Fault> {
    match err {
        RuntimeErr::SqlxError(err) => classify_sqlx(err),
        _ => None,
    }
}

/// The infrastructure fault of a driver error, or `None` for a bug.
pub fn classify_sqlx(err: &sea_orm::sqlx::Error) -> Option<Fault> {
    use sea_orm::sqlx::Error;
    match err {
        Error::Io(_) | Error::Tls(_) | Error::Protocol(_) | Error::PoolClosed => {
            Some(Fault::Unreachable)
        }
        Error::PoolTimedOut => Some(Fault::Busy),
        Error::WorkerCrashed => Some(Fault::Io),
        Error::Database(db) => {
            let sqlite = db
                .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
                .is_some();
            let code = db.code()?;
            if sqlite {
                code.parse().ok().and_then(of_sqlite_code)
            } else {
                of_sqlstate(&code)
            }
        }
        _ => None,
    }
}

/// A SQLite result code (the extended codes keep the primary one in their low byte).
fn of_sqlite_code(code: i32) -> Option<Fault> {
    match code & 0xff {
        5 | 6 | 7 | 15 => Some(Fault::Busy), // BUSY, LOCKED, NOMEM, PROTOCOL
        8 => Some(Fault::ReadOnly),          // READONLY
        10 | 11 | 26 => Some(Fault::Io),     // IOERR, CORRUPT, NOTADB
        13 => Some(Fault::Full),             // FULL
        14 => Some(Fault::Unreachable),      // CANTOPEN
        _ => None,
    }
}

/// A PostgreSQL SQLSTATE.
fn of_sqlstate(code: &str) -> Option<Fault> {
    match code {
        // Shutting down (admin, crash), cannot connect now, the database dropped.
        "57P01" | "57P02" | "57P03" | "57P04" => Some(Fault::Unreachable),
        // The server ended an idle session or transaction: the connection is gone.
        "57P05" | "25P03" => Some(Fault::Unreachable),
        // Serialization, deadlock, a statement whose completion is unknown.
        "40001" | "40P01" | "40003" => Some(Fault::Conflict),
        // Cancelled (a statement timeout), a lock not available now.
        "57014" | "55P03" => Some(Fault::Busy),
        "53100" => Some(Fault::Full),
        "25006" => Some(Fault::ReadOnly),
        _ if code.starts_with("08") => Some(Fault::Unreachable),
        // Insufficient resources: memory, connections.
        _ if code.starts_with("53") => Some(Fault::Busy),
        // System errors: I/O, files.
        _ if code.starts_with("58") => Some(Fault::Io),
        _ => None,
    }
}

/// The database as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Up,
    /// Nothing can be read or written.
    Unreachable {
        since: DateTime<Utc>,
        cause: String,
    },
    /// Reads go on; writes fail (out of space, I/O errors, read-only).
    RefusingWrites {
        since: DateTime<Utc>,
        fault: Fault,
        cause: String,
    },
}

impl Health {
    pub fn is_up(&self) -> bool {
        matches!(self, Health::Up)
    }

    /// Since when it is not up.
    pub fn since(&self) -> Option<DateTime<Utc>> {
        match self {
            Health::Up => None,
            Health::Unreachable { since, .. } | Health::RefusingWrites { since, .. } => {
                Some(*since)
            }
        }
    }

    /// `ok`, `unreachable` or `refusing_writes`.
    pub fn label(&self) -> &'static str {
        match self {
            Health::Up => "ok",
            Health::Unreachable { .. } => "unreachable",
            Health::RefusingWrites { .. } => "refusing_writes",
        }
    }

    /// What went wrong, in a few words (never a secret: driver messages name no password).
    pub fn cause(&self) -> Option<&str> {
        match self {
            Health::Up => None,
            Health::Unreachable { cause, .. } | Health::RefusingWrites { cause, .. } => Some(cause),
        }
    }
}

/// The health of one database, shared by every user of its handle.
#[derive(Debug)]
pub struct DbHealth {
    state: Mutex<Health>,
    /// Counts the changes of `state` (under its lock): a probe applies what it found only to
    /// the state it started from, never over a fault reported meanwhile.
    changes_made: AtomicU64,
    /// Tells waiters of every change ([`DbHealth::unreachable`]).
    changes: tokio_watch::Sender<Health>,
    /// Wakes the prober at once.
    probe_now: Notify,
    /// The database's clock minus this process's, in milliseconds.
    clock_offset_ms: AtomicI64,
    /// The URL the prober opens its own connection to.
    pub(crate) url: String,
    backend: DatabaseBackend,
    /// The folder of a SQLite database's file, whose filesystem's free space tells whether
    /// writes can be taken again after it ran out.
    sqlite_dir: Option<std::path::PathBuf>,
}

impl DbHealth {
    pub(crate) fn new(
        url: String,
        backend: DatabaseBackend,
        sqlite_dir: Option<std::path::PathBuf>,
    ) -> DbHealth {
        DbHealth {
            state: Mutex::new(Health::Up),
            changes_made: AtomicU64::new(0),
            changes: tokio_watch::channel(Health::Up).0,
            probe_now: Notify::new(),
            clock_offset_ms: AtomicI64::new(0),
            url,
            backend,
            sqlite_dir,
        }
    }

    pub fn state(&self) -> Health {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Since when the database is unreachable, if it is.
    pub fn unreachable_since(&self) -> Option<DateTime<Utc>> {
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            Health::Unreachable { since, .. } => Some(*since),
            _ => None,
        }
    }

    /// The state that refuses a request now, if any: every request while the database is
    /// unreachable, writes while it refuses them.
    pub fn refuses(&self, write: bool) -> Option<Health> {
        let state = self.state();
        match &state {
            Health::Unreachable { .. } => Some(state),
            Health::RefusingWrites { .. } if write => Some(state),
            _ => None,
        }
    }

    /// Notes an error met by any caller: an infrastructure fault wakes the prober, which
    /// decides whether the database is down; one that refuses writes marks it so at once (a
    /// write probe clears it). Answers the fault, `None` for a bug.
    pub fn report(&self, err: &DbErr) -> Option<Fault> {
        let fault = classify(err)?;
        self.note(fault, &err.to_string());
        Some(fault)
    }

    /// As [`DbHealth::report`], for a fault already classified.
    pub fn note(&self, fault: Fault, cause: &str) {
        if fault.refuses_writes() {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.is_up() {
                *state = Health::RefusingWrites {
                    since: time::now(),
                    fault,
                    cause: short(cause),
                };
                tracing::error!(
                    fault = fault.as_str(),
                    cause,
                    "the database refuses writes; writes are answered 503 until it takes them again"
                );
                self.changes_made.fetch_add(1, Ordering::AcqRel);
                self.changes.send_replace(state.clone());
            }
        }
        self.probe_now.notify_one();
    }

    /// Completes when the database is found unreachable (at once if it is now).
    pub async fn unreachable(&self) {
        let mut changes = self.changes.subscribe();
        loop {
            if matches!(*changes.borrow_and_update(), Health::Unreachable { .. }) {
                return;
            }
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Completes when the database is up (at once if it is now).
    pub async fn up(&self) {
        let mut changes = self.changes.subscribe();
        loop {
            if changes.borrow_and_update().is_up() {
                return;
            }
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Now by the database's clock (as last read by the prober; this process's clock until
    /// the first reading, and on SQLite, which only this process writes).
    pub fn clock_now(&self) -> DateTime<Utc> {
        let offset = self.clock_offset_ms.load(Ordering::Relaxed);
        time::now() + chrono::Duration::milliseconds(offset)
    }

    /// The state with the count of its changes, read together.
    fn seen(&self) -> (Health, u64) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (state.clone(), self.changes_made.load(Ordering::Acquire))
    }

    /// The database's clock minus this process's, as last read.
    pub fn clock_offset(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.clock_offset_ms.load(Ordering::Relaxed))
    }

    fn set(&self, next: Health) {
        self.set_if(None, next);
    }

    /// Sets the state, unless `seen` is given and the state changed since it was read.
    fn set_if(&self, seen: Option<u64>, next: Health) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if *state == next
            || seen.is_some_and(|seen| seen != self.changes_made.load(Ordering::Acquire))
        {
            return;
        }
        self.changes_made.fetch_add(1, Ordering::AcqRel);
        let before = std::mem::replace(&mut *state, next.clone());
        match (&before, &next) {
            (_, Health::Unreachable { cause, .. })
                if !matches!(before, Health::Unreachable { .. }) =>
            {
                tracing::error!(cause = %cause, "the database is unreachable; requests are answered 503 and work waits until it answers again")
            }
            (_, Health::Up) => {
                let down_for = before
                    .since()
                    .map(|since| (time::now() - since).num_milliseconds() as f64 / 1000.0);
                tracing::warn!(was = before.label(), down_for_seconds = ?down_for, "the database answers again; work resumes")
            }
            _ => {}
        }
        self.changes.send_replace(next);
    }
}

/// Driver messages can be long (a query's text); a few words are enough for an operator.
fn short(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Asks the database every [`PROBE_EVERY`], and at once when a caller reports a fault, for as
/// long as the process runs; sets the health from the answers. It uses a connection of its own,
/// so a pool busy with long work never looks like an outage, and a dead one never holds it up
/// beyond [`PROBE_DEADLINE`].
pub async fn watch(health: Arc<DbHealth>) {
    watch_with(Prober::default(), health).await
}

/// [`watch`], going on with a prober that has asked before ([`Prober::probe`]).
pub async fn watch_with(mut prober: Prober, health: Arc<DbHealth>) {
    loop {
        let started = Instant::now();
        if prober.probe(&health).await == Next::AtOnce {
            continue;
        }
        let rest = PROBE_EVERY.saturating_sub(started.elapsed());
        tokio::select! {
            _ = tokio::time::sleep(rest) => {}
            _ = health.probe_now.notified() => {
                // Several reports at once make one probe; a report that comes during a probe
                // is answered by the next.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Asks the database on a connection of its own.
#[derive(Default)]
pub struct Prober {
    conn: Option<DatabaseConnection>,
    /// Probes in a row that got no answer in time.
    silent: u32,
}

/// When the next probe is due.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// In its turn.
    InTurn,
    /// At once: one probe got no answer in time, and one alone (a busy machine) does not say
    /// the database is away.
    AtOnce,
}

impl Prober {
    /// One probe, and the health it tells (also read, with the database's clock, before the
    /// workers start). What it found is applied only to the state it started from: a fault
    /// reported meanwhile stands until the next probe.
    pub async fn probe(&mut self, health: &DbHealth) -> Next {
        let (state, seen) = health.seen();
        let writes = matches!(state, Health::RefusingWrites { .. });
        // Out of space on SQLite: writes wait for room, not just for one tiny write to fit.
        if let (
            Health::RefusingWrites {
                fault: Fault::Full, ..
            },
            Some(dir),
        ) = (&state, &health.sqlite_dir)
            && free_bytes(dir).is_some_and(|free| free < SQLITE_FREE_BYTES)
        {
            return Next::InTurn;
        }
        // Up: a refused connection says at once that the server went. Down: the pool's own
        // retries within the deadline see it back soonest.
        let watch = (health.backend == DatabaseBackend::Postgres
            && !matches!(state, Health::Unreachable { .. }))
        .then_some(health.url.as_str());
        let asked = crate::listening::unless_refused(watch, self.ask(health, writes));
        let answer = tokio::time::timeout(PROBE_DEADLINE, asked).await;
        if answer.is_ok() {
            self.silent = 0;
        }
        match answer {
            Ok(Ok(())) => health.set_if(Some(seen), Health::Up),
            Ok(Err(err)) => match classify(&err) {
                Some(fault) if fault.refuses_writes() => {
                    if !matches!(health.state(), Health::RefusingWrites { .. }) {
                        health.set(Health::RefusingWrites {
                            since: time::now(),
                            fault,
                            cause: short(&err.to_string()),
                        });
                    }
                }
                // The database answered that it is busy: it is there; the next probe tells
                // more.
                Some(Fault::Busy | Fault::Conflict) if answered(&err) => {}
                _ => {
                    // A connection that failed is opened afresh next time.
                    self.conn = None;
                    mark_unreachable(health, short(&err.to_string()));
                }
            },
            Err(_) => {
                self.conn = None;
                self.silent += 1;
                if self.silent < 2 {
                    return Next::AtOnce;
                }
                mark_unreachable(
                    health,
                    format!("no answer within {} ms, twice", PROBE_DEADLINE.as_millis()),
                );
            }
        }
        Next::InTurn
    }

    /// One probe: the clock (a read), and a write when writes were refused.
    async fn ask(&mut self, health: &DbHealth, write: bool) -> Result<(), DbErr> {
        if self.conn.is_none() {
            let mut options = ConnectOptions::new(health.url.clone());
            options
                .max_connections(1)
                .min_connections(0)
                .acquire_timeout(PROBE_DEADLINE)
                .connect_timeout(PROBE_DEADLINE)
                .sqlx_logging(false);
            if health.backend == DatabaseBackend::Sqlite {
                // Busy answers before the probe's deadline: a writer holding the file is no
                // outage.
                options.map_sqlx_sqlite_opts(|opts| {
                    opts.busy_timeout(PROBE_DEADLINE / 2)
                        .create_if_missing(false)
                });
                // Its write probe fails exactly when the disk is full.
                discard_if_in_transaction(&mut options);
            }
            self.conn = Some(Database::connect(options).await?);
        }
        let Some(conn) = &self.conn else {
            return Ok(());
        };
        match health.backend {
            DatabaseBackend::Postgres => {
                let before = time::now();
                let row = conn
                    .query_one_raw(Statement::from_string(
                        DatabaseBackend::Postgres,
                        "SELECT CURRENT_TIMESTAMP AS now",
                    ))
                    .await?;
                let after = time::now();
                if let Some(row) = row {
                    let theirs: DateTime<Utc> = row.try_get("", "now")?;
                    let ours = before + (after - before) / 2;
                    health
                        .clock_offset_ms
                        .store((theirs - ours).num_milliseconds(), Ordering::Relaxed);
                }
            }
            _ => {
                conn.query_one_raw(Statement::from_string(health.backend, "SELECT 1"))
                    .await?;
            }
        }
        if write {
            write_probe(conn, health.backend).await?;
        }
        Ok(())
    }
}

/// Has a SQLite pool discard, rather than hand out, a connection that sqlx still counts inside
/// a transaction. That is one whose rollback failed: on some errors (a full disk, an I/O
/// error) SQLite ends the transaction by itself, the `ROLLBACK` that follows fails, and the
/// count stays up. On such a connection the next `begin` would be a `SAVEPOINT` and its commit
/// a `RELEASE`: after one more rollback (to that savepoint, which leaves SQLite's transaction
/// open) commits would commit nothing, answered as done yet seen by no other connection. A
/// fresh connection has nothing open. By the time a connection is acquired again, its
/// rollback has run: the pool pings it on release, after the rollback queued on drop.
pub(crate) fn discard_if_in_transaction(options: &mut ConnectOptions) -> &mut ConnectOptions {
    options.map_sqlx_sqlite_before_acquire(|conn, _| {
        Box::pin(async move {
            use sea_orm::sqlx::Connection as _;
            let open = conn.is_in_transaction();
            if open {
                tracing::warn!("a database connection left inside a transaction is closed");
            }
            Ok(!open)
        })
    })
}

/// Bytes free for an unprivileged writer on the filesystem of `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Whether the error is the database's own answer (rather than no answer at all).
fn answered(err: &DbErr) -> bool {
    match err {
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => {
            matches!(**e, sea_orm::sqlx::Error::Database(_))
        }
        _ => false,
    }
}

fn mark_unreachable(health: &DbHealth, cause: String) {
    match health.state() {
        Health::Unreachable { .. } => {}
        _ => health.set(Health::Unreachable {
            since: time::now(),
            cause,
        }),
    }
}

/// A write that must reach the disk: this process's row of `database_probes`, committed.
async fn write_probe(conn: &DatabaseConnection, backend: DatabaseBackend) -> Result<(), DbErr> {
    use sea_orm::TransactionTrait as _;
    let tx = conn.begin().await?;
    let sql = match backend {
        DatabaseBackend::Postgres => {
            "INSERT INTO database_probes (id, probed_at) VALUES (1, CURRENT_TIMESTAMP) \
             ON CONFLICT (id) DO UPDATE SET probed_at = EXCLUDED.probed_at"
        }
        _ => {
            "INSERT INTO database_probes (id, probed_at) VALUES (1, strftime('%Y-%m-%d %H:%M:%f', 'now')) \
             ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at"
        }
    };
    tx.execute_unprepared(sql).await?;
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified() {
        assert_eq!(of_sqlstate("57P01"), Some(Fault::Unreachable));
        assert_eq!(of_sqlstate("57P02"), Some(Fault::Unreachable));
        assert_eq!(of_sqlstate("57P03"), Some(Fault::Unreachable));
        assert_eq!(of_sqlstate("08006"), Some(Fault::Unreachable));
        assert_eq!(of_sqlstate("40001"), Some(Fault::Conflict));
        assert_eq!(of_sqlstate("40P01"), Some(Fault::Conflict));
        assert_eq!(of_sqlstate("53100"), Some(Fault::Full));
        assert_eq!(of_sqlstate("53300"), Some(Fault::Busy));
        assert_eq!(of_sqlstate("58030"), Some(Fault::Io));
        // A unique violation, a syntax error: bugs.
        assert_eq!(of_sqlstate("23505"), None);
        assert_eq!(of_sqlstate("42601"), None);
        // SQLite: BUSY, LOCKED, BUSY_SNAPSHOT (517), FULL, IOERR_WRITE (778), a constraint.
        assert_eq!(of_sqlite_code(5), Some(Fault::Busy));
        assert_eq!(of_sqlite_code(6), Some(Fault::Busy));
        assert_eq!(of_sqlite_code(517), Some(Fault::Busy));
        assert_eq!(of_sqlite_code(13), Some(Fault::Full));
        assert_eq!(of_sqlite_code(778), Some(Fault::Io));
        assert_eq!(of_sqlite_code(2067), None);
    }

    #[test]
    fn errors_are_classified() {
        let io =
            sea_orm::sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let wrapped = DbErr::Query(RuntimeErr::SqlxError(Arc::new(io)));
        assert_eq!(classify(&wrapped), Some(Fault::Unreachable));
        assert_eq!(
            classify(&DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)),
            Some(Fault::Busy)
        );
        assert_eq!(classify(&DbErr::Custom("a bug".into())), None);
        assert_eq!(classify(&DbErr::RecordNotFound("x".into())), None);
        let decode = DbErr::Query(RuntimeErr::SqlxError(Arc::new(
            sea_orm::sqlx::Error::ColumnNotFound("x".into()),
        )));
        assert_eq!(classify(&decode), None);
    }

    #[tokio::test]
    async fn a_write_fault_refuses_writes_until_a_probe_writes() {
        let health = DbHealth::new("sqlite::memory:".into(), DatabaseBackend::Sqlite, None);
        assert!(health.refuses(true).is_none());
        let full = DbErr::Exec(RuntimeErr::SqlxError(Arc::new(sea_orm::sqlx::Error::Io(
            std::io::Error::other("x"),
        ))));
        // A lost connection alone does not say the database is down: the prober decides.
        assert_eq!(health.report(&full), Some(Fault::Unreachable));
        assert!(health.state().is_up());
        health.set(Health::RefusingWrites {
            since: time::now(),
            fault: Fault::Full,
            cause: "disk full".into(),
        });
        assert!(health.refuses(true).is_some());
        assert!(health.refuses(false).is_none());
        health.set(Health::Unreachable {
            since: time::now(),
            cause: "refused".into(),
        });
        assert!(health.refuses(false).is_some());
        tokio::time::timeout(Duration::from_secs(1), health.unreachable())
            .await
            .expect("unreachable now");
        health.set(Health::Up);
        tokio::time::timeout(Duration::from_secs(1), health.up())
            .await
            .expect("up now");
    }
}
