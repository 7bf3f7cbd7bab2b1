//! The exchange: a provider interface (balance, withdrawals by client id, lookups, fees,
//! treasury transfers), the sandbox, OKX and Binance providers, and the `ExchangeActor` that owns the
//! conversation with it and the withdrawal rate limit.

pub mod actor;
pub mod binance;
pub mod desk;
pub mod fence;
pub mod history;
pub mod holds;
pub mod http;
pub mod okx;
pub mod outcome;
pub mod point;
pub mod rate_limit;
pub mod sandbox;
pub mod wire;

use std::collections::HashMap;

use async_trait::async_trait;
use payroll_entities::{Cents, Network, TransferDirection, health::Fault, treasury_transfer};

/// The payout id and attempt in a client withdrawal id `pay_…-<attempt>`.
pub fn parse_client_id(client_id: &str) -> Option<(&str, i32)> {
    let (payout_id, attempt) = client_id.rsplit_once('-')?;
    Some((payout_id, attempt.parse().ok()?))
}

/// The payouts whose current attempt has one of these client ids, found through the primary
/// key: on PostgreSQL no index of client ids exists (a claim is then a heap-only update), and
/// a client id is its payout's id and attempt.
pub fn payouts_of_client_ids(
    backend: sea_orm::DatabaseBackend,
    client_ids: &[String],
) -> sea_orm::Condition {
    use payroll_entities::{bulk::one_of, payout::Column};
    let ids = client_ids
        .iter()
        .filter_map(|c| parse_client_id(c).map(|(id, _)| id.to_owned()));
    sea_orm::Condition::all()
        .add(one_of(backend, Column::Id, ids))
        .add(one_of(
            backend,
            Column::ClientWithdrawalId,
            client_ids.iter().cloned(),
        ))
}

/// What the exchange charges for a withdrawal on one network, and the least it withdraws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quote {
    pub fee: Cents,
    /// The least amount the exchange withdraws, in its own terms (see [`Quote::sent`]).
    pub minimum: Cents,
    /// What the exchange withdraws is a multiple of this (1: any whole number of cents).
    pub step: Cents,
    /// The exchange takes its fee out of the amount it is asked to withdraw, so the provider
    /// asks for amount + fee and the payee receives the amount; otherwise the fee is charged on
    /// top and the amount is asked for as it is.
    pub fee_from_amount: bool,
}

impl Quote {
    /// A fee charged on top, any amount of whole cents from `minimum` up.
    pub fn on_top(fee: Cents, minimum: Cents) -> Quote {
        Quote {
            fee,
            minimum,
            step: Cents(1),
            fee_from_amount: false,
        }
    }

    /// The amount the exchange is asked to withdraw so that the payee receives `amount`.
    pub fn sent(&self, amount: Cents) -> Cents {
        if self.fee_from_amount {
            Cents(amount.0.saturating_add(self.fee.0))
        } else {
            amount
        }
    }

    /// Why the exchange would refuse to pay `amount` on `network`, if it would: under its
    /// minimum, or not a multiple of its step.
    pub fn refusal(&self, amount: Cents, network: Network) -> Option<String> {
        let sent = self.sent(amount);
        let asked = if self.fee_from_amount {
            format!(
                "{} cents (with the exchange's fee of {} cents, which it takes out of what it sends)",
                sent.0, self.fee.0
            )
        } else {
            format!("{} cents", sent.0)
        };
        if sent.0 < self.minimum.0 {
            return Some(format!(
                "{asked} is below the exchange's minimum withdrawal of {} cents on {network}; cancel this payout or change the amount",
                self.minimum.0
            ));
        }
        if self.step.0 > 1 && sent.0 % self.step.0 != 0 {
            return Some(format!(
                "{asked} is not a multiple of the exchange's withdrawal step of {} cents on {network}; change the amount or cancel this payout",
                self.step.0
            ));
        }
        None
    }
}

/// The prefix of a refusal because the fee sent is no longer the exchange's fee.
pub const FEE_CHANGED: &str = "fee_changed: ";

/// One withdrawal to send: our client id is `pay_…-<attempt>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithdrawalRequest {
    pub client_id: String,
    pub amount: Cents,
    pub fee: Cents,
    pub network: Network,
    pub address: String,
}

/// What the exchange answered to one withdrawal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WithdrawalOutcome {
    /// Accepted: the money left the available balance.
    Accepted { cex_id: String },
    /// Definitely refused: nothing was withdrawn.
    Rejected { reason: String },
    /// The exchange's rate limit: nothing was withdrawn; send again later.
    RateLimited { retry_after_ms: u64 },
    /// No clear answer (timeout, reset, 5xx): look the client id up before anything else.
    Ambiguous { reason: String },
    /// The exchange refused our credentials (a bad key or signature): nothing was created.
    CredentialsRefused { reason: String },
    /// Never sent: the instance no longer held the run's lease when the send was due.
    NotSent { reason: String },
}

/// A withdrawal as the exchange knows it, looked up by client id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteStatus {
    /// The exchange has no withdrawal with this client id.
    Unknown,
    Pending {
        cex_id: String,
        reported: Reported,
    },
    Completed {
        cex_id: String,
        tx_hash: String,
        explorer_url: Option<String>,
        reported: Reported,
    },
    Failed {
        cex_id: String,
        reason: String,
    },
}

/// What the exchange reports it withdrew under a client id, to be checked against what was sent
/// (CONTRACT §7, "The exchange's word is checked"). The amount is what the payee receives:
/// each provider reports it so, whatever its own fee semantics. `None` where the provider does
/// not say; what a provider's record ought to hold and left out is named in `missing`, and
/// counts as a mismatch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reported {
    pub currency: Option<String>,
    pub amount: Option<Cents>,
    pub network: Option<Network>,
    pub address: Option<String>,
    /// Fields the record left empty (`amount`, `address`…): what it withdrew is not known.
    pub missing: Vec<&'static str>,
    /// The exchange's ids of further withdrawals it made under the same client id: money left
    /// more than once, which only an operator can sort out.
    pub also: Vec<String>,
}

impl Reported {
    /// What differs from what was sent (`amount` to `address` on `network`, in USDC), if
    /// anything.
    pub fn mismatch(&self, amount: Cents, network: Network, address: &str) -> Option<String> {
        let mut wrong = Vec::new();
        if !self.also.is_empty() {
            wrong.push(format!(
                "the exchange made {} more withdrawal(s) under this client id: {}",
                self.also.len(),
                cut_exchange_text(&self.also.join(", "))
            ));
        }
        if !self.missing.is_empty() {
            wrong.push(format!("not reported: {}", self.missing.join(", ")));
        }
        if let Some(currency) = &self.currency
            && !currency.eq_ignore_ascii_case("USDC")
        {
            wrong.push(format!(
                "currency {} instead of USDC",
                cut_exchange_text(currency)
            ));
        }
        if let Some(reported) = self.amount
            && reported != amount
        {
            wrong.push(format!(
                "amount {} cents instead of {} cents",
                reported.0, amount.0
            ));
        }
        if let Some(reported) = self.network
            && reported != network
        {
            wrong.push(format!("network {reported} instead of {network}"));
        }
        if let Some(reported) = &self.address {
            // EVM addresses differ only in their checksum's case; Solana's are exact.
            let same = if network.is_evm() {
                reported.eq_ignore_ascii_case(address)
            } else {
                reported == address
            };
            if !same {
                wrong.push(format!(
                    "address {} instead of {address}",
                    cut_exchange_text(reported)
                ));
            }
        }
        (!wrong.is_empty()).then(|| wrong.join(", "))
    }
}

/// Text an exchange sent (an error message, a field of its history) as the service keeps it:
/// at most 500 characters, wherever it is logged or stored.
pub fn cut_exchange_text(text: &str) -> String {
    match text.char_indices().nth(500) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whether `hash` is a transaction hash in its chain's form: `0x` and 64 hex digits on EVM
/// chains, the base58 of a 64-byte signature on Solana. Only such a hash is kept, and only
/// from it is an explorer link built.
pub fn valid_tx_hash(network: Network, hash: &str) -> bool {
    if network.is_evm() {
        hash.len() == 66
            && hash.starts_with("0x")
            && hash[2..].bytes().all(|b| b.is_ascii_hexdigit())
    } else {
        (64..=90).contains(&hash.len())
            && bs58::decode(hash)
                .into_vec()
                .is_ok_and(|bytes| bytes.len() == 64)
    }
}

/// The exchange account and, where the provider has one, the treasury wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balances {
    pub available: Cents,
    pub deposit_address: String,
    pub network: Network,
    pub treasury: Option<TreasuryWallet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreasuryWallet {
    pub address: String,
    pub network: Network,
    pub balance: Cents,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ExchangeError {
    #[error("exchange unavailable: {0}")]
    Unavailable(String),
    /// The exchange asked us to wait (its rate limit, an IP ban) and nothing is sent until then:
    /// it was reached, so this never counts toward `exchange.unreachable_fail_ms`.
    #[error("the exchange asked us to wait: {0}")]
    Paused(String),
    /// Our own database failed (the sandbox keeps its account there, the holds ledger is
    /// there): an infrastructure fault of ours, not the exchange's.
    #[error("database {fault}: {cause}", fault = .0.as_str(), cause = .1)]
    Database(Fault, String),
    #[error("the source holds {available} cents, {requested} were requested")]
    InsufficientFunds { requested: Cents, available: Cents },
    #[error("the provider cannot move treasury funds")]
    TransferUnsupported {
        deposit_address: String,
        network: Network,
    },
}

impl From<sea_orm::DbErr> for ExchangeError {
    fn from(err: sea_orm::DbErr) -> ExchangeError {
        match payroll_entities::health::classify(&err) {
            Some(fault) => ExchangeError::Database(fault, err.to_string()),
            None => ExchangeError::Unavailable(err.to_string()),
        }
    }
}

/// A provider is only called from the `ExchangeActor`'s arbiter, so its futures need not be
/// `Send`: a provider may use that arbiter's (thread-bound) HTTP client.
#[async_trait(?Send)]
pub trait ExchangeProvider: Send + Sync {
    /// `sandbox`, `okx`, …
    fn name(&self) -> &'static str;

    /// The exchange's own withdrawal limit as (per second, burst), which the `ExchangeActor`'s
    /// configured limit never exceeds; `None` when the exchange has none.
    fn withdrawal_limit(&self) -> Option<(u32, u32)> {
        None
    }

    /// Whether a look-up uses the time of the first send among its client ids (`sent_since`):
    /// an exchange that reads its withdrawal history back to there. One that finds each client
    /// id by itself (the sandbox, by its index) is not given it, and a run does not read it.
    fn lookups_read_history(&self) -> bool {
        true
    }

    /// Whether the exchange *documents* that it refuses a second withdrawal under a client id
    /// it already holds (cited in the provider's module). Only then is an unknown outcome
    /// resent after `exchange.reconcile_grace_ms`; otherwise our own record is the only guard
    /// and the slower rule applies (CONTRACT §7, "Resends depend on the exchange").
    fn refuses_repeated_client_id(&self) -> bool {
        false
    }

    async fn balances(&self) -> Result<Balances, ExchangeError>;

    /// Whether the key may withdraw, where the exchange lets a key read its own permissions
    /// (`None` where it does not: only a withdrawal would tell).
    async fn may_withdraw(&self) -> Result<Option<bool>, ExchangeError> {
        Ok(None)
    }

    /// The fee and minimum withdrawal on `network` now, or `None` when the exchange cannot
    /// withdraw to that network.
    async fn quote(&self, network: Network) -> Result<Option<Quote>, ExchangeError>;

    /// Sends withdrawals; one outcome per request, in order, each with the fee it carries: an
    /// exchange whose fee is now higher refuses it with a reason starting [`FEE_CHANGED`]. A
    /// provider without batches sends them one by one. None starts after `deadline` (its send
    /// was stamped too long ago): that one is answered [`WithdrawalOutcome::NotSent`]
    /// ([`not_sent_past_deadline`]) and looked up. One started before may take up to the
    /// provider's own call deadline.
    async fn withdraw(
        &self,
        batch: &[WithdrawalRequest],
        deadline: std::time::Instant,
    ) -> Vec<WithdrawalOutcome>;

    /// What the exchange knows of these client ids, none of which was sent before
    /// `sent_since` (where known: a provider may read its history back to there instead of
    /// asking id by id). An id left out of the answer is unknown to the exchange.
    async fn lookup(
        &self,
        client_ids: &[String],
        sent_since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<HashMap<String, RemoteStatus>, ExchangeError>;

    /// Moves funds between the treasury wallet and the exchange account. `transfer_id` is
    /// ours: a transfer already made under it is answered again, never made twice. A real
    /// exchange cannot pull money from the treasury wallet: by default this answers
    /// [`ExchangeError::TransferUnsupported`] with the deposit address.
    async fn transfer(
        &self,
        _transfer_id: &str,
        _direction: TransferDirection,
        _amount: Cents,
        _note: Option<String>,
    ) -> Result<treasury_transfer::Model, ExchangeError> {
        let (deposit_address, network) = self.deposit().await?;
        Err(ExchangeError::TransferUnsupported {
            deposit_address,
            network,
        })
    }

    /// Where funds are sent to the exchange account, and on which network (by default read
    /// with the balances; a provider that keeps it answers without a call).
    async fn deposit(&self) -> Result<(String, Network), ExchangeError> {
        let balances = self.balances().await?;
        Ok((balances.deposit_address, balances.network))
    }

    /// Transfers, newest first, with their current status (none by default: nothing moves
    /// treasury funds through a real exchange).
    async fn transfers(
        &self,
        _limit: u64,
        _offset: u64,
    ) -> Result<(Vec<treasury_transfer::Model>, u64), ExchangeError> {
        Ok((Vec::new(), 0))
    }
}

/// What a REST exchange needs of a withdrawal before anything is sent: our client id in its
/// compact form and the exchange's name of the network (from `networks`, the settings
/// `section`); or the refusal, nothing sent, when either is missing or the amount is not at
/// least a cent.
pub fn compact_request<'a>(
    exchange: &str,
    request: &WithdrawalRequest,
    networks: &'a HashMap<Network, String>,
    section: &str,
) -> Result<(String, &'a String), WithdrawalOutcome> {
    let refuse = |reason: String| Err(WithdrawalOutcome::Rejected { reason });
    let Some(client_id) = wire::to_compact_client_id(&request.client_id) else {
        return refuse(format!(
            "the client id {} has no {exchange} form; nothing was sent",
            request.client_id
        ));
    };
    let Some(network) = networks.get(&request.network) else {
        return refuse(format!(
            "no {exchange} network is configured for {} ({section}); nothing was sent",
            request.network
        ));
    };
    if request.amount.0 < 1 {
        return refuse("a withdrawal must be at least 1 cent".into());
    }
    Ok((client_id, network))
}

/// Sends a batch one withdrawal at a time with `send`, as an exchange without batches takes
/// them; after a rate-limit answer the rest are not sent (they would meet the same limit).
/// Each answer is logged under the exchange's name.
pub async fn one_by_one<'a, F, Fut>(
    exchange: &str,
    batch: &'a [WithdrawalRequest],
    mut send: F,
) -> Vec<WithdrawalOutcome>
where
    F: FnMut(&'a WithdrawalRequest) -> Fut,
    Fut: std::future::Future<Output = WithdrawalOutcome>,
{
    let mut outcomes = Vec::with_capacity(batch.len());
    for request in batch {
        if let Some(WithdrawalOutcome::RateLimited { retry_after_ms }) = outcomes.last() {
            let retry_after_ms = *retry_after_ms;
            outcomes.push(WithdrawalOutcome::RateLimited { retry_after_ms });
            continue;
        }
        let outcome = send(request).await;
        let client_id = &request.client_id;
        match &outcome {
            WithdrawalOutcome::Accepted { cex_id } => {
                tracing::info!(%exchange, %client_id, %cex_id, "the exchange accepted a withdrawal")
            }
            WithdrawalOutcome::Rejected { reason } => {
                tracing::warn!(%exchange, %client_id, %reason, "the exchange refused a withdrawal")
            }
            WithdrawalOutcome::RateLimited { retry_after_ms } => {
                tracing::warn!(%exchange, %client_id, retry_after_ms, "the exchange's rate limit or ban; backing off")
            }
            WithdrawalOutcome::CredentialsRefused { reason } => {
                tracing::error!(%exchange, %client_id, %reason, "the exchange refused our credentials")
            }
            WithdrawalOutcome::Ambiguous { .. } | WithdrawalOutcome::NotSent { .. } => {}
        }
        outcomes.push(outcome);
    }
    outcomes
}

/// The answer to a withdrawal whose send was stamped too long ago to go now
/// (`exchange.send_deadline_ms`): never sent; looked up like any unknown outcome.
pub fn not_sent_past_deadline() -> WithdrawalOutcome {
    WithdrawalOutcome::NotSent {
        reason: "not sent: its send was stamped longer ago than exchange.send_deadline_ms; it is looked up by its client id".into(),
    }
}

/// A block explorer link for a transaction, when its hash is in its chain's form.
pub fn explorer_link(network: Network, tx_hash: &str) -> Option<String> {
    valid_tx_hash(network, tx_hash).then(|| explorer_url(network, tx_hash))
}

/// A block explorer link for a transaction (whose hash was checked, [`valid_tx_hash`]).
pub fn explorer_url(network: Network, tx_hash: &str) -> String {
    let base = match network {
        Network::Ethereum => "https://etherscan.io/tx/",
        Network::Polygon => "https://polygonscan.com/tx/",
        Network::Base => "https://basescan.org/tx/",
        Network::Arbitrum => "https://arbiscan.io/tx/",
        Network::Optimism => "https://optimistic.etherscan.io/tx/",
        Network::Solana => "https://solscan.io/tx/",
    };
    format!("{base}{tx_hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_exchange_reports_is_checked_against_what_was_sent() {
        let sent = (
            Cents(123_456),
            Network::Base,
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        );
        let honest = Reported {
            currency: Some("USDC".into()),
            amount: Some(Cents(123_456)),
            network: Some(Network::Base),
            address: Some("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed".into()),
            missing: Vec::new(),
            also: Vec::new(),
        };
        assert_eq!(honest.mismatch(sent.0, sent.1, sent.2), None);
        let twice = Reported {
            also: vec!["w2".into()],
            ..honest.clone()
        };
        let why = twice.mismatch(sent.0, sent.1, sent.2).expect("a mismatch");
        assert!(why.contains("1 more withdrawal(s)"), "{why}");
        let silent = Reported {
            amount: None,
            address: None,
            missing: vec!["amount", "address"],
            ..honest.clone()
        };
        let why = silent.mismatch(sent.0, sent.1, sent.2).expect("a mismatch");
        assert_eq!(why, "not reported: amount, address");
        let thief = Reported {
            amount: Some(Cents(1)),
            address: Some("0x000000000000000000000000000000000000dEaD".into()),
            ..honest.clone()
        };
        let why = thief.mismatch(sent.0, sent.1, sent.2).expect("a mismatch");
        assert!(
            why.contains("amount 1 cents instead of 123456 cents"),
            "{why}"
        );
        assert!(why.contains("address"), "{why}");
        assert_eq!(Reported::default().mismatch(sent.0, sent.1, sent.2), None);
    }

    #[test]
    fn hashes_are_kept_only_in_their_chains_form() {
        let evm = format!("0x{}", "ab".repeat(32));
        assert!(valid_tx_hash(Network::Base, &evm));
        assert!(!valid_tx_hash(
            Network::Base,
            "0xabc\"><script>…/../../evil"
        ));
        assert!(!valid_tx_hash(Network::Base, "0xabc"));
        assert!(explorer_link(Network::Base, "0xabc\"><script>").is_none());
        let solana = bs58::encode([7u8; 64]).into_string();
        assert!(valid_tx_hash(Network::Solana, &solana));
        assert!(!valid_tx_hash(
            Network::Solana,
            &bs58::encode([7u8; 32]).into_string()
        ));
        assert_eq!(cut_exchange_text(&"x".repeat(5000)).chars().count(), 501);
    }

    #[test]
    fn client_ids_carry_payout_and_attempt() {
        assert_eq!(parse_client_id("pay_01ABC-2"), Some(("pay_01ABC", 2)));
        assert_eq!(parse_client_id("pay_01ABC"), None);
        assert_eq!(parse_client_id("pay_01ABC-x"), None);
    }
}
