//! Funding decisions of the exchange account, one at a time, each taken at one consistent
//! point (CONTRACT §7). A decision (a run becoming DEPOSITED, a retry funded, money moved out to
//! the treasury) holds this process's decision lock and, on PostgreSQL, an advisory lock in its
//! transaction (so decisions of every instance are serialised), reads the account at the
//! `ExchangeActor`'s next consistent point, and commits its holds before the lock is let go:
//! two decisions never spend the same money.

use std::sync::Arc;

use actix::{Addr, MailboxError};
use payroll_entities::db::{Db, WriteTx};
use sea_orm::{DatabaseBackend, DbErr};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{
    ExchangeError,
    actor::{ExchangeActor, FundsPoint, PointFigures},
    holds,
};
use crate::telemetry::CountedSend;

/// Why the account's figures could not be had.
#[derive(Debug, thiserror::Error)]
pub enum DeskError {
    #[error("database: {0}")]
    Db(#[from] DbErr),
    #[error("{0}")]
    Exchange(#[from] ExchangeError),
    #[error("the exchange actor is unavailable: {0}")]
    Mailbox(#[from] MailboxError),
}

/// Where funding decisions are taken; shared by the run actors and the treasury routes.
#[derive(Clone)]
pub struct FundsDesk {
    db: Db,
    exchange: Addr<ExchangeActor>,
    lock: Arc<Mutex<()>>,
}

/// An open decision: the figures, and the locks that keep them true until it commits.
pub struct Decision {
    pub point: PointFigures,
    /// PostgreSQL: the transaction holding the advisory lock.
    tx: Option<WriteTx>,
    guard: OwnedMutexGuard<()>,
}

/// Keeps the decision lock until the decision's transaction has committed.
pub struct DecisionGuard {
    _guard: OwnedMutexGuard<()>,
}

impl FundsDesk {
    pub fn new(db: Db, exchange: Addr<ExchangeActor>) -> FundsDesk {
        FundsDesk {
            db,
            exchange,
            lock: Arc::new(Mutex::new(())),
        }
    }

    /// The account's figures at the next consistent point, for reading only.
    pub async fn read(&self) -> Result<PointFigures, DeskError> {
        self.point(None).await
    }

    async fn point(&self, run_id: Option<&str>) -> Result<PointFigures, DeskError> {
        Ok(self
            .exchange
            .counted_send(FundsPoint {
                run_id: run_id.map(str::to_owned),
            })
            .await??)
    }

    /// Opens a decision with the figures of the next consistent point (and the holds of
    /// `run_id`, where named).
    pub async fn open(&self, run_id: Option<&str>) -> Result<Decision, DeskError> {
        let guard = self.lock.clone().lock_owned().await;
        let tx = if self.db.backend() == DatabaseBackend::Postgres {
            let tx = self.db.begin_write().await?;
            holds::lock_decisions(&*tx).await?;
            Some(tx)
        } else {
            // SQLite: the exchange actor writes to this database while the point is read
            // (released holds, the sandbox), so no write transaction is held across it; one
            // process per database file, and this lock serialises its decisions.
            None
        };
        let point = self.point(run_id).await?;
        Ok(Decision { point, tx, guard })
    }
}

impl Decision {
    /// The transaction the decision commits in; keep the guard until it has committed.
    /// Between the point and this commit other withdrawals may be accepted, each lowering the
    /// balance and releasing its hold together, which leaves what is free unchanged.
    pub async fn begin(self, db: &Db) -> Result<(WriteTx, DecisionGuard), DbErr> {
        let tx = match self.tx {
            Some(tx) => tx,
            None => db.begin_write().await?,
        };
        Ok((tx, DecisionGuard { _guard: self.guard }))
    }
}
