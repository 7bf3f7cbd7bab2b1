//! What Binance's answers mean: a withdrawal's outcome from its HTTP status and error code,
//! an answer as text for reasons and logs, and a network's amount step in cents.

use payroll_entities::Cents;

use crate::exchange::{
    WithdrawalOutcome,
    binance::protocol::{self, CodeClass},
    cut_exchange_text,
    http::Answer,
};

/// How long after a 429 without `Retry-After` nothing is sent.
pub(super) const RATE_LIMIT_BACKOFF_MS: u64 = 1000;
/// How long after a 418 without `Retry-After` nothing is sent (Binance's shortest ban).
pub(super) const BAN_BACKOFF_MS: u64 = 120_000;

/// The step of a `withdrawIntegerMultiple` in cents: any amount of whole cents when a cent is
/// a multiple of it (or none is given), whole multiples of it when it is whole cents; `None`
/// otherwise (no amount of cents could be sure to fit). Binance prints it with 8 decimals
/// ("0.01000000", "0.00000001").
pub(super) fn step_cents(multiple: &str) -> Option<Cents> {
    use crate::exchange::wire::{UNITS_PER_CENT, units};
    if multiple.is_empty() {
        return Some(Cents(1));
    }
    match units(multiple)? {
        0 => Some(Cents(1)),
        m if UNITS_PER_CENT % m == 0 => Some(Cents(1)),
        m if m % UNITS_PER_CENT == 0 => i64::try_from(m / UNITS_PER_CENT).ok().map(Cents),
        _ => None,
    }
}

/// The error code of an answer, if it carries one.
pub(super) fn error_code(answer: &Answer) -> Option<i64> {
    serde_json::from_slice::<protocol::ErrorBody>(&answer.body)
        .ok()
        .map(|e| e.code)
}

/// An answer as text for reasons and logs, cut to 500 characters.
pub(super) fn describe(answer: &Answer) -> String {
    cut_exchange_text(
        &match serde_json::from_slice::<protocol::ErrorBody>(&answer.body) {
            Ok(e) => format!("HTTP {}, Binance code {}: {}", answer.status, e.code, e.msg),
            Err(_) => format!(
                "HTTP {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ),
        },
    )
}

/// What Binance's answer to a withdrawal means.
pub(super) fn withdrawal_outcome(answer: &Answer) -> WithdrawalOutcome {
    if (200..300).contains(&answer.status) {
        return match serde_json::from_slice::<protocol::WithdrawAck>(&answer.body) {
            Ok(ack) if !ack.id.is_empty() => WithdrawalOutcome::Accepted {
                cex_id: cut_exchange_text(&ack.id),
            },
            _ => WithdrawalOutcome::Ambiguous {
                reason: format!(
                    "Binance answered success without a withdrawal id: {}",
                    describe(answer)
                ),
            },
        };
    }
    let message = describe(answer);
    match protocol::classify_answer(answer.status, error_code(answer)) {
        CodeClass::RateLimited => WithdrawalOutcome::RateLimited {
            retry_after_ms: answer.retry_after_ms.unwrap_or(if answer.status == 418 {
                BAN_BACKOFF_MS
            } else {
                RATE_LIMIT_BACKOFF_MS
            }),
        },
        // Refused twice as outside recvWindow, the second time after the clock was read:
        // nothing was done either time.
        CodeClass::Timestamp | CodeClass::Rejected => {
            WithdrawalOutcome::Rejected { reason: message }
        }
        CodeClass::Ambiguous => WithdrawalOutcome::Ambiguous { reason: message },
        CodeClass::Credentials => WithdrawalOutcome::CredentialsRefused { reason: message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            retry_after_ms: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn withdrawal_answers_map_to_outcomes() {
        assert_eq!(
            withdrawal_outcome(&answer(200, r#"{"id":"7213fea8e94b4a5593d507237e5a555b"}"#)),
            WithdrawalOutcome::Accepted {
                cex_id: "7213fea8e94b4a5593d507237e5a555b".into()
            }
        );
        assert!(matches!(
            withdrawal_outcome(&answer(200, "{}")),
            WithdrawalOutcome::Ambiguous { .. }
        ));
        assert!(matches!(
            withdrawal_outcome(&answer(400, r#"{"code":-4035,"msg":"This address is not on the whitelist. Please join and try again."}"#)),
            WithdrawalOutcome::Rejected { reason } if reason.contains("-4035") && reason.contains("whitelist")
        ));
        assert!(matches!(
            withdrawal_outcome(&answer(
                401,
                r#"{"code":-2015,"msg":"Invalid API-key, IP, or permissions for action."}"#
            )),
            WithdrawalOutcome::CredentialsRefused { .. }
        ));
        assert_eq!(
            withdrawal_outcome(&Answer {
                status: 418,
                retry_after_ms: Some(30_000),
                body: br#"{"code":-1003,"msg":"Way too much request weight used; IP banned"}"#
                    .to_vec()
            }),
            WithdrawalOutcome::RateLimited {
                retry_after_ms: 30_000
            }
        );
        for (status, body) in [
            (500, "Internal Server Error"),
            (
                503,
                r#"{"code":-1001,"msg":"Internal error; unable to process your request."}"#,
            ),
            (504, "<html>gateway</html>"),
            (
                400,
                r#"{"code":-1007,"msg":"Timeout waiting for response from backend server."}"#,
            ),
        ] {
            assert!(
                matches!(
                    withdrawal_outcome(&answer(status, body)),
                    WithdrawalOutcome::Ambiguous { .. }
                ),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn steps_are_whole_cents_or_nothing() {
        assert_eq!(step_cents(""), Some(Cents(1)));
        assert_eq!(step_cents("0"), Some(Cents(1)));
        assert_eq!(step_cents("0.000001"), Some(Cents(1)));
        assert_eq!(step_cents("0.01"), Some(Cents(1)));
        assert_eq!(step_cents("0.1"), Some(Cents(10)));
        assert_eq!(step_cents("1"), Some(Cents(100)));
        assert_eq!(step_cents("0.003"), None);
        assert_eq!(step_cents("0.015"), None);
        // As config/getall prints them.
        assert_eq!(step_cents("0.01000000"), Some(Cents(1)));
        assert_eq!(step_cents("0.00000001"), Some(Cents(1)));
        assert_eq!(step_cents("1.00000000"), Some(Cents(100)));
    }
}
