//! What the HTTP layer asks of a run, and what it gets back.

use actix::Message;
use chrono::{DateTime, Utc};
use payroll_entities::{
    RunStatus, RunType,
    health::{self, Fault},
    job, payroll_run,
};

use super::transitions::{PayoutRefused, Refused};
use crate::acknowledgement::Acknowledgement;

#[derive(Debug, Clone)]
pub enum RunCommand {
    Confirm,
    BalanceCheck,
    Execute,
    Sync,
    Cancel {
        reason: Option<String>,
        /// Whether the caller holds `payroll:execute` (needed once funds are committed).
        may_cancel_funded: bool,
    },
    RetryFailed,
    Archive,
    RetryPayout {
        payout_id: String,
    },
    CancelPayout {
        payout_id: String,
    },
    /// An operator's word on a stuck payout (CONTRACT §7).
    ResolvePayout {
        payout_id: String,
        resolution: Resolution,
    },
}

/// What an operator found at the exchange for a stuck payout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The exchange paid it; the transaction hash where known.
    Completed {
        on_chain_tx_hash: Option<String>,
        note: Option<String>,
    },
    /// The exchange holds no withdrawal for it: no money left.
    Failed { note: Option<String> },
}

impl RunCommand {
    /// The operation as named in its path, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            RunCommand::Confirm => "confirmed",
            RunCommand::BalanceCheck => "balance-checked",
            RunCommand::Execute => "executed",
            RunCommand::Sync => "synced",
            RunCommand::Cancel { .. } => "cancelled",
            RunCommand::RetryFailed => "retried",
            RunCommand::Archive => "archived",
            RunCommand::RetryPayout { .. } => "retried",
            RunCommand::CancelPayout { .. } => "cancelled",
            RunCommand::ResolvePayout { .. } => "resolved",
        }
    }
}

/// A client's request for a new run, validated by its shape; the payees are checked against
/// the employees when the run is created.
#[derive(Message, Debug)]
#[rtype(result = "Result<RunReply, RunError>")]
pub struct CreateRun {
    pub run_type: RunType,
    pub is_test_run: bool,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub pay_date: Option<DateTime<Utc>>,
    pub label: Option<String>,
    pub note: Option<String>,
    pub payees: Payees,
    /// The API key that asked for the run.
    pub created_by_key_id: Option<String>,
    pub ack: Acknowledgement,
}

/// Who a new run pays.
#[derive(Debug, Clone)]
pub enum Payees {
    /// A regular run without `employee_ids`: every ACTIVE employee with a salary whose
    /// contract covers the period.
    Eligible,
    /// The employees named, in order.
    Listed(Vec<Payee>),
}

/// An employee a new run names, with the input field that named it (for errors).
#[derive(Debug, Clone)]
pub struct Payee {
    pub field: String,
    pub employee_id: String,
    /// Set by an item; a regular run pays the salary.
    pub amount_usd_cents: Option<i64>,
    pub note: Option<String>,
}

/// A client's command with what it commits alongside.
#[derive(Message, Debug)]
#[rtype(result = "Result<RunReply, RunError>")]
pub struct RunRequest {
    pub run_id: String,
    pub command: RunCommand,
    pub ack: Acknowledgement,
}

/// The answer's body (as stored for idempotent replay) and the run after the command.
#[derive(Debug, Clone)]
pub struct RunReply {
    pub body: Vec<u8>,
    pub run: payroll_run::Model,
    pub job: Option<job::Model>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    #[error("no such run")]
    NotFound,
    #[error("no such payout {0}")]
    PayoutNotFound(String),
    #[error("the run cannot be {operation} in status {}", refused.current)]
    Refused {
        refused: Refused,
        operation: &'static str,
        hint: Option<String>,
    },
    /// A CONFIRMED run that is covered is executed before a balance check made it DEPOSITED.
    #[error("the run is covered but not yet DEPOSITED")]
    NotYetDeposited { refused: Refused },
    #[error("payout {payout_id} is {} and cannot be {operation}", refused.current)]
    PayoutRefused {
        payout_id: String,
        refused: PayoutRefused,
        operation: &'static str,
        hint: String,
    },
    /// A regular run already covers part of the period.
    #[error("regular run {existing_run_id} already covers part of this period")]
    Overlap {
        existing_run_id: String,
        existing_status: RunStatus,
    },
    #[error("insufficient exchange funds: {deficit} cents short")]
    InsufficientFunds {
        required: i64,
        available: i64,
        deficit: i64,
    },
    #[error("this needs the scope {0}")]
    ScopeRequired(&'static str),
    /// What exists now refuses the request (409 `STATE_CONFLICT`), field by field.
    #[error("refused by what exists: {0:?}")]
    Invalid(Vec<(String, String)>),
    #[error("exchange unavailable: {0}")]
    Exchange(String),
    /// The exchange asked us to wait (rate limit, ban): reached, but nothing is done now.
    #[error("{0}")]
    ExchangePaused(String),
    #[error("the run changed while the request ran")]
    Stale,
    #[error("the run is not available now: {0}")]
    Unavailable(String),
    /// The run changed elsewhere (another instance) since this actor's snapshot: the command
    /// was judged again against the run as stored, with this answer; the actor reloads.
    #[error("{0}")]
    Superseded(Box<RunError>),
    /// The database is unreachable or failing (an infrastructure fault, not a bug).
    #[error("database {fault}: {cause}", fault = .0.as_str(), cause = .1)]
    Database(Fault, String),
    /// A database error that is a bug.
    #[error("database error: {0}")]
    Db(String),
    /// The request ran past the idempotency lock and a later one with its key took it over;
    /// nothing of it was kept.
    #[error("a later request with this idempotency key took this one over")]
    TakenOver,
}

impl From<sea_orm::DbErr> for RunError {
    fn from(err: sea_orm::DbErr) -> RunError {
        if crate::acknowledgement::taken_over(&err) {
            return RunError::TakenOver;
        }
        match health::classify(&err) {
            Some(fault) => RunError::Database(fault, err.to_string()),
            None => RunError::Db(err.to_string()),
        }
    }
}

/// An exchange error in a run's words: our own database's fault stays one (503), anything
/// else is the exchange's (502).
impl From<crate::exchange::ExchangeError> for RunError {
    fn from(err: crate::exchange::ExchangeError) -> RunError {
        match err {
            crate::exchange::ExchangeError::Database(fault, cause) => {
                RunError::Database(fault, cause)
            }
            paused @ crate::exchange::ExchangeError::Paused(_) => {
                RunError::ExchangePaused(paused.to_string())
            }
            other => RunError::Exchange(other.to_string()),
        }
    }
}

impl RunError {
    /// The database fault behind this error, if it is one.
    pub fn fault(&self) -> Option<Fault> {
        match self {
            RunError::Database(fault, _) => Some(*fault),
            RunError::Superseded(inner) => inner.fault(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_taken_over_is_its_own_error() {
        let err = sea_orm::DbErr::Custom(crate::acknowledgement::TAKEN_OVER.into());
        assert!(matches!(RunError::from(err), RunError::TakenOver));
        let other = sea_orm::DbErr::Custom("something else".into());
        assert!(matches!(RunError::from(other), RunError::Db(_)));
    }
}
