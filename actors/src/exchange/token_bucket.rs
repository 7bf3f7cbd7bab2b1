//! A token bucket: in any window of t seconds at most `burst + rate·t` tokens are taken.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens per second; 0 means no limit.
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(rate_per_second: u32, burst: u32, now: Instant) -> TokenBucket {
        let capacity = f64::from(burst.max(1));
        TokenBucket {
            rate: f64::from(rate_per_second),
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.rate == 0.0
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.last = now;
    }

    /// Tokens per second (0: no limit) and the burst.
    pub fn limits(&self) -> (f64, f64) {
        (self.rate, self.capacity)
    }

    /// Tokens in the bucket now (a fraction counts as the part of a token it is).
    pub fn available(&mut self, now: Instant) -> f64 {
        if self.is_unlimited() {
            return self.capacity;
        }
        self.refill(now);
        self.tokens
    }

    /// Takes up to `wanted` whole tokens; returns how many were taken.
    pub fn take(&mut self, wanted: usize, now: Instant) -> usize {
        if self.is_unlimited() {
            return wanted;
        }
        self.refill(now);
        let whole = self.tokens.floor().max(0.0) as usize;
        let taken = whole.min(wanted);
        self.tokens -= taken as f64;
        taken
    }

    /// How long until the next whole token.
    pub fn wait_for_next(&mut self, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(6, 6, start);
        assert_eq!(bucket.take(10, start), 6);
        assert_eq!(bucket.take(1, start), 0);
        let wait = bucket.wait_for_next(start);
        assert!(
            wait > Duration::from_millis(160) && wait <= Duration::from_millis(167),
            "{wait:?}"
        );
        assert_eq!(bucket.take(10, start + Duration::from_millis(500)), 3);
        assert_eq!(
            bucket.take(10, start + Duration::from_secs(10)),
            6,
            "capped at the burst"
        );
    }

    #[test]
    fn never_more_than_burst_plus_rate_times_t() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5, 3, start);
        let mut taken = 0;
        for ms in (0..=2000).step_by(7) {
            taken += bucket.take(100, start + Duration::from_millis(ms));
        }
        assert!(taken <= 3 + 10, "{taken}");
        assert!(taken >= 12, "{taken}");
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let now = Instant::now();
        let mut bucket = TokenBucket::new(0, 1, now);
        assert_eq!(bucket.take(1000, now), 1000);
        assert_eq!(bucket.wait_for_next(now), Duration::ZERO);
    }
}
