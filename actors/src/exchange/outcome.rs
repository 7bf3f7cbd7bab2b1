//! What the exchange's word means for a payout attempt (CONTRACT §6, §7): one pure function
//! from what we sent and what the exchange answered (or shows in its history) to a verdict.
//! Only a definite answer ends an attempt: the exchange accepted it, settled it, failed it after
//! accepting it, or refused the **first** send of its client id in a way that proves nothing was
//! created. Everything else (a timeout, a reset, a 5xx, an unreadable body, any answer to a
//! resend, a look-up that finds nothing) is unknown, and the id is looked up again before
//! anything is re-sent, so FAILED always means no money left for that attempt.

use super::{RemoteStatus, WithdrawalOutcome};

/// Which send of a client id an answer is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    First,
    Resend,
}

/// The verdict on one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The exchange has the withdrawal: the money has left its available balance.
    Accepted { cex_id: String },
    /// Settled on chain.
    Completed {
        cex_id: String,
        tx_hash: String,
        explorer_url: Option<String>,
    },
    /// Nothing was withdrawn under this id, and nothing will be: the attempt fails.
    Refused { reason: String },
    /// Accepted, then failed, cancelled or reversed: the money came back; the attempt fails.
    Failed { cex_id: String, reason: String },
    /// The exchange refused our credentials: nothing was created, and nothing will be until an
    /// operator fixes them; the job fails (CONTRACT §5).
    CredentialsRefused { reason: String },
    /// The send never left (the exchange's rate limit, or this instance lost the run's lease):
    /// nothing to record, no send counted.
    NotSent,
    /// Unknown: look the client id up; send again only after the grace, up to the limit.
    Unknown { reason: String },
}

impl Verdict {
    /// Whether the attempt's claim on the balance has ended (its hold may be released).
    pub fn ends_hold(&self) -> bool {
        matches!(
            self,
            Verdict::Accepted { .. }
                | Verdict::Completed { .. }
                | Verdict::Refused { .. }
                | Verdict::Failed { .. }
                | Verdict::CredentialsRefused { .. }
        )
    }
}

/// The verdict on the exchange's answer to a send.
pub fn of_answer(sent: Sent, answer: &WithdrawalOutcome) -> Verdict {
    match (sent, answer) {
        (_, WithdrawalOutcome::Accepted { cex_id }) => Verdict::Accepted {
            cex_id: cex_id.clone(),
        },
        (Sent::First, WithdrawalOutcome::Rejected { reason }) => Verdict::Refused {
            reason: reason.clone(),
        },
        // The first send may have been accepted: a refusal now (a duplicate id, say) proves
        // nothing about it.
        (Sent::Resend, WithdrawalOutcome::Rejected { reason }) => Verdict::Unknown {
            reason: format!("a resend was refused ({reason}); the id is looked up"),
        },
        (Sent::First, WithdrawalOutcome::CredentialsRefused { reason }) => {
            Verdict::CredentialsRefused {
                reason: reason.clone(),
            }
        }
        (Sent::Resend, WithdrawalOutcome::CredentialsRefused { reason }) => Verdict::Unknown {
            reason: format!("a resend was refused ({reason}); the id is looked up"),
        },
        (_, WithdrawalOutcome::RateLimited { .. } | WithdrawalOutcome::NotSent { .. }) => {
            Verdict::NotSent
        }
        (_, WithdrawalOutcome::Ambiguous { reason }) => Verdict::Unknown {
            reason: reason.clone(),
        },
    }
}

/// The verdict on what the exchange's history shows for a client id.
pub fn of_lookup(status: &RemoteStatus) -> Verdict {
    match status {
        // Its history may lag behind its answers: not found proves nothing.
        RemoteStatus::Unknown => Verdict::Unknown {
            reason: "the exchange does not show this client id (yet)".into(),
        },
        RemoteStatus::Pending { cex_id, .. } => Verdict::Accepted {
            cex_id: cex_id.clone(),
        },
        RemoteStatus::Completed {
            cex_id,
            tx_hash,
            explorer_url,
            ..
        } => Verdict::Completed {
            cex_id: cex_id.clone(),
            tx_hash: tx_hash.clone(),
            explorer_url: explorer_url.clone(),
        },
        RemoteStatus::Failed { cex_id, reason } => Verdict::Failed {
            cex_id: cex_id.clone(),
            reason: reason.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(v: &Verdict) -> bool {
        matches!(v, Verdict::Unknown { .. })
    }

    #[test]
    fn an_acceptance_is_definite_on_any_send() {
        for sent in [Sent::First, Sent::Resend] {
            let v = of_answer(
                sent,
                &WithdrawalOutcome::Accepted {
                    cex_id: "w1".into(),
                },
            );
            assert_eq!(
                v,
                Verdict::Accepted {
                    cex_id: "w1".into()
                }
            );
            assert!(v.ends_hold());
        }
    }

    #[test]
    fn only_a_first_send_can_be_refused() {
        let refusal = WithdrawalOutcome::Rejected {
            reason: "address not allowed".into(),
        };
        assert_eq!(
            of_answer(Sent::First, &refusal),
            Verdict::Refused {
                reason: "address not allowed".into()
            }
        );
        let v = of_answer(Sent::Resend, &refusal);
        assert!(unknown(&v), "{v:?}");
        assert!(!v.ends_hold());
    }

    #[test]
    fn credentials_refused_fail_the_job_only_on_a_first_send() {
        let refusal = WithdrawalOutcome::CredentialsRefused {
            reason: "invalid signature".into(),
        };
        assert!(matches!(
            of_answer(Sent::First, &refusal),
            Verdict::CredentialsRefused { .. }
        ));
        assert!(unknown(&of_answer(Sent::Resend, &refusal)));
    }

    #[test]
    fn timeouts_5xx_and_unreadable_answers_are_unknown() {
        for sent in [Sent::First, Sent::Resend] {
            let v = of_answer(
                sent,
                &WithdrawalOutcome::Ambiguous {
                    reason: "timed out".into(),
                },
            );
            assert!(unknown(&v));
            assert!(!v.ends_hold());
        }
    }

    #[test]
    fn a_rate_limit_or_a_lost_lease_sends_nothing() {
        for answer in [
            WithdrawalOutcome::RateLimited { retry_after_ms: 5 },
            WithdrawalOutcome::NotSent {
                reason: "lease lost".into(),
            },
        ] {
            let v = of_answer(Sent::First, &answer);
            assert_eq!(v, Verdict::NotSent);
            assert!(!v.ends_hold());
        }
    }

    #[test]
    fn lookups_settle_or_stay_unknown() {
        assert!(unknown(&of_lookup(&RemoteStatus::Unknown)));
        assert_eq!(
            of_lookup(&RemoteStatus::Pending {
                cex_id: "w".into(),
                reported: Default::default()
            }),
            Verdict::Accepted { cex_id: "w".into() }
        );
        assert!(matches!(
            of_lookup(&RemoteStatus::Completed {
                cex_id: "w".into(),
                tx_hash: "0x1".into(),
                explorer_url: None,
                reported: Default::default()
            }),
            Verdict::Completed { .. }
        ));
        let failed = of_lookup(&RemoteStatus::Failed {
            cex_id: "w".into(),
            reason: "reversed".into(),
        });
        assert!(matches!(failed, Verdict::Failed { .. }));
        assert!(failed.ends_hold());
    }
}
