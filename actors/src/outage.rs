//! How a worker lives through an outage of what it depends on (the database, mostly): it logs
//! the first failure and the recovery, not every try (CONTRACT §13), and waits longer between
//! tries the longer the outage lasts, up to a bound, so a dead database is not hammered and a
//! recovered one is used again within seconds.

use std::time::{Duration, Instant};

/// The first wait after a failure.
const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between tries.
const LONGEST_WAIT: Duration = Duration::from_secs(4);

/// One worker's view of one kind of failure.
#[derive(Debug)]
pub struct Outage {
    what: &'static str,
    since: Option<Instant>,
    tries: u32,
}

impl Outage {
    /// `what` names the work in the log lines ("run leases could not be renewed").
    pub const fn new(what: &'static str) -> Outage {
        Outage {
            what,
            since: None,
            tries: 0,
        }
    }

    /// Notes a failure: the first of an outage is logged at WARN, the rest at DEBUG. Answers
    /// how long to wait before the next try.
    pub fn failed(&mut self, err: &dyn std::fmt::Display) -> Duration {
        if self.since.is_none() {
            self.since = Some(Instant::now());
            tracing::warn!(error = %err, "{}; trying again (logged once until it works)", self.what);
        } else {
            tracing::debug!(error = %err, tries = self.tries, "{}", self.what);
        }
        self.tries = self.tries.saturating_add(1);
        backoff(self.tries)
    }

    /// Notes a success: the end of an outage is logged once.
    pub fn succeeded(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                after_seconds = since.elapsed().as_secs_f64(),
                tries = self.tries,
                "{}: works again",
                self.what
            );
        }
        self.tries = 0;
    }

    pub fn is_failing(&self) -> bool {
        self.since.is_some()
    }

    /// How long to wait before the next try, as [`Outage::failed`] last answered (none while
    /// nothing fails).
    pub fn wait(&self) -> Duration {
        if self.tries == 0 {
            Duration::ZERO
        } else {
            backoff(self.tries)
        }
    }
}

/// 250 ms, doubled each try, at most 4 s.
fn backoff(tries: u32) -> Duration {
    let doubled = FIRST_WAIT.saturating_mul(1u32 << tries.saturating_sub(1).min(8));
    doubled.min(LONGEST_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_a_bound_and_reset_on_success() {
        let mut outage = Outage::new("test work failed");
        let waits: Vec<u128> = (0..7).map(|_| outage.failed(&"down").as_millis()).collect();
        assert_eq!(waits, vec![250, 500, 1000, 2000, 4000, 4000, 4000]);
        assert!(outage.is_failing());
        outage.succeeded();
        assert!(!outage.is_failing());
        assert_eq!(outage.wait(), Duration::ZERO);
        assert_eq!(outage.failed(&"down again").as_millis(), 250);
    }
}
