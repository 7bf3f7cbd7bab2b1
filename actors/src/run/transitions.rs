//! The run lifecycle as a pure table (CONTRACT §6): which operation moves which status where.

use payroll_entities::RunStatus;

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
}
