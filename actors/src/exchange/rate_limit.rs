//! The withdrawal rate limit of one exchange account, shared by every instance through the
//! database: in any window of t seconds at most `burst + rate·t` withdrawals are sent.
//!
//! It is a GCRA (the generic cell rate algorithm, a token bucket kept as one number): the row
//! holds the theoretical arrival time `tat` of the next token. Taking k tokens at `now` moves
//! it to `max(tat, now) + k·T` (T = 1/rate), allowed while that is at most `burst·T` ahead of
//! `now`. Each instance takes its tokens in a transaction that locks the row, so two instances
//! never spend the same token. Instances compare their wall clocks through it: keep them in
//! sync (NTP); a skew of d lets at most `rate·d` more through.

use std::time::Duration;

use chrono::Utc;
use payroll_entities::{db::Db, rate_limit};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    sea_query::OnConflict,
};

/// What one take decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    pub granted: usize,
    /// The new theoretical arrival time.
    pub tat_us: i64,
    /// How long until one more token, when fewer were granted than wanted.
    pub wait_us: i64,
}

/// One GCRA step: take up to `wanted` tokens at `now_us` with one token per `interval_us`
/// and bursts of `burst`.
pub fn gcra_take(tat_us: i64, now_us: i64, interval_us: i64, burst: i64, wanted: usize) -> Take {
    let interval = interval_us.max(1);
    let burst = burst.max(1);
    let base = tat_us.max(now_us);
    let room = (now_us + burst * interval - base)
        .div_euclid(interval)
        .max(0);
    let granted = room.min(wanted as i64);
    let tat = base + granted * interval;
    let wait_us = if (granted as usize) < wanted {
        (tat - (burst - 1) * interval - now_us).max(0)
    } else {
        0
    };
    Take {
        granted: granted as usize,
        tat_us: tat,
        wait_us,
    }
}

/// The rate limit of one exchange account, kept in the `rate_limits` row `name`.
#[derive(Debug, Clone)]
pub struct SharedRateLimit {
    db: Db,
    name: String,
    /// Microseconds per token; 0 means no limit.
    interval_us: i64,
    burst: i64,
}

impl SharedRateLimit {
    pub fn new(db: Db, name: impl Into<String>, per_second: u32, burst: u32) -> SharedRateLimit {
        SharedRateLimit {
            db,
            name: name.into(),
            interval_us: if per_second == 0 {
                0
            } else {
                // Rounded up: a shorter interval would let more than the rate through.
                (1_000_000 + i64::from(per_second) - 1) / i64::from(per_second)
            },
            burst: i64::from(burst.max(1)),
        }
    }

    /// Tokens per second (0: no limit) and the burst.
    pub fn limits(&self) -> (f64, f64) {
        if self.is_unlimited() {
            (0.0, self.burst as f64)
        } else {
            (1_000_000.0 / self.interval_us as f64, self.burst as f64)
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.interval_us == 0
    }

    /// Takes up to `wanted` tokens; returns how many, how long until the next one when none
    /// was left, and how many whole tokens are left.
    pub async fn take(&self, wanted: usize) -> Result<(usize, Duration, i64), DbErr> {
        if self.is_unlimited() || wanted == 0 {
            return Ok((wanted, Duration::ZERO, self.burst));
        }
        let tx = self.db.begin_write().await?;
        // The row exists before it is locked, so two first takes (two instances on PostgreSQL)
        // cannot both start from a full bucket.
        rate_limit::Entity::insert(rate_limit::ActiveModel {
            name: Set(self.name.clone()),
            tat_us: Set(0),
        })
        .on_conflict(
            OnConflict::column(rate_limit::Column::Name)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(&*tx)
        .await?;
        let tat_us = rate_limit::Entity::find_by_id(self.name.clone())
            .lock_exclusive()
            .one(&*tx)
            .await?
            .map_or(0, |row| row.tat_us);
        // By the database's clock, as every instance sharing the row reads it.
        let now_us = (Utc::now() + self.db.health().clock_offset()).timestamp_micros();
        let take = gcra_take(tat_us, now_us, self.interval_us, self.burst, wanted);
        if take.granted > 0 {
            rate_limit::Entity::update_many()
                .col_expr(
                    rate_limit::Column::TatUs,
                    sea_orm::sea_query::Expr::value(take.tat_us),
                )
                .filter(rate_limit::Column::Name.eq(self.name.as_str()))
                .exec(&*tx)
                .await?;
        }
        tx.commit().await?;
        let left = (now_us + self.burst * self.interval_us - take.tat_us)
            .div_euclid(self.interval_us)
            .clamp(0, self.burst);
        Ok((
            take.granted,
            Duration::from_micros(u64::try_from(take.wait_us).unwrap_or(0)),
            left,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let interval = SECOND / 6;
        let t0 = 1_000 * SECOND;
        let first = gcra_take(0, t0, interval, 6, 10);
        assert_eq!(first.granted, 6);
        assert_eq!(first.wait_us, interval, "one more token one interval on");
        let none = gcra_take(first.tat_us, t0, interval, 6, 1);
        assert_eq!(none.granted, 0);
        let half = gcra_take(first.tat_us, t0 + SECOND / 2, interval, 6, 10);
        assert_eq!(half.granted, 3);
        let later = gcra_take(half.tat_us, t0 + 10 * SECOND, interval, 6, 10);
        assert_eq!(later.granted, 6, "capped at the burst");
    }

    #[test]
    fn never_more_than_burst_plus_rate_times_t() {
        let interval = SECOND / 5;
        let t0 = 1_000 * SECOND;
        let mut tat = 0;
        let mut taken = 0;
        for ms in (0..=2000).step_by(7) {
            let take = gcra_take(tat, t0 + ms * 1000, interval, 3, 100);
            tat = take.tat_us;
            taken += take.granted;
        }
        assert!(taken <= 3 + 10, "{taken}");
        assert!(taken >= 12, "{taken}");
    }

    #[test]
    fn the_wait_leads_to_a_token() {
        let interval = SECOND / 8;
        let t0 = 1_000 * SECOND;
        let mut tat = 0;
        let mut now = t0;
        for _ in 0..50 {
            let take = gcra_take(tat, now, interval, 3, 2);
            tat = take.tat_us;
            if take.granted < 2 {
                let next = gcra_take(tat, now + take.wait_us, interval, 3, 1);
                assert_eq!(next.granted, 1, "a token is there after the wait");
                now += take.wait_us;
            }
        }
    }

    #[test]
    fn two_takers_share_one_budget() {
        // Two instances alternating on the same row get no more together than one alone.
        let interval = SECOND / 4;
        let t0 = 1_000 * SECOND;
        let mut tat = 0;
        let mut taken = 0;
        for step in 0..400 {
            let take = gcra_take(tat, t0 + step * 5_000, interval, 2, 1);
            tat = take.tat_us;
            taken += take.granted;
        }
        // 2 s: at most 2 + 4·2.
        assert!(taken <= 10, "{taken}");
    }
}
