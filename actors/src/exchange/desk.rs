//! Funding decisions of the exchange account, one at a time, each taken at one consistent
//! point (CONTRACT §7). A decision (a run becoming DEPOSITED, a retry funded, money moved out to
//! the treasury) first reads the account at the `ExchangeActor`'s next consistent point with
//! no lock held (the exchange may take its time to answer: no lock, in-process or in the
//! database, is ever held across a call to it). Then it takes this process's decision lock and,
//! on PostgreSQL, an advisory lock in its transaction (so decisions of every instance are
//! serialised), and checks that no decision reserved money since its point was read (creating
//! holds counts a decision on the account's reserve row, in the statement that moves the
//! reserved total); if one did, it reads the point again. It commits its holds before the
//! locks are let go: two decisions never spend the same money.

use std::sync::Arc;

use actix::{Addr, MailboxError};
use payroll_entities::db::{Db, WriteTx};
use sea_orm::DbErr;
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
    /// Other decisions kept committing between this one's point and its lock.
    #[error("other funding decisions kept changing the account; try again")]
    Contended,
}

/// Points read again at most, when other decisions commit between a point and its lock.
const MAX_POINTS: usize = 8;

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
    /// The transaction the decision commits in (on PostgreSQL it holds the advisory lock).
    tx: WriteTx,
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
    /// `run_id`, where named): the point read with no lock held, then the locks taken and the
    /// point found still current (no decision committed since), else read again.
    pub async fn open(&self, run_id: Option<&str>) -> Result<Decision, DeskError> {
        for _ in 0..MAX_POINTS {
            let point = self.point(run_id).await?;
            let guard = self.lock.clone().lock_owned().await;
            let tx = self.db.begin_write().await?;
            holds::lock_decisions(&*tx).await?;
            // A read: the reserve row is locked only where this decision writes holds, late
            // in its transaction, not from here on.
            let (_, decisions) = holds::reserved(&*tx).await?;
            if decisions == point.decisions {
                return Ok(Decision { point, tx, guard });
            }
            // Another decision committed after the point was read: its figures are old.
            tx.rollback().await?;
        }
        Err(DeskError::Contended)
    }
}

impl Decision {
    /// The transaction the decision commits in; keep the guard until it has committed.
    /// Between the point and this commit other withdrawals may be accepted, each lowering the
    /// balance and releasing its hold together, which leaves what is free unchanged.
    pub fn begin(self) -> (WriteTx, DecisionGuard) {
        (self.tx, DecisionGuard { _guard: self.guard })
    }
}
