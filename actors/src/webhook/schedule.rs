//! When the next attempt of a failed delivery is due (CONTRACT §10): the retry's delay from
//! `webhooks.retry_schedule_ms`, plus a jitter of up to 10 % (only upward), which leaves the
//! rest of the contract's 20 % for claiming and scheduling.

use rand::Rng;

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Retry after this many milliseconds; this is retry number `retry` (1-based).
    RetryIn { delay_ms: u64, retry: i32 },
    /// No retry left.
    GiveUp,
}

/// The decision after a failed attempt of a delivery that has used `retries_used` retries.
pub fn after_failure(schedule: &[u64], retries_used: i32, manual: bool) -> AfterFailure {
    if manual {
        return AfterFailure::GiveUp;
    }
    let Ok(index) = usize::try_from(retries_used) else {
        return AfterFailure::GiveUp;
    };
    match schedule.get(index) {
        Some(&base) => AfterFailure::RetryIn {
            delay_ms: with_jitter(base, rand::thread_rng().gen_range(0.0..=0.1)),
            retry: retries_used + 1,
        },
        None => AfterFailure::GiveUp,
    }
}

/// `base` stretched by `fraction` (0 to 0.2).
pub fn with_jitter(base: u64, fraction: f64) -> u64 {
    let extra = (base as f64 * fraction.clamp(0.0, 0.2)).floor() as u64;
    base.saturating_add(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_the_schedule_with_upward_jitter() {
        let schedule = [10_000, 60_000, 300_000];
        for used in 0..3 {
            for _ in 0..50 {
                match after_failure(&schedule, used, false) {
                    AfterFailure::RetryIn { delay_ms, retry } => {
                        let base = schedule[used as usize];
                        assert!(
                            delay_ms >= base && delay_ms <= base + base / 10,
                            "{delay_ms}"
                        );
                        assert_eq!(retry, used + 1);
                    }
                    AfterFailure::GiveUp => panic!("a retry was left"),
                }
            }
        }
        assert_eq!(after_failure(&schedule, 3, false), AfterFailure::GiveUp);
        assert_eq!(after_failure(&schedule, 0, true), AfterFailure::GiveUp);
        assert_eq!(after_failure(&[], 0, false), AfterFailure::GiveUp);
    }

    #[test]
    fn jitter_is_bounded() {
        assert_eq!(with_jitter(1000, 0.0), 1000);
        assert_eq!(with_jitter(1000, 0.2), 1200);
        assert_eq!(with_jitter(1000, 5.0), 1200);
    }
}
