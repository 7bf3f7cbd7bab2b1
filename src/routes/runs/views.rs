//! Runs as `GET /payroll-runs/{run_id}` shows them, kept between reads. A view is served while
//! no change has committed since it was read, so a read never answers older than the last
//! write acknowledged before it, whichever instance made it:
//!
//! - SQLite (which the service locks: this process is its one writer): every write transaction
//!   of the process counts ([`payroll_entities::db::Db::write_generation`]); the first commit
//!   after a view was read retires it.
//! - PostgreSQL (several instances may write): every change to a run or a job is announced as
//!   it commits, and a read first waits until every change committed before it began has been
//!   heard ([`crate::http::announcements::RunChanges::generation`]). Where that cannot be known
//!   (the channel is down), the read goes to the database and keeps nothing.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use payroll_entities::db::Db;

use crate::http::announcements::RunChanges;

/// Views kept at most; past it the cache starts afresh.
const MAX_VIEWS: usize = 4096;

/// The runs' views, serialized as the JSON of a
/// [`payroll_actors::views::RunResource`]: a read served from here
/// copies the bytes in.
pub type RunViews = Views<Vec<u8>>;

/// Views by id, each read at a write generation.
pub struct Views<V> {
    changes: Changes,
    kept: Mutex<Kept<V>>,
}

/// Where a view's generation comes from.
pub enum Changes {
    /// This process's write transactions (it is the database's one writer).
    Local(Db),
    /// Changes announced by every instance.
    Announced(Arc<RunChanges>),
}

struct Kept<V> {
    generation: u64,
    views: HashMap<String, Arc<V>>,
}

impl<V> Default for Kept<V> {
    fn default() -> Kept<V> {
        Kept {
            generation: 0,
            views: HashMap::new(),
        }
    }
}

impl<V> Views<V> {
    pub fn new(changes: Changes) -> Views<V> {
        Views {
            changes,
            kept: Mutex::default(),
        }
    }

    /// The generation a read begins at, taken before it reads: every change acknowledged
    /// before this call counts in it. `None`: nothing is kept, read the database.
    pub async fn generation(&self) -> Option<u64> {
        match &self.changes {
            Changes::Local(db) => Some(db.write_generation()),
            Changes::Announced(changes) => changes.generation().await,
        }
    }

    /// The view of `run_id` read at `generation`, if it is still that.
    pub fn get(&self, generation: u64, id: &str) -> Option<Arc<V>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.generation != generation {
            return None;
        }
        kept.views.get(id).cloned()
    }

    /// Keeps a view read at `generation` (taken before the read began).
    pub fn put(&self, generation: u64, id: String, view: Arc<V>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if generation < kept.generation {
            return; // read before a write the cache already knows of
        }
        if generation > kept.generation || kept.views.len() >= MAX_VIEWS {
            kept.views.clear();
            kept.generation = generation;
        }
        kept.views.insert(id, view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(views: &Views<&'static str>, generation: u64, id: &'static str) {
        views.put(generation, id.to_owned(), Arc::new(id));
    }

    #[test]
    fn a_view_lasts_until_the_next_commit() {
        let views = Views::new(Changes::Announced(Arc::new(RunChanges::new("i"))));
        put(&views, 3, "run_a");
        assert!(views.get(3, "run_a").is_some());
        assert!(views.get(3, "run_b").is_none());
        // A commit since: the view is retired, and a view read before it is not kept.
        assert!(views.get(4, "run_a").is_none());
        put(&views, 4, "run_b");
        put(&views, 3, "run_a");
        assert!(views.get(4, "run_a").is_none());
        assert!(views.get(4, "run_b").is_some());
    }
}
