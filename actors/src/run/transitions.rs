//! The lifecycles of runs and payouts as pure tables (CONTRACT §6): which operation moves which
//! status where, what a refusal says is allowed instead, and how a payout's move shifts the
//! summary counters of its run and job.

use payroll_entities::{PayoutStatus, RunStatus, job, payroll_run};

/// Everything that can move a run, by a client or by the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOp {
    Confirm,
    /// Funds found covering the run (balance-check or the funds watch).
    Fund,
    Execute,
    /// Every payout terminal, none failed.
    FinishPaid,
    /// Every payout terminal, at least one failed.
    FinishWithFailures,
    RetryFailed,
    Cancel,
    Archive,
}

/// The refusal of an operation, with what the run allows instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub current: RunStatus,
    pub allowed_operations: &'static [&'static str],
    pub allowed_transitions: &'static [RunStatus],
}

/// The status after `op`, or the refusal. Archive keeps the status.
pub fn apply(current: RunStatus, op: RunOp) -> Result<RunStatus, Refused> {
    use RunOp::*;
    use RunStatus::*;
    let next = match (current, op) {
        (Draft, Confirm) => Confirmed,
        (Confirmed, Fund) => Deposited,
        (Deposited, Execute) => PayingOut,
        (PayingOut, FinishPaid) => Completed,
        (PayingOut, FinishWithFailures) => Failed,
        (Failed, RetryFailed) => PayingOut,
        (Draft | Confirmed | Deposited, Cancel) => Cancelled,
        (Completed | Failed | Cancelled, Archive) => current,
        _ => return Err(refusal(current)),
    };
    Ok(next)
}

/// What a run in `current` allows: the client operations (named as in their paths) and the
/// statuses it can reach.
pub fn refusal(current: RunStatus) -> Refused {
    use RunStatus::*;
    let (allowed_operations, allowed_transitions): (&[&str], &[RunStatus]) = match current {
        Draft => (&["confirm", "cancel"], &[Confirmed, Cancelled]),
        Confirmed => (&["balance-check", "cancel"], &[Deposited, Cancelled]),
        Deposited => (&["execute", "cancel"], &[PayingOut, Cancelled]),
        PayingOut => (&["sync"], &[Completed, Failed]),
        Completed => (&["archive"], &[]),
        Failed => (&["retry-failed", "archive"], &[PayingOut]),
        Cancelled => (&["archive"], &[]),
    };
    Refused {
        current,
        allowed_operations,
        allowed_transitions,
    }
}

/// Everything that can move a payout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayoutOp {
    /// The exchange accepted the withdrawal.
    Accept,
    /// The withdrawal settled on chain.
    Complete,
    /// A definite refusal, or the exchange reports the withdrawal failed.
    Fail,
    /// A client cancels a payout not yet handed to the exchange.
    Cancel,
    /// A client retries a failed payout: a new attempt.
    Retry,
}

/// The refusal of a payout operation, with what the payout allows instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutRefused {
    pub current: PayoutStatus,
    pub allowed_operations: &'static [&'static str],
    pub allowed_transitions: &'static [PayoutStatus],
}

/// The payout's status after `op`, or the refusal.
pub fn apply_payout(current: PayoutStatus, op: PayoutOp) -> Result<PayoutStatus, PayoutRefused> {
    use PayoutOp::*;
    use PayoutStatus::*;
    let next = match (current, op) {
        (Pending, Accept) => Processing,
        // An answer may tell of acceptance and settlement at once.
        (Pending | Processing, Complete) => Completed,
        (Pending | Processing, Fail) => Failed,
        (Pending, Cancel) => Cancelled,
        (Failed, Retry) => Pending,
        _ => return Err(payout_refusal(current)),
    };
    Ok(next)
}

/// What a payout in `current` allows a client, and the statuses it moves to next.
pub fn payout_refusal(current: PayoutStatus) -> PayoutRefused {
    use PayoutStatus::*;
    let (allowed_operations, allowed_transitions): (&[&str], &[PayoutStatus]) = match current {
        Pending => (&["cancel"], &[Processing, Cancelled]),
        Processing => (&[], &[Completed, Failed]),
        Failed => (&["retry"], &[Pending]),
        Completed | Cancelled => (&[], &[]),
    };
    PayoutRefused {
        current,
        allowed_operations,
        allowed_transitions,
    }
}

/// Moves one payout between the summary counters of its run and (when the payout belongs to
/// it) the run's current job.
pub fn recount(
    run: &mut payroll_run::Model,
    job: Option<&mut job::Model>,
    from: PayoutStatus,
    to: PayoutStatus,
) {
    *run.counter_mut(from) -= 1;
    *run.counter_mut(to) += 1;
    if let Some(job) = job {
        *job.counter_mut(from) -= 1;
        *job.counter_mut(to) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunOp::*;
    use RunStatus::*;

    const OPS: [RunOp; 8] = [
        Confirm,
        Fund,
        Execute,
        FinishPaid,
        FinishWithFailures,
        RetryFailed,
        Cancel,
        Archive,
    ];

    /// The whole table: every status × operation pair, `None` where refused.
    fn expected(status: RunStatus, op: RunOp) -> Option<RunStatus> {
        match (status, op) {
            (Draft, Confirm) => Some(Confirmed),
            (Draft, Cancel) => Some(Cancelled),
            (Confirmed, Fund) => Some(Deposited),
            (Confirmed, Cancel) => Some(Cancelled),
            (Deposited, Execute) => Some(PayingOut),
            (Deposited, Cancel) => Some(Cancelled),
            (PayingOut, FinishPaid) => Some(Completed),
            (PayingOut, FinishWithFailures) => Some(Failed),
            (Failed, RetryFailed) => Some(PayingOut),
            (Completed, Archive) => Some(Completed),
            (Failed, Archive) => Some(Failed),
            (Cancelled, Archive) => Some(Cancelled),
            _ => None,
        }
    }

    #[test]
    fn every_status_and_operation_pair() {
        for status in RunStatus::ALL {
            for op in OPS {
                match (apply(*status, op), expected(*status, op)) {
                    (Ok(next), Some(want)) => assert_eq!(next, want, "{status} {op:?}"),
                    (Err(refused), None) => assert_eq!(refused.current, *status),
                    (got, want) => panic!("{status} {op:?}: got {got:?}, want {want:?}"),
                }
            }
        }
    }

    #[test]
    fn refusals_list_reachable_statuses_consistently() {
        for status in RunStatus::ALL {
            let reachable: Vec<RunStatus> = OPS
                .iter()
                .filter_map(|op| expected(*status, *op))
                .filter(|next| next != status)
                .collect();
            let mut listed = refusal(*status).allowed_transitions.to_vec();
            listed.sort_by_key(|s| s.as_str());
            let mut reachable = reachable;
            reachable.sort_by_key(|s| s.as_str());
            reachable.dedup();
            assert_eq!(listed, reachable, "{status}");
        }
    }

    const PAYOUT_OPS: [PayoutOp; 5] = [
        PayoutOp::Accept,
        PayoutOp::Complete,
        PayoutOp::Fail,
        PayoutOp::Cancel,
        PayoutOp::Retry,
    ];

    #[test]
    fn every_payout_status_and_operation_pair() {
        use PayoutStatus as P;
        let expected = |status: P, op: PayoutOp| match (status, op) {
            (P::Pending, PayoutOp::Accept) => Some(P::Processing),
            (P::Pending, PayoutOp::Complete) | (P::Processing, PayoutOp::Complete) => {
                Some(P::Completed)
            }
            (P::Pending, PayoutOp::Fail) | (P::Processing, PayoutOp::Fail) => Some(P::Failed),
            (P::Pending, PayoutOp::Cancel) => Some(P::Cancelled),
            (P::Failed, PayoutOp::Retry) => Some(P::Pending),
            _ => None,
        };
        for status in PayoutStatus::ALL {
            for op in PAYOUT_OPS {
                match (apply_payout(*status, op), expected(*status, op)) {
                    (Ok(next), Some(want)) => assert_eq!(next, want, "{status} {op:?}"),
                    (Err(refused), None) => assert_eq!(refused.current, *status),
                    (got, want) => panic!("{status} {op:?}: got {got:?}, want {want:?}"),
                }
            }
        }
    }

    #[test]
    fn payout_refusals_name_only_moves_the_table_makes() {
        for status in PayoutStatus::ALL {
            let refusal = payout_refusal(*status);
            for next in refusal.allowed_transitions {
                assert!(
                    PAYOUT_OPS
                        .iter()
                        .any(|op| apply_payout(*status, *op) == Ok(*next)),
                    "{status} lists {next}"
                );
            }
            for (operation, op) in [("cancel", PayoutOp::Cancel), ("retry", PayoutOp::Retry)] {
                assert_eq!(
                    refusal.allowed_operations.contains(&operation),
                    apply_payout(*status, op).is_ok(),
                    "{status} {operation}"
                );
            }
        }
    }
}
