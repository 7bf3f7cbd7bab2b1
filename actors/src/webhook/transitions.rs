//! The delivery state table (CONTRACT §10), pure: what an attempt's outcome, a retry by hand or
//! the endpoint going away does to a delivery. The dispatcher records attempts with it and the
//! manual-retry route asks it; neither changes a status any other way.
//!
//! A failed attempt is retried after the delay of `webhooks.retry_schedule_ms` for the retry it
//! would be, stretched by a jitter of up to 10 % (only upward, which leaves the rest of the
//! contract's 20 % for claiming and scheduling). A delivery retried by hand gets one attempt.

use chrono::{DateTime, Utc};
use payroll_entities::DeliveryStatus;

/// What happens to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOp {
    /// An attempt was answered 2xx in time.
    Succeed,
    /// An attempt failed; `gone` when the receiver answered 410.
    Fail { gone: bool },
    /// A client asks for one more attempt of a finished delivery.
    RetryByHand,
    /// Its endpoint was disabled or deleted.
    EndpointGone,
}

/// A delivery as the table needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryState {
    pub status: DeliveryStatus,
    /// Scheduled retries already used.
    pub retries_used: i32,
    /// Retried by hand: no scheduled retries follow.
    pub manual: bool,
}

/// Where a delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// SUCCEEDED.
    Succeeded,
    /// Stays PENDING; its next attempt is scheduled retry number `retry`, due in `delay_ms`.
    RetryIn { delay_ms: u64, retry: i32 },
    /// FAILED; with `disables_endpoint` when it was the endpoint's last chance (a 410, or the
    /// last scheduled retry failing).
    Failed { disables_endpoint: bool },
    /// PENDING again, due now, for one attempt.
    Requeued,
}

impl Transition {
    pub fn status(self) -> DeliveryStatus {
        match self {
            Transition::Succeeded => DeliveryStatus::Succeeded,
            Transition::RetryIn { .. } | Transition::Requeued => DeliveryStatus::Pending,
            Transition::Failed { .. } => DeliveryStatus::Failed,
        }
    }

    /// When the next attempt is due, for a delivery that stays or becomes PENDING.
    pub fn next_attempt_at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Transition::RetryIn { delay_ms, .. } => Some(
                now + chrono::Duration::milliseconds(
                    i64::try_from(delay_ms).unwrap_or(i64::MAX / 4),
                ),
            ),
            Transition::Requeued => Some(now),
            Transition::Succeeded | Transition::Failed { .. } => None,
        }
    }
}

/// The refusal of an operation, with where the delivery can go from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub current: DeliveryStatus,
    pub allowed_transitions: &'static [DeliveryStatus],
}

/// The transition `op` makes, or the refusal. `jitter` is the upward stretch of a retry's
/// delay, 0 to 0.1 (the dispatcher draws it at random).
pub fn apply(
    delivery: DeliveryState,
    op: DeliveryOp,
    schedule: &[u64],
    jitter: f64,
) -> Result<Transition, Refused> {
    use DeliveryOp::*;
    use DeliveryStatus::*;
    match (delivery.status, op) {
        (Pending, Succeed) => Ok(Transition::Succeeded),
        (Pending, Fail { gone: true }) => Ok(Transition::Failed {
            disables_endpoint: true,
        }),
        (Pending, Fail { gone: false }) if delivery.manual => Ok(Transition::Failed {
            disables_endpoint: false,
        }),
        (Pending, Fail { gone: false }) => Ok(
            match usize::try_from(delivery.retries_used)
                .ok()
                .and_then(|used| schedule.get(used))
            {
                Some(&base) => Transition::RetryIn {
                    delay_ms: with_jitter(base, jitter),
                    retry: delivery.retries_used + 1,
                },
                None => Transition::Failed {
                    disables_endpoint: true,
                },
            },
        ),
        (Pending, EndpointGone) => Ok(Transition::Failed {
            disables_endpoint: false,
        }),
        (Succeeded | Failed, RetryByHand) => Ok(Transition::Requeued),
        (Pending, RetryByHand) => Err(Refused {
            current: Pending,
            allowed_transitions: &[Succeeded, Failed],
        }),
        (current @ (Succeeded | Failed), Succeed | Fail { .. } | EndpointGone) => Err(Refused {
            current,
            allowed_transitions: &[Pending],
        }),
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

    const SCHEDULE: [u64; 3] = [10_000, 60_000, 300_000];

    fn pending(retries_used: i32, manual: bool) -> DeliveryState {
        DeliveryState {
            status: DeliveryStatus::Pending,
            retries_used,
            manual,
        }
    }

    fn finished(status: DeliveryStatus) -> DeliveryState {
        DeliveryState {
            status,
            retries_used: 3,
            manual: false,
        }
    }

    #[test]
    fn failures_follow_the_schedule_then_disable_the_endpoint() {
        for used in 0..3 {
            for jitter in [0.0, 0.05, 0.1] {
                let t = apply(
                    pending(used, false),
                    DeliveryOp::Fail { gone: false },
                    &SCHEDULE,
                    jitter,
                );
                let base = SCHEDULE[used as usize];
                assert_eq!(
                    t,
                    Ok(Transition::RetryIn {
                        delay_ms: with_jitter(base, jitter),
                        retry: used + 1
                    })
                );
                let Ok(Transition::RetryIn { delay_ms, .. }) = t else {
                    unreachable!()
                };
                assert!(
                    delay_ms >= base && delay_ms <= base + base / 10,
                    "{delay_ms}"
                );
            }
        }
        assert_eq!(
            apply(
                pending(3, false),
                DeliveryOp::Fail { gone: false },
                &SCHEDULE,
                0.0
            ),
            Ok(Transition::Failed {
                disables_endpoint: true
            })
        );
        assert_eq!(
            apply(
                pending(0, false),
                DeliveryOp::Fail { gone: false },
                &[],
                0.0
            ),
            Ok(Transition::Failed {
                disables_endpoint: true
            })
        );
    }

    #[test]
    fn a_410_fails_at_once_and_disables_the_endpoint() {
        for manual in [false, true] {
            assert_eq!(
                apply(
                    pending(0, manual),
                    DeliveryOp::Fail { gone: true },
                    &SCHEDULE,
                    0.0
                ),
                Ok(Transition::Failed {
                    disables_endpoint: true
                })
            );
        }
    }

    #[test]
    fn a_retry_by_hand_gets_one_attempt_and_never_disables() {
        assert_eq!(
            apply(
                pending(1, true),
                DeliveryOp::Fail { gone: false },
                &SCHEDULE,
                0.0
            ),
            Ok(Transition::Failed {
                disables_endpoint: false
            })
        );
        assert_eq!(
            apply(pending(1, true), DeliveryOp::Succeed, &SCHEDULE, 0.0),
            Ok(Transition::Succeeded)
        );
    }

    #[test]
    fn only_finished_deliveries_are_retried_by_hand() {
        for status in [DeliveryStatus::Succeeded, DeliveryStatus::Failed] {
            let t = apply(finished(status), DeliveryOp::RetryByHand, &SCHEDULE, 0.0);
            assert_eq!(t, Ok(Transition::Requeued));
            let now = Utc::now();
            assert_eq!(t.map(|t| t.next_attempt_at(now)), Ok(Some(now)));
        }
        assert_eq!(
            apply(pending(0, false), DeliveryOp::RetryByHand, &SCHEDULE, 0.0),
            Err(Refused {
                current: DeliveryStatus::Pending,
                allowed_transitions: &[DeliveryStatus::Succeeded, DeliveryStatus::Failed],
            })
        );
    }

    #[test]
    fn outcomes_of_finished_deliveries_are_stale() {
        for status in [DeliveryStatus::Succeeded, DeliveryStatus::Failed] {
            for op in [
                DeliveryOp::Succeed,
                DeliveryOp::Fail { gone: false },
                DeliveryOp::EndpointGone,
            ] {
                assert!(
                    apply(finished(status), op, &SCHEDULE, 0.0).is_err(),
                    "{status:?} {op:?}"
                );
            }
        }
    }

    #[test]
    fn an_endpoint_going_away_fails_its_pending_deliveries() {
        assert_eq!(
            apply(pending(2, false), DeliveryOp::EndpointGone, &SCHEDULE, 0.0),
            Ok(Transition::Failed {
                disables_endpoint: false
            })
        );
    }

    #[test]
    fn statuses_and_due_times() {
        let now = Utc::now();
        let retry = Transition::RetryIn {
            delay_ms: 1500,
            retry: 1,
        };
        assert_eq!(retry.status(), DeliveryStatus::Pending);
        assert_eq!(
            retry.next_attempt_at(now),
            Some(now + chrono::Duration::milliseconds(1500))
        );
        assert_eq!(Transition::Succeeded.status(), DeliveryStatus::Succeeded);
        assert_eq!(Transition::Succeeded.next_attempt_at(now), None);
        assert_eq!(
            Transition::Failed {
                disables_endpoint: false
            }
            .status(),
            DeliveryStatus::Failed
        );
    }

    #[test]
    fn jitter_is_bounded() {
        assert_eq!(with_jitter(1000, 0.0), 1000);
        assert_eq!(with_jitter(1000, 0.2), 1200);
        assert_eq!(with_jitter(1000, 5.0), 1200);
    }
}
