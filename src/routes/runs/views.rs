//! Runs as `GET /payroll-runs/{run_id}` shows them, kept between reads. Only on a database that
//! no other process writes (SQLite, which the service locks): a view is served while no write
//! transaction of this process has committed since the view was read
//! ([`payroll_entities::db::Db::write_generation`]); the first commit after it retires every
//! view. So a read never answers older than the last write acknowledged before it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use payroll_actors::views::RunResource;

/// Views kept at most; past it the cache starts afresh.
const MAX_VIEWS: usize = 4096;

/// The runs' views.
pub type RunViews = Views<RunResource>;

/// Views by id, each read at a write generation.
pub struct Views<V> {
    enabled: bool,
    kept: Mutex<Kept<V>>,
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
    /// `enabled` only where this process is the database's one writer.
    pub fn new(enabled: bool) -> Views<V> {
        Views {
            enabled,
            kept: Mutex::default(),
        }
    }

    /// The view of `run_id` read at `generation`, if it is still that.
    pub fn get(&self, generation: u64, id: &str) -> Option<Arc<V>> {
        if !self.enabled {
            return None;
        }
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.generation != generation {
            return None;
        }
        kept.views.get(id).cloned()
    }

    /// Keeps a view read at `generation` (taken before the read began).
    pub fn put(&self, generation: u64, id: String, view: Arc<V>) {
        if !self.enabled {
            return;
        }
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
        let views = Views::new(true);
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

    #[test]
    fn disabled_keeps_nothing() {
        let views = Views::new(false);
        put(&views, 1, "run_a");
        assert!(views.get(1, "run_a").is_none());
    }
}
