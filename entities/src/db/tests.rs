use super::{Db, PASSIVE, RESTART_AFTER_PAGES, checkpoint_on, sqlite_file};
use sea_orm::{DatabaseBackend, TransactionTrait as _};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_background_writer_goes_after_the_writers_waiting_for_the_lock() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
    let db = Db::connect(&url, 4).await.expect("database");
    let first = db.begin_write().await.expect("transaction");
    // Asks before the second writer does, and still goes after it.
    let background = tokio::spawn({
        let db = db.clone();
        async move {
            let tx = db.begin_background_write().await.expect("transaction");
            let began = Instant::now();
            tx.commit().await.expect("transaction");
            began
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = tokio::spawn({
        let db = db.clone();
        async move {
            let tx = db.begin_write().await.expect("transaction");
            tokio::time::sleep(Duration::from_millis(30)).await;
            tx.commit().await.expect("transaction");
            Instant::now()
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    first.commit().await.expect("transaction");
    let second_done = second.await.expect("transaction");
    let background_began = background.await.expect("transaction");
    assert!(background_began >= second_done);
}

/// A SQLite database in a folder of its own, with a table `t`, whose log only a
/// checkpoint from the side copies.
async fn log_db(connections: u32) -> (tempfile::TempDir, Db) {
    use sea_orm::ConnectionTrait as _;
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
    let db = Db::connect_checkpointing(&url, connections, true)
        .await
        .expect("database");
    db.conn
        .execute_unprepared("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        .await
        .expect("table");
    (dir, db)
}

/// Commits `rows` rows of 500 bytes to `t`.
async fn write_rows(db: &Db, rows: u32) {
    use sea_orm::ConnectionTrait as _;
    let tx = db.begin_write().await.expect("transaction");
    tx.execute_raw(sea_orm::Statement::from_sql_and_values(
        DatabaseBackend::Sqlite,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) \
         INSERT INTO t (v) SELECT printf('%.500c', 'x') FROM n",
        [rows.into()],
    ))
    .await
    .expect("rows");
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn commits_leave_the_log_to_a_checkpoint_from_the_side() {
    let (dir, db) = log_db(2).await;
    // Far more pages than SQLite's own default of 1,000 between checkpoints.
    for _ in 0..20 {
        write_rows(&db, 2_000).await;
    }
    let wal = dir.path().join("t.db-wal");
    let logged = std::fs::metadata(&wal).expect("log").len();
    assert!(
        logged > 2_500 * 4096,
        "no commit checkpointed: {logged} bytes"
    );
    let (pages, copied) = db.checkpoint().await.expect("checkpoint").expect("SQLite");
    assert!(pages > 5_000, "{pages} pages");
    assert_eq!(copied, pages, "nothing reads: the whole log is copied");
}

#[tokio::test]
async fn a_long_log_starts_over_unless_a_reader_holds_it() {
    use sea_orm::ConnectionTrait as _;
    let (_dir, db) = log_db(3).await;
    let log_pages = || async {
        checkpoint_on(&db.conn, PASSIVE)
            .await
            .expect("checkpoint")
            .expect("SQLite")
            .0
    };
    for _ in 0..24 {
        write_rows(&db, 2_000).await;
    }

    // A reader whose snapshot needs pages still only in the log holds the restart up: the
    // checkpoint gives up after its patience (not the busy timeout of 10 s), and writers
    // go on.
    let reader = db.conn.begin().await.expect("read transaction");
    reader
        .query_one_raw(sea_orm::Statement::from_string(
            DatabaseBackend::Sqlite,
            "SELECT count(*) FROM t",
        ))
        .await
        .expect("read");
    write_rows(&db, 10).await;
    let started = Instant::now();
    db.checkpoint().await.expect("checkpoint");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    write_rows(&db, 10).await;
    let pages = log_pages().await;
    assert!(
        pages > RESTART_AFTER_PAGES,
        "held by the reader: {pages} pages"
    );

    // Once it is gone, the next checkpoint starts the log over: the next commit writes it
    // from its start.
    reader.commit().await.expect("end of the read");
    db.checkpoint().await.expect("checkpoint");
    write_rows(&db, 10).await;
    let pages = log_pages().await;
    assert!(pages < 100, "the log started over: {pages} pages");
    let rows = db
        .conn
        .query_one_raw(sea_orm::Statement::from_string(
            DatabaseBackend::Sqlite,
            "SELECT count(*) FROM t",
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get_by_index::<i64>(0)
        .expect("count");
    assert_eq!(rows, 24 * 2_000 + 3 * 10, "every row is there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_starts_over_under_steady_readers() {
    use sea_orm::ConnectionTrait as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_dir, db) = log_db(4).await;
    // Three readers, one snapshot after another, so that some reader is nearly always in one
    // (without the restart the log grows by every commit: 7,659 pages here).
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (db, stop) = (db.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let tx = db.conn.begin().await.expect("read transaction");
                    tx.query_one_raw(sea_orm::Statement::from_string(
                        DatabaseBackend::Sqlite,
                        "SELECT max(id) FROM t",
                    ))
                    .await
                    .expect("read");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    tx.commit().await.expect("end of the read");
                }
            })
        })
        .collect();
    let mut most = 0;
    for _ in 0..30 {
        write_rows(&db, 2_000).await;
        let (pages, _) = db.checkpoint().await.expect("checkpoint").expect("SQLite");
        most = most.max(pages);
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("reader");
    }
    // 30 commits of about 250 pages each: a log never started over would hold 7,500.
    assert!(
        most < RESTART_AFTER_PAGES + 1_000,
        "the log reached {most} pages"
    );
}

#[test]
fn sqlite_file_of_url() {
    assert_eq!(
        sqlite_file("sqlite://data/payroll.db?mode=rwc"),
        Some("data/payroll.db")
    );
    assert_eq!(sqlite_file("sqlite::memory:"), None);
    assert_eq!(sqlite_file("postgres://x"), None);
}

/// The number the first column of `sql`'s first row holds, read on `conn`.
async fn number_of<C: sea_orm::ConnectionTrait>(conn: &C, sql: &str) -> i64 {
    conn.query_one_raw(sea_orm::Statement::from_string(
        DatabaseBackend::Sqlite,
        sql,
    ))
    .await
    .expect(sql)
    .and_then(|r| r.try_get_by_index(0).ok())
    .expect("a number")
}

#[tokio::test]
async fn writes_take_turns_on_one_connection_with_a_larger_cache() {
    use sea_orm::ConnectionTrait as _;
    let (_dir, db) = log_db(4).await;
    assert_eq!(
        number_of(&db.conn, "PRAGMA cache_size").await,
        -2000,
        "a reader's default"
    );
    for _ in 0..3 {
        let tx = db.begin_write().await.expect("transaction");
        assert_eq!(
            number_of(&*tx, "PRAGMA cache_size").await,
            -32768,
            "a write on the writing connection"
        );
        // A temporary table lives on its connection: the next write finds the last one's.
        tx.execute_unprepared("CREATE TEMP TABLE IF NOT EXISTS mark (n INTEGER)")
            .await
            .expect("mark");
        tx.execute_unprepared("INSERT INTO temp.mark VALUES (1)")
            .await
            .expect("mark");
        tx.commit().await.expect("commit");
    }
    let tx = db.begin_write().await.expect("transaction");
    assert_eq!(number_of(&*tx, "SELECT COUNT(*) FROM temp.mark").await, 3);
}

/// A write transaction that SQLite ended by itself (as on a full disk) makes the rollback on
/// drop fail. The writes after it still reach the database, seen from another connection: the
/// connection sqlx counts inside a transaction is not handed out again.
#[tokio::test]
async fn writes_after_a_transaction_sqlite_ended_by_itself_are_committed() {
    use sea_orm::ConnectionTrait as _;
    let (_dir, db) = log_db(4).await;
    let tx = db.begin_write().await.expect("transaction");
    tx.execute_unprepared("INSERT INTO t (v) VALUES ('lost')")
        .await
        .expect("insert");
    // What SQLite does on some errors: the transaction is gone, sqlx does not know it.
    tx.execute_unprepared("ROLLBACK").await.expect("ended");
    drop(tx);
    // A write that fails in turn and is rolled back.
    let tx = db.begin_write().await.expect("transaction");
    tx.execute_unprepared("INSERT INTO t (v) VALUES ('refused')")
        .await
        .expect("insert");
    drop(tx);
    for _ in 0..3 {
        let tx = db.begin_write().await.expect("transaction");
        tx.execute_unprepared("INSERT INTO t (v) VALUES ('kept')")
            .await
            .expect("insert");
        tx.commit().await.expect("commit");
    }
    let reader = db.conn.begin().await.expect("read transaction");
    assert_eq!(
        number_of(&reader, "SELECT COUNT(*) FROM t WHERE v = 'kept'").await,
        3,
        "the commits are seen by another connection"
    );
    assert_eq!(number_of(&reader, "SELECT COUNT(*) FROM t").await, 3);
}
