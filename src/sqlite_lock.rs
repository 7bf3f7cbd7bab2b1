//! One `payroll serve` per SQLite file: two processes working the same runs could pay one run
//! twice, so the server holds an exclusive lock on `<database file>.lock` for as long as it
//! runs (the operating system drops it when the process ends, `kill -9` included). The admin
//! commands do not take it: they are meant to run beside the server. Several instances are
//! for PostgreSQL, whose leases share the work.

use std::{
    fs::{File, OpenOptions, TryLockError},
    path::PathBuf,
};

use anyhow::Context as _;

/// The database file of a SQLite URL; `None` for PostgreSQL and for in-memory databases.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// Takes the lock of the SQLite database at `url`, or explains who holds it.
pub fn lock(url: &str) -> anyhow::Result<Option<File>> {
    let Some(database) = sqlite_file(url) else {
        return Ok(None);
    };
    let mut name = database.clone().into_os_string();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open the lock file {}", lock_path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => anyhow::bail!(
            "another `payroll serve` is running on the SQLite database {} (it holds {}); \
             stop it first — two servers on one SQLite file could pay a run twice. To run \
             several instances, use PostgreSQL (database.url = \"postgres://…\")",
            database.display(),
            lock_path.display()
        ),
        Err(TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("cannot lock {}", lock_path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(
            sqlite_file("sqlite://data/payroll.db?mode=rwc"),
            Some(PathBuf::from("data/payroll.db"))
        );
        assert_eq!(
            sqlite_file("sqlite:///var/lib/payroll.db"),
            Some(PathBuf::from("/var/lib/payroll.db"))
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://db?mode=memory&cache=shared"), None);
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }

    #[test]
    fn a_second_lock_on_one_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("p.db").display());
        let first = lock(&url).expect("first lock");
        assert!(first.is_some());
        let second = lock(&url).expect_err("second lock refused");
        assert!(
            second.to_string().contains("another `payroll serve`"),
            "{second}"
        );
        drop(first);
        assert!(lock(&url).expect("free again").is_some());
    }
}
