//! The sandbox exchange, the embedded default provider: an exchange account and a treasury
//! wallet kept in the service's own database, never cached, so an operator's adjustment is
//! seen at once. Withdrawals settle `completion_delay_ms` after acceptance, with a
//! deterministic transaction hash; those to `fail_addresses` fail and are refunded.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use payroll_entities::{
    Cents, Network, SandboxAccount, SandboxWithdrawalStatus, TransferDirection, TransferStatus,
    bulk, db::Db, sandbox_balance, sandbox_withdrawal, time, treasury_transfer,
};
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use sha2::{Digest, Sha256};

use super::{
    Balances, ExchangeError, ExchangeProvider, FEE_CHANGED, Quote, RemoteStatus, TreasuryWallet,
    WithdrawalOutcome, WithdrawalRequest,
};
use crate::settings::SandboxSettings;

mod ledger;
pub use ledger::adjust;
use ledger::{add_to, balance_of, lock_sandbox, settle_due, settle_transfers};

/// Where payroll funds are deposited on the sandbox exchange.
pub const DEPOSIT_ADDRESS: &str = "0x5a4d000000000000000000000000000000000001";
pub const TREASURY_ADDRESS: &str = "0x7e45000000000000000000000000000000000002";

pub struct SandboxProvider {
    db: Db,
    settings: SandboxSettings,
    /// Acceptance times within the last second, for the sandbox's own rate limit.
    recent: Mutex<VecDeque<Instant>>,
}

impl SandboxProvider {
    /// The provider, with its balances created from the configured starting amounts if this
    /// database has none yet.
    pub async fn open(db: Db, settings: SandboxSettings) -> Result<SandboxProvider, DbErr> {
        let tx = db.begin_write().await?;
        for (account, initial) in [
            (
                SandboxAccount::Exchange,
                settings.exchange_initial_usd_cents,
            ),
            (
                SandboxAccount::Treasury,
                settings.treasury_initial_usd_cents,
            ),
        ] {
            // Instances started together on an empty database each try: the first one's row
            // stays, the others' are left out.
            sandbox_balance::Entity::insert(sandbox_balance::ActiveModel {
                account: Set(account),
                balance_usd_cents: Set(initial),
                updated_at: Set(time::now()),
            })
            .on_conflict(
                sea_orm::sea_query::OnConflict::column(sandbox_balance::Column::Account)
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&*tx)
            .await?;
        }
        tx.commit().await?;
        Ok(SandboxProvider {
            db,
            settings,
            recent: Mutex::new(VecDeque::new()),
        })
    }

    fn fails(&self, address: &str) -> bool {
        self.settings
            .fail_addresses
            .iter()
            .any(|a| a.eq_ignore_ascii_case(address))
    }

    /// Gives back the last `slots` taken (a batch decided again).
    fn give_back(&self, slots: usize) {
        if self.settings.max_withdrawals_per_second == 0 {
            return;
        }
        let mut recent = match self.recent.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        for _ in 0..slots {
            recent.pop_back();
        }
    }

    /// Takes a slot of the sandbox's own rate limit, or says how long to wait.
    fn admit(&self) -> Result<(), u64> {
        let limit = self.settings.max_withdrawals_per_second as usize;
        if limit == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut recent = match self.recent.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            recent.pop_front();
        }
        if recent.len() >= limit {
            let oldest = recent.front().copied().unwrap_or(now);
            let wait = Duration::from_secs(1).saturating_sub(now.duration_since(oldest));
            return Err(wait.as_millis() as u64 + 1);
        }
        recent.push_back(now);
        Ok(())
    }
}

/// Client ids read in one statement of a look-up. Few enough that PostgreSQL's planner finds
/// them through the index of client ids: with 1,000 it read the whole table instead once it
/// held about 100,000 withdrawals (18 ms a statement there, against about 3 ms through the
/// index).
const LOOKUP_CHUNK: usize = 250;

/// The reason of a withdrawal the sandbox refused is stored with this prefix: the same client
/// id is refused again, never accepted later.
const REJECTED: &str = "rejected: ";

/// The deterministic transaction hash of a withdrawal.
pub fn tx_hash(network: Network, client_id: &str) -> String {
    match network {
        // A Solana transaction is named by its 64-byte signature.
        Network::Solana => bs58::encode(sha2::Sha512::digest(client_id.as_bytes())).into_string(),
        _ => format!("0x{}", hex::encode(Sha256::digest(client_id.as_bytes()))),
    }
}

/// The withdrawals under these client ids.
async fn withdrawals_of<C: ConnectionTrait>(
    conn: &C,
    client_ids: &[String],
) -> Result<Vec<sandbox_withdrawal::Model>, DbErr> {
    sandbox_withdrawal::Entity::find()
        .filter(bulk::one_of(
            conn.get_database_backend(),
            sandbox_withdrawal::Column::ClientId,
            client_ids.iter().cloned(),
        ))
        .all(conn)
        .await
}

fn remote_status(w: &sandbox_withdrawal::Model) -> RemoteStatus {
    // What it withdrew, as a real exchange reports it: checked against what was sent.
    let reported = super::Reported {
        currency: Some("USDC".into()),
        amount: Some(Cents(w.amount_usd_cents)),
        network: Some(w.network),
        address: Some(w.address.clone()),
        missing: Vec::new(),
        also: Vec::new(),
    };
    match w.status {
        SandboxWithdrawalStatus::Pending => RemoteStatus::Pending {
            cex_id: w.id.clone(),
            reported,
        },
        SandboxWithdrawalStatus::Completed => {
            let hash = w
                .tx_hash
                .clone()
                .unwrap_or_else(|| tx_hash(w.network, &w.client_id));
            RemoteStatus::Completed {
                cex_id: w.id.clone(),
                explorer_url: super::explorer_link(w.network, &hash),
                tx_hash: hash,
                reported,
            }
        }
        SandboxWithdrawalStatus::Failed => RemoteStatus::Failed {
            cex_id: w.id.clone(),
            reason: w.failed_reason.clone().unwrap_or_else(|| "failed".into()),
        },
    }
}

#[async_trait(?Send)]
impl ExchangeProvider for SandboxProvider {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    /// Each client id is found by the index of withdrawals: no history is read.
    fn lookups_read_history(&self) -> bool {
        false
    }

    /// The sandbox is this service's own: a client id it already holds (the unique index of
    /// `sandbox_withdrawals.client_id`) is answered with that withdrawal, never a second one
    /// (see `decide` below), so an unknown outcome is resent after
    /// `exchange.reconcile_grace_ms`.
    fn refuses_repeated_client_id(&self) -> bool {
        true
    }

    async fn balances(&self) -> Result<Balances, ExchangeError> {
        let tx = self.db.begin_write().await?;
        lock_sandbox(&tx).await?;
        settle_due(&tx, None).await?;
        settle_transfers(&tx).await?;
        let available = balance_of(&*tx, SandboxAccount::Exchange).await?;
        let treasury = balance_of(&*tx, SandboxAccount::Treasury).await?;
        tx.commit().await?;
        Ok(Balances {
            available,
            deposit_address: DEPOSIT_ADDRESS.into(),
            network: Network::Ethereum,
            treasury: Some(TreasuryWallet {
                address: TREASURY_ADDRESS.into(),
                network: Network::Ethereum,
                balance: treasury,
            }),
        })
    }

    async fn quote(&self, _network: Network) -> Result<Option<Quote>, ExchangeError> {
        Ok(Some(Quote::on_top(
            Cents(self.settings.withdrawal_fee_usd_cents),
            Cents(1),
        )))
    }

    async fn withdraw(
        &self,
        batch: &[WithdrawalRequest],
        deadline: std::time::Instant,
    ) -> Vec<WithdrawalOutcome> {
        match self.withdraw_batch(batch, deadline).await {
            Ok(outcomes) => outcomes,
            Err(err) => batch
                .iter()
                .map(|_| WithdrawalOutcome::Ambiguous {
                    reason: err.to_string(),
                })
                .collect(),
        }
    }

    async fn lookup(
        &self,
        client_ids: &[String],
        _sent_since: Option<DateTime<Utc>>,
    ) -> Result<HashMap<String, RemoteStatus>, ExchangeError> {
        let mut out = HashMap::with_capacity(client_ids.len());
        for chunk in client_ids.chunks(LOOKUP_CHUNK) {
            // Read first: only where a withdrawal it shows has come due is anything written
            // (settled, then read again in the same transaction).
            let found = withdrawals_of(&self.db.conn, chunk).await?;
            let now = time::now();
            let due = found
                .iter()
                .any(|w| w.status == SandboxWithdrawalStatus::Pending && w.settles_at <= now);
            let found = if due {
                let tx = self.db.begin_write().await?;
                lock_sandbox(&tx).await?;
                settle_due(&tx, Some(chunk)).await?;
                let found = withdrawals_of(&*tx, chunk).await?;
                tx.commit().await?;
                found
            } else {
                found
            };
            for w in found {
                out.insert(w.client_id.clone(), remote_status(&w));
            }
        }
        for id in client_ids {
            out.entry(id.clone()).or_insert(RemoteStatus::Unknown);
        }
        Ok(out)
    }

    async fn transfer(
        &self,
        transfer_id: &str,
        direction: TransferDirection,
        amount: Cents,
        note: Option<String>,
    ) -> Result<treasury_transfer::Model, ExchangeError> {
        let tx = self.db.begin_write().await?;
        lock_sandbox(&tx).await?;
        settle_transfers(&tx).await?;
        if let Some(existing) = treasury_transfer::Entity::find_by_id(transfer_id.to_owned())
            .one(&*tx)
            .await?
        {
            tx.commit().await?;
            return Ok(existing);
        }
        settle_due(&tx, None).await?;
        let source = match direction {
            TransferDirection::ToExchange => SandboxAccount::Treasury,
            TransferDirection::ToTreasury => SandboxAccount::Exchange,
        };
        let available = balance_of(&*tx, source).await?;
        if available < amount {
            return Err(ExchangeError::InsufficientFunds {
                requested: amount,
                available,
            });
        }
        add_to(&*tx, source, -amount.0).await?;
        let now = time::now();
        let transfer = treasury_transfer::Model {
            id: transfer_id.to_owned(),
            direction,
            amount_usd_cents: amount.0,
            status: TransferStatus::Pending,
            note,
            created_at: now,
            settles_at: now
                + chrono::Duration::milliseconds(self.settings.transfer_delay_ms as i64),
            completed_at: None,
        };
        treasury_transfer::Entity::insert(transfer.clone().into_active_model())
            .exec_without_returning(&*tx)
            .await?;
        settle_transfers(&tx).await?;
        let stored = treasury_transfer::Entity::find_by_id(transfer.id.clone())
            .one(&*tx)
            .await?
            .unwrap_or(transfer);
        tx.commit().await?;
        Ok(stored)
    }

    async fn transfers(
        &self,
        limit: u64,
        offset: u64,
    ) -> Result<(Vec<treasury_transfer::Model>, u64), ExchangeError> {
        let tx = self.db.begin_write().await?;
        lock_sandbox(&tx).await?;
        settle_transfers(&tx).await?;
        tx.commit().await?;
        let total = treasury_transfer::Entity::find()
            .count(&self.db.conn)
            .await?;
        let items = treasury_transfer::Entity::find()
            .order_by_desc(treasury_transfer::Column::CreatedAt)
            .order_by_desc(treasury_transfer::Column::Id)
            .limit(limit)
            .offset(offset)
            .all(&self.db.conn)
            .await?;
        Ok((items, total))
    }
}

/// What the sandbox answers a batch of withdrawals, and what that writes.
struct Decided {
    outcomes: Vec<WithdrawalOutcome>,
    /// New withdrawals (accepted, or refused with the reason kept) to insert.
    rows: Vec<sandbox_withdrawal::Model>,
    /// Taken from the exchange balance by the accepted ones.
    spent: i64,
    /// Slots of the rate limit taken.
    admitted: usize,
}

impl SandboxProvider {
    /// One batch of withdrawals in one transaction. Most batches carry only client ids the
    /// sandbox has never seen (first sends), so the batch is first decided as if none were
    /// known and inserted with `ON CONFLICT DO NOTHING` under a savepoint: every row written
    /// proves its client id new. Where one was not written (a resend of an id the sandbox
    /// has), nothing of that attempt stays (the savepoint is rolled back, the rate limit's
    /// slots given back), and the batch is decided again knowing the ids it has, which get
    /// their first answer again, never a second withdrawal.
    async fn withdraw_batch(
        &self,
        batch: &[WithdrawalRequest],
        deadline: std::time::Instant,
    ) -> Result<Vec<WithdrawalOutcome>, DbErr> {
        use sea_orm::TransactionTrait as _;
        let tx = self.db.begin_write().await?;
        lock_sandbox(&tx).await?;
        // The batch goes out with this transaction's commit: not at all if it comes too late.
        if std::time::Instant::now() > deadline {
            tx.rollback().await?;
            return Ok(batch
                .iter()
                .map(|_| super::not_sent_past_deadline())
                .collect());
        }
        settle_due(&tx, None).await?;
        let available = balance_of(&*tx, SandboxAccount::Exchange).await?.0;
        let now: DateTime<Utc> = time::now();
        let mut first = self.decide(batch, HashMap::new(), available, now);
        let rows = std::mem::take(&mut first.rows);
        let expected = rows.len() as u64;
        let savepoint = tx.begin().await?;
        let written = bulk::insert_models_skipping_conflicts(
            &savepoint,
            rows.into_iter().map(IntoActiveModel::into_active_model),
            sandbox_withdrawal::Column::ClientId,
        )
        .await?;
        let decided = if written == expected {
            savepoint.commit().await?;
            first
        } else {
            savepoint.rollback().await?;
            self.give_back(first.admitted);
            let known = known_answers(&*tx, batch).await?;
            let mut decided = self.decide(batch, known, available, now);
            bulk::insert_chunked(
                &*tx,
                std::mem::take(&mut decided.rows)
                    .into_iter()
                    .map(IntoActiveModel::into_active_model),
                None,
            )
            .await?;
            decided
        };
        if decided.spent != 0 {
            add_to(&*tx, SandboxAccount::Exchange, -decided.spent).await?;
        }
        tx.commit().await?;
        Ok(decided.outcomes)
    }

    /// The answers to a batch, given what the sandbox already answered (`known`) and the
    /// exchange balance available.
    fn decide(
        &self,
        batch: &[WithdrawalRequest],
        mut known: HashMap<String, WithdrawalOutcome>,
        mut available: i64,
        now: DateTime<Utc>,
    ) -> Decided {
        let settles_at =
            now + chrono::Duration::milliseconds(self.settings.completion_delay_ms as i64);
        let mut decided = Decided {
            outcomes: Vec::with_capacity(batch.len()),
            rows: Vec::new(),
            spent: 0,
            admitted: 0,
        };
        for req in batch {
            // A client id the exchange already has (from before, or earlier in this batch) is
            // the same withdrawal and gets the same answer, never a second withdrawal.
            if let Some(outcome) = known.get(&req.client_id) {
                decided.outcomes.push(outcome.clone());
                continue;
            }
            if let Err(retry_after_ms) = self.admit() {
                decided
                    .outcomes
                    .push(WithdrawalOutcome::RateLimited { retry_after_ms });
                continue;
            }
            decided.admitted += 1;
            let cost = req.amount.0.saturating_add(req.fee.0);
            let fee = self.settings.withdrawal_fee_usd_cents;
            let refusal = if req.amount.0 < 1 {
                Some("amount below the minimum withdrawal".to_owned())
            } else if req.fee.0 < fee {
                Some(format!(
                    "{FEE_CHANGED}the exchange charges {fee} cents for this withdrawal, {} were offered",
                    req.fee.0
                ))
            } else if cost > available {
                Some(format!(
                    "insufficient exchange balance: {available} cents available, {cost} needed"
                ))
            } else {
                None
            };
            if let Some(reason) = refusal {
                decided.rows.push(sandbox_withdrawal::Model {
                    id: format!("sbx_{}", ulid::Ulid::new()),
                    client_id: req.client_id.clone(),
                    amount_usd_cents: req.amount.0,
                    fee_usd_cents: req.fee.0,
                    network: req.network,
                    address: req.address.clone(),
                    status: SandboxWithdrawalStatus::Failed,
                    tx_hash: None,
                    failed_reason: Some(format!("{REJECTED}{reason}")),
                    created_at: now,
                    settles_at: now,
                });
                let outcome = WithdrawalOutcome::Rejected { reason };
                known.insert(req.client_id.clone(), outcome.clone());
                decided.outcomes.push(outcome);
                continue;
            }
            available -= cost;
            decided.spent += cost;
            let cex_id = format!("sbx_{}", ulid::Ulid::new());
            let failed_reason = self
                .fails(&req.address)
                .then(|| "the destination address rejected the transfer".to_owned());
            // Settling at once (no completion delay): completed as it is accepted, rather than
            // written twice. One that fails is refunded as it settles, so it waits for that.
            let status = if settles_at <= now && failed_reason.is_none() {
                SandboxWithdrawalStatus::Completed
            } else {
                SandboxWithdrawalStatus::Pending
            };
            decided.rows.push(sandbox_withdrawal::Model {
                id: cex_id.clone(),
                client_id: req.client_id.clone(),
                amount_usd_cents: req.amount.0,
                fee_usd_cents: req.fee.0,
                network: req.network,
                address: req.address.clone(),
                status,
                // Known from the start; shown once the withdrawal has completed.
                tx_hash: Some(tx_hash(req.network, &req.client_id)),
                failed_reason,
                created_at: now,
                settles_at,
            });
            let outcome = WithdrawalOutcome::Accepted { cex_id };
            known.insert(req.client_id.clone(), outcome.clone());
            decided.outcomes.push(outcome);
        }
        decided
    }
}

/// What the sandbox already answered for these client ids: the same answer again.
async fn known_answers<C: ConnectionTrait>(
    conn: &C,
    batch: &[WithdrawalRequest],
) -> Result<HashMap<String, WithdrawalOutcome>, DbErr> {
    let ids: Vec<String> = batch.iter().map(|r| r.client_id.clone()).collect();
    // Only what the answer needs: (client id, id, status, failed reason).
    let found: Vec<(String, String, SandboxWithdrawalStatus, Option<String>)> =
        sandbox_withdrawal::Entity::find()
            .select_only()
            .column(sandbox_withdrawal::Column::ClientId)
            .column(sandbox_withdrawal::Column::Id)
            .column(sandbox_withdrawal::Column::Status)
            .column(sandbox_withdrawal::Column::FailedReason)
            .filter(bulk::one_of(
                conn.get_database_backend(),
                sandbox_withdrawal::Column::ClientId,
                ids,
            ))
            .into_tuple()
            .all(conn)
            .await?;
    Ok(found
        .into_iter()
        .map(|(client_id, cex_id, status, failed_reason)| {
            let outcome = match failed_reason
                .as_deref()
                .and_then(|r| r.strip_prefix(REJECTED))
            {
                Some(reason) if status == SandboxWithdrawalStatus::Failed => {
                    WithdrawalOutcome::Rejected {
                        reason: reason.to_owned(),
                    }
                }
                _ => WithdrawalOutcome::Accepted { cex_id },
            };
            (client_id, outcome)
        })
        .collect())
}
