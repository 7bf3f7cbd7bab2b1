//! The database handle shared by the HTTP layer and the actors.
//!
//! SQLite allows one writer at a time, and a deferred transaction that reads before it writes
//! fails at once (`SQLITE_BUSY`) when another connection wrote in between. Every write
//! transaction of this process therefore takes an in-process lock on SQLite, so writers queue
//! instead of failing while readers stay concurrent; PostgreSQL needs no such lock.
//! Work that may wait (the mailer) stands aside while other writers wait for that lock, for
//! up to 250 ms before it queues with them ([`Db::stand_aside`]).

use std::{
    ops::Deref,
    path::Path,
    sync::{
        Arc, Mutex as StdMutex, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use sea_orm::{
    ConnectOptions, Database, DatabaseBackend, DatabaseConnection, DatabaseTransaction, DbErr,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
    sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous},
};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::health::DbHealth;

#[derive(Clone, Debug)]
pub struct Db {
    pub conn: DatabaseConnection,
    write_lock: Option<Arc<Mutex<()>>>,
    /// Writers waiting for the SQLite write lock or holding it, other than background ones.
    writers: Arc<AtomicUsize>,
    commit_hook: Arc<CommitHook>,
    /// How many write transactions of this process have ended in a commit (or a failed
    /// commit): a view read at one generation is current while the generation is unchanged.
    generation: Arc<AtomicU64>,
    /// Whether the database answers, as this process last saw it.
    health: Arc<DbHealth>,
    /// On SQLite, the connection of its own that starts the log over ([`Db::checkpoint`]),
    /// opened at its first use.
    restarter: Arc<Mutex<Option<DatabaseConnection>>>,
    /// On a SQLite file, the one connection every write transaction of this process runs on
    /// (they take turns anyway, under `write_lock`), with a larger page cache. A connection
    /// drops its cached pages whenever another connection has written since its last
    /// transaction, so writes spread over the pool each read the tables' upper levels afresh,
    /// and a run of a million payouts has one level more than one of 100,000; a connection's
    /// own commits leave its cache in place.
    writer: Option<DatabaseConnection>,
}

/// Pages in the SQLite log past which [`Db::checkpoint`] starts it over (about 16 MB).
const RESTART_AFTER_PAGES: i64 = 4_096;

/// At most this many pages of the log left to copy (readers still needed them) for it to be
/// started over: the rest is copied under the write lock, which writers wait for.
const RESTART_BACKLOG_PAGES: i64 = 1_024;

/// How long starting the log over waits for readers of its older pages (which hold it) before
/// it leaves that to a later checkpoint: the process's writers wait meanwhile.
const RESTART_PATIENCE: Duration = Duration::from_millis(20);

/// The writing connection's page cache (`cache_size`, negative: KiB), beside the default
/// 2 MiB of each other connection: room for the upper levels of the tables and indexes a run
/// of a million payouts writes, which hold its every look-up, and for the pages being filled.
const WRITER_CACHE_KIB: &str = "-32768";

/// What a SQLite log that starts over is cut back to (`journal_size_limit`): it is written
/// again from its start, in place, rather than grown.
const LOG_SIZE_LIMIT: &str = "33554432";

/// Called after a transaction that noted something for after its commit has committed, with
/// what it noted.
#[derive(Default)]
struct CommitHook(OnceLock<Box<dyn Fn(Vec<String>) + Send + Sync>>);

impl std::fmt::Debug for CommitHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "CommitHook(set)"
        } else {
            "CommitHook(unset)"
        })
    }
}

/// Counts a writer in [`Db`]'s `writers` while it lives.
struct CountedWriter(Arc<AtomicUsize>);

impl CountedWriter {
    fn new(writers: &Arc<AtomicUsize>) -> CountedWriter {
        writers.fetch_add(1, Ordering::AcqRel);
        CountedWriter(writers.clone())
    }
}

impl Drop for CountedWriter {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Longest a background writer stands aside for other writers before it queues with them.
const BACKGROUND_PATIENCE: Duration = Duration::from_millis(250);

/// A write transaction; on SQLite it also holds the process's write lock until it ends.
pub struct WriteTx {
    /// Counted among the waiting and holding writers (SQLite, not a background writer).
    _counted: Option<CountedWriter>,
    tx: DatabaseTransaction,
    _guard: Option<OwnedMutexGuard<()>>,
    /// What this transaction tells the commit hook once it has committed.
    noted: StdMutex<Vec<String>>,
    commit_hook: Arc<CommitHook>,
    generation: Arc<AtomicU64>,
}

impl Deref for WriteTx {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.tx
    }
}

impl WriteTx {
    /// Commits; then hands what the transaction noted (if anything) to the commit hook.
    pub async fn commit(self) -> Result<(), DbErr> {
        let WriteTx {
            _counted,
            tx,
            _guard,
            noted,
            commit_hook,
            generation,
        } = self;
        let committed = tx.commit().await;
        // Counted whatever the answer: a failed commit may still have written. Before the
        // caller learns of the commit, so a read that follows it cannot use an older view.
        generation.fetch_add(1, Ordering::AcqRel);
        committed?;
        drop(_guard);
        drop(_counted);
        let noted = noted
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !noted.is_empty()
            && let Some(hook) = commit_hook.0.get()
        {
            hook(noted);
        }
        Ok(())
    }

    /// Ends the transaction without writing anything (it wrote nothing, or must not).
    pub async fn rollback(self) -> Result<(), DbErr> {
        self.tx.rollback().await
    }

    /// Notes these keys for the commit hook, told once this transaction commits (each key
    /// once); a rollback forgets them.
    pub fn note_for_commit(&self, keys: impl IntoIterator<Item = String>) {
        let mut noted = self
            .noted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for key in keys {
            if !noted.contains(&key) {
                noted.push(key);
            }
        }
    }
}

impl Db {
    /// Connects to `url` (`sqlite://…` or `postgres://…`). A SQLite file's folder is created
    /// if missing; the database runs in WAL mode with a busy timeout.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db, DbErr> {
        Self::connect_checkpointing(url, max_connections, false).await
    }

    /// As [`Db::connect`]; with `from_the_side` on SQLite, no commit checkpoints the log (that
    /// would hold the write lock through the copy): the caller runs [`Db::checkpoint`]
    /// regularly instead (the server does, every 200 ms). Without it, SQLite checkpoints at
    /// its default of every 1,000 pages.
    pub async fn connect_checkpointing(
        url: &str,
        max_connections: u32,
        from_the_side: bool,
    ) -> Result<Db, DbErr> {
        let folder = sqlite_file(url)
            .and_then(|f| Path::new(f).parent())
            .filter(|p| !p.as_os_str().is_empty());
        if let Some(folder) = folder {
            std::fs::create_dir_all(folder)
                .map_err(|e| DbErr::Custom(format!("cannot create {}: {e}", folder.display())))?;
        }
        let mut options = ConnectOptions::new(url.to_owned());
        options
            .max_connections(max_connections.max(1))
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(10))
            // A connection is pinged before use only after a quiet minute (one dropped by the
            // server or a firewall), not on every checkout: a ping is a round trip of its own,
            // and on SQLite a hand-off to the connection's thread and back.
            .test_before_acquire_if_idle_for(Duration::from_secs(60))
            .sqlx_logging(false);
        crate::health::discard_if_in_transaction(&mut options);
        let mut writer = options.clone();
        options.map_sqlx_sqlite_opts(move |opts| pooled(opts, from_the_side));
        let mut db = Self::connect_with(options).await?;
        if db.backend() == DatabaseBackend::Sqlite && sqlite_file(url).is_some() {
            writer.max_connections(1).map_sqlx_sqlite_opts(move |opts| {
                pooled(opts, from_the_side).pragma("cache_size", WRITER_CACHE_KIB)
            });
            db.writer = Some(Database::connect(writer).await?);
        }
        Ok(db)
    }

    pub async fn connect_with(options: ConnectOptions) -> Result<Db, DbErr> {
        let url = options.get_url().to_owned();
        let conn = Database::connect(options).await?;
        let sqlite_dir = sqlite_file(&url).map(|f| {
            Path::new(f)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        });
        let health = Arc::new(DbHealth::new(url, conn.get_database_backend(), sqlite_dir));
        let write_lock = match conn.get_database_backend() {
            DatabaseBackend::Sqlite => Some(Arc::new(Mutex::new(()))),
            _ => None,
        };
        Ok(Db {
            conn,
            write_lock,
            writers: Arc::default(),
            commit_hook: Arc::default(),
            generation: Arc::default(),
            health,
            restarter: Arc::default(),
            writer: None,
        })
    }

    /// The database's health as this process sees it ([`crate::health`]).
    pub fn health(&self) -> &Arc<DbHealth> {
        &self.health
    }

    /// Now by the database's clock: what leases, which several instances read, are written
    /// and compared with.
    pub fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        self.health.clock_now()
    }

    pub fn backend(&self) -> DatabaseBackend {
        self.conn.get_database_backend()
    }

    /// Begins a transaction that will write. On SQLite it is `BEGIN IMMEDIATE`: it takes the
    /// database's write lock first (waiting up to the busy timeout), so a transaction that
    /// reads and then writes never finds its snapshot outdated by another process's write.
    pub async fn begin_write(&self) -> Result<WriteTx, DbErr> {
        let counted = self
            .write_lock
            .is_some()
            .then(|| CountedWriter::new(&self.writers));
        self.begin(counted).await
    }

    /// A write transaction of work that may wait (claiming emails to send): on SQLite it first
    /// stands aside ([`Db::stand_aside`]). Elsewhere as [`Db::begin_write`].
    pub async fn begin_background_write(&self) -> Result<WriteTx, DbErr> {
        self.stand_aside().await;
        self.begin(None).await
    }

    /// On SQLite, waits while other writers wait for the write lock or hold it, for at most
    /// [`BACKGROUND_PATIENCE`], so that work that may wait (sending an email, then recording
    /// it) starts in a gap rather than queuing ahead of money movements. It only lowers the
    /// odds: a writer that comes a moment later still waits for a transaction begun in the gap.
    pub async fn stand_aside(&self) {
        if self.write_lock.is_none() {
            return;
        }
        let started = std::time::Instant::now();
        while self.writers.load(Ordering::Acquire) > 0 && started.elapsed() < BACKGROUND_PATIENCE {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn begin(&self, counted: Option<CountedWriter>) -> Result<WriteTx, DbErr> {
        let guard = match &self.write_lock {
            Some(lock) => Some(lock.clone().lock_owned().await),
            None => None,
        };
        let tx = match self.backend() {
            DatabaseBackend::Sqlite => {
                self.writer
                    .as_ref()
                    .unwrap_or(&self.conn)
                    .begin_with_options(TransactionOptions {
                        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                        ..TransactionOptions::default()
                    })
                    .await?
            }
            _ => self.conn.begin().await?,
        };
        Ok(WriteTx {
            _counted: counted,
            tx,
            _guard: guard,
            noted: StdMutex::new(Vec::new()),
            commit_hook: self.commit_hook.clone(),
            generation: self.generation.clone(),
        })
    }

    /// Sets what runs after a commit that noted keys ([`WriteTx::note_for_commit`]), once per
    /// process.
    pub fn after_commit(&self, hook: impl Fn(Vec<String>) + Send + Sync + 'static) {
        let _ = self.commit_hook.0.set(Box::new(hook));
    }

    /// The count of this process's committed write transactions (see [`Db`]). It says nothing
    /// of other processes' writes: only a database no other process writes (SQLite, which the
    /// service locks) may use it to keep views.
    pub fn write_generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// On SQLite, copies the write-ahead log into the database file as far as no reader still
    /// needs it (a passive checkpoint). It takes neither SQLite's write lock nor this
    /// process's, so writers go on meanwhile. Answers the pages in the log and how many of
    /// them are in the database file now; `None` on PostgreSQL.
    ///
    /// A log past [`RESTART_AFTER_PAGES`], all but [`RESTART_BACKLOG_PAGES`] of it copied, is
    /// then started over: under this process's write lock, the rest is copied and readers of
    /// the log's older pages are waited for (at most [`RESTART_PATIENCE`]), so that the next
    /// commit writes the log from its start. Otherwise a log that always has a reader is never
    /// started over while the service is busy: it grows by every commit (to gigabytes in a run
    /// of a million payouts), and each page written past its end costs the file system a new
    /// block, zeroed.
    pub async fn checkpoint(&self) -> Result<Option<(i64, i64)>, DbErr> {
        if self.backend() != DatabaseBackend::Sqlite {
            return Ok(None);
        }
        let pages = checkpoint_on(&self.conn, PASSIVE).await?;
        match pages {
            Some((log, copied))
                if log >= RESTART_AFTER_PAGES && log - copied <= RESTART_BACKLOG_PAGES =>
            {
                self.restart_log().await
            }
            _ => Ok(pages),
        }
    }

    /// The restart of [`Db::checkpoint`], on a connection of its own that waits for readers at
    /// most [`RESTART_PATIENCE`]; a restart they hold up is left to a later checkpoint.
    async fn restart_log(&self) -> Result<Option<(i64, i64)>, DbErr> {
        let Some(write_lock) = &self.write_lock else {
            return Ok(None);
        };
        let mut restarter = self.restarter.lock().await;
        let conn = match restarter.take() {
            Some(conn) => conn,
            None => {
                let mut options = ConnectOptions::new(self.health.url.clone());
                options
                    .max_connections(1)
                    .min_connections(0)
                    .sqlx_logging(false)
                    .map_sqlx_sqlite_opts(|opts| {
                        logged(opts)
                            .busy_timeout(RESTART_PATIENCE)
                            .create_if_missing(false)
                    });
                Database::connect(options).await?
            }
        };
        let pages = {
            let _writers_wait = write_lock.clone().lock_owned().await;
            checkpoint_on(&conn, RESTART).await
        };
        // Kept while it answers; opened afresh after an error.
        if pages.is_ok() {
            *restarter = Some(conn);
        }
        pages
    }

    /// On PostgreSQL, refreshes the planner's statistics of `table` (`ANALYZE`), after a
    /// write that changed much of it: until then a planner that has none, or old ones, may
    /// take a run's new payouts for a few rows and read them all for each page of a walk.
    /// It samples the table and takes no lock that writers or readers wait for; it is skipped
    /// (`SKIP_LOCKED`) rather than waited for where another `ANALYZE` or a `VACUUM` of the
    /// table holds it, so the answer of the write that called it is never held up. PostgreSQL
    /// analyses only tables the service's role owns (elsewhere it warns and does nothing).
    /// Nothing on SQLite, whose planner does not need it here.
    pub async fn analyze(&self, table: &str) -> Result<(), DbErr> {
        if self.backend() != DatabaseBackend::Postgres {
            return Ok(());
        }
        use sea_orm::ConnectionTrait as _;
        self.conn
            .execute_unprepared(&format!(
                "ANALYZE (SKIP_LOCKED) \"{}\"",
                table.replace('"', "\"\"")
            ))
            .await?;
        Ok(())
    }

    /// After a write of `rows` rows to `table`: refreshes its statistics when that is many
    /// ([`Db::ANALYZE_AFTER_ROWS`] or more; see [`Db::analyze`]). The write has committed, so
    /// a failure here is only logged.
    pub async fn analyze_after(&self, table: &str, rows: u64) {
        if rows < Self::ANALYZE_AFTER_ROWS {
            return;
        }
        if let Err(err) = self.analyze(table).await {
            tracing::warn!(%table, error = %err, "refreshing the table's statistics failed");
        }
    }

    /// Rows written at once above which [`Db::analyze_after`] refreshes a table's statistics.
    pub const ANALYZE_AFTER_ROWS: u64 = 5_000;

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), DbErr> {
        self.conn.ping().await
    }
}

/// The file path of a `sqlite://path?query` URL, if it names a file.
fn sqlite_file(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

/// The log's settings every connection of the service to a SQLite database has: write-ahead,
/// synced at checkpoints, cut back to [`LOG_SIZE_LIMIT`] when it starts over.
fn logged(opts: SqliteConnectOptions) -> SqliteConnectOptions {
    opts.journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .pragma("journal_size_limit", LOG_SIZE_LIMIT)
}

/// The settings of every connection of the service's pools to a SQLite database: the log's,
/// a busy timeout, foreign keys, and who checkpoints ([`Db::connect_checkpointing`]).
fn pooled(opts: SqliteConnectOptions, from_the_side: bool) -> SqliteConnectOptions {
    logged(opts)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true)
        .row_buffer_size(4096)
        .pragma(
            "wal_autocheckpoint",
            if from_the_side { "0" } else { "1000" },
        )
}

/// A checkpoint that copies what no reader needs, taking no lock.
const PASSIVE: &str = "PRAGMA wal_checkpoint(PASSIVE)";

/// A checkpoint that copies all, then waits for readers of the log (the connection's busy
/// timeout) so that the next commit writes it from its start.
const RESTART: &str = "PRAGMA wal_checkpoint(RESTART)";

/// The checkpoint `pragma` ([`PASSIVE`], [`RESTART`]) on `conn`: the pages in the log and how
/// many of them are in the database file now.
async fn checkpoint_on(
    conn: &DatabaseConnection,
    pragma: &'static str,
) -> Result<Option<(i64, i64)>, DbErr> {
    use sea_orm::ConnectionTrait as _;
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(
            DatabaseBackend::Sqlite,
            pragma,
        ))
        .await?;
    Ok(match row {
        Some(row) => Some((row.try_get_by_index(1)?, row.try_get_by_index(2)?)),
        None => None,
    })
}

#[cfg(test)]
mod tests;
