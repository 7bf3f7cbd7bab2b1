//! Verified API keys, held for a moment by their keyed hash so a busy key is not read from the
//! database on every request. Whether a held key is usable is still decided per request
//! (revocation, expiry and rotation grace are checked against its row as held).
//!
//! Revoking or rotating a key through this process forgets it at once, and a lookup that was
//! already under way when that happened is not stored. On PostgreSQL the change is also
//! announced (`NOTIFY payroll_api_keys` in the transaction that makes it), and every instance
//! listening forgets the key as the change commits ([`super::announcements::listen`]); were that
//! channel down, a key changed elsewhere would stop working here within [`KEY_CACHE_TTL`],
//! and the cache is emptied whenever the channel comes back.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use payroll_entities::api_key;

/// How long a key read from the database is used without reading it again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(1);

/// Past this many entries, stale ones are dropped when a new one is stored.
const PRUNE_ABOVE: usize = 1024;

#[derive(Default)]
struct Entries {
    /// Bumped by every `forget`: a lookup that began before it must not store what it read.
    generation: u64,
    by_hash: HashMap<String, (Instant, api_key::Model)>,
}

pub struct VerifiedKeys {
    ttl: Duration,
    entries: Mutex<Entries>,
}

/// Where a lookup began, to store its result only if nothing was forgotten meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct LookupStart(u64);

impl VerifiedKeys {
    pub fn new(ttl: Duration) -> VerifiedKeys {
        VerifiedKeys {
            ttl,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map holds no invariant a panicking holder could break half-way.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The held row of this key hash if it is fresh, else where a database lookup begins.
    pub fn get(&self, hash: &str) -> Result<api_key::Model, LookupStart> {
        let entries = self.lock();
        match entries.by_hash.get(hash) {
            Some((at, model)) if at.elapsed() < self.ttl => Ok(model.clone()),
            _ => Err(LookupStart(entries.generation)),
        }
    }

    /// Holds a row read from the database, unless a key was forgotten since `start`.
    pub fn store(&self, start: LookupStart, hash: String, model: api_key::Model) {
        let mut entries = self.lock();
        if entries.generation != start.0 {
            return;
        }
        if entries.by_hash.len() >= PRUNE_ABOVE {
            let ttl = self.ttl;
            entries.by_hash.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.by_hash.insert(hash, (Instant::now(), model));
    }

    /// Notes the `last_used_at` this process just wrote, so it is not written again at once.
    pub fn touched(&self, hash: &str, at: DateTime<Utc>) {
        if let Some((_, model)) = self.lock().by_hash.get_mut(hash) {
            model.last_used_at = Some(at);
        }
    }

    /// Forgets a key whose row changed (revoked, rotated).
    pub fn forget(&self, hash: &str) {
        let mut entries = self.lock();
        entries.generation += 1;
        entries.by_hash.remove(hash);
    }

    /// Forgets every key (a change may have been missed).
    pub fn forget_all(&self) {
        let mut entries = self.lock();
        entries.generation += 1;
        entries.by_hash.clear();
    }
}

/// The channel key changes are announced on (PostgreSQL).
pub const KEY_CHANNEL: &str = "payroll_api_keys";

/// Announces, in `conn`'s transaction, that the key with this hash changed: every instance
/// forgets it when the transaction commits. Nothing to do on SQLite (one process).
pub async fn announce_key_change<C: sea_orm::ConnectionTrait>(
    conn: &C,
    hash: &str,
) -> Result<(), sea_orm::DbErr> {
    if conn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        conn.execute_raw(sea_orm::Statement::from_sql_and_values(
            sea_orm::DatabaseBackend::Postgres,
            "SELECT pg_notify($1, $2)",
            [KEY_CHANNEL.into(), hash.into()],
        ))
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> api_key::Model {
        api_key::Model {
            id: id.to_owned(),
            lineage_id: id.to_owned(),
            name: "k".to_owned(),
            prefix: "mpk_live_abc".to_owned(),
            key_hash: format!("hash-{id}"),
            scopes: "payroll:read".to_owned(),
            expires_at: None,
            grace_expires_at: None,
            revoked_at: None,
            last_used_at: None,
            created_at: Utc::now(),
            rotated_from: None,
        }
    }

    #[test]
    fn a_stored_key_is_served_until_forgotten() {
        let keys = VerifiedKeys::new(Duration::from_secs(60));
        let start = keys.get("h").expect_err("empty");
        keys.store(start, "h".to_owned(), key("a"));
        assert_eq!(keys.get("h").map(|m| m.id).ok().as_deref(), Some("a"));
        keys.forget("h");
        assert!(keys.get("h").is_err());
    }

    #[test]
    fn a_lookup_overtaken_by_a_forget_is_not_stored() {
        let keys = VerifiedKeys::new(Duration::from_secs(60));
        let start = keys.get("h").expect_err("empty");
        keys.forget("h");
        keys.store(start, "h".to_owned(), key("a"));
        assert!(keys.get("h").is_err());
    }

    #[test]
    fn a_stale_entry_is_read_again() {
        let keys = VerifiedKeys::new(Duration::ZERO);
        let start = keys.get("h").expect_err("empty");
        keys.store(start, "h".to_owned(), key("a"));
        assert!(keys.get("h").is_err());
    }
}
