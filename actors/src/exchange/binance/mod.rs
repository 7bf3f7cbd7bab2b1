//! The Binance provider: USDC withdrawals from a Binance spot or funding wallet over Binance's
//! REST API (wallet endpoints `/sapi/v1/capital/…`), signed with the account's API key.
//!
//! Endpoints:
//! - `GET /api/v3/account` (spot) or `POST /sapi/v1/asset/get-funding-asset` (funding): the
//!   wallet's free USDC;
//! - `GET /sapi/v1/capital/deposit/address?coin=USDC&network=…`: where funds are sent;
//! - `GET /sapi/v1/capital/config/getall`: each network's `withdrawEnable`, `withdrawFee`,
//!   `withdrawMin` and `withdrawIntegerMultiple`
//!   (<https://developers.binance.com/docs/wallet/capital/all-coins-info>);
//! - `POST /sapi/v1/capital/withdraw/apply` with `withdrawOrderId` = our client id in its
//!   compact form and `walletType` (0 spot, 1 funding) stated, never left to the account's
//!   "selected wallet" (<https://developers.binance.com/docs/wallet/capital/withdraw>);
//! - `GET /sapi/v1/capital/withdraw/history` by `withdrawOrderId` ("if `withdrawOrderId` is
//!   sent, time between `startTime` and `endTime` must be less than 7 days"), or for a batch by
//!   time window ("less than 90 days"), `limit` at most 1000, paged by `offset`; "Request
//!   limit: 10 requests per second"
//!   (<https://developers.binance.com/docs/wallet/capital/withdraw-history>);
//! - `GET /api/v3/time`: Binance's clock, read again when a timestamp is refused (-1021);
//! - `GET /sapi/v1/account/apiRestrictions`: whether the key may withdraw (`payroll admin
//!   exchange check`).
//!
//! What Binance documents, and what this provider does with it:
//! - **`withdrawOrderId` is a look-up key, not a guard.** The withdraw page describes it only
//!   as "client side id for withdrawal, if provide here, can be used in GET
//!   /sapi/v1/capital/withdraw/history for query"; it documents neither uniqueness nor the
//!   refusal of a second withdrawal under an id it holds, and its error codes have no
//!   duplicate-id code. So [`ExchangeProvider::refuses_repeated_client_id`] is false: an
//!   unknown outcome is resent only by the slower rule (CONTRACT §7).
//! - **The fee comes out of the amount.** The error list has -4028 "The amount of withdrawal
//!   must be greater than the Commission" (<https://developers.binance.com/docs/wallet/error-code>),
//!   and the request has no fee field: Binance sends `amount` minus its fee. So this provider
//!   asks for amount + fee, and the payee receives the payout's amount. Binance does not take
//!   the fee fixed at confirm: before each batch of sends the provider reads the current fees
//!   (`config/getall`, weight 10 of an IP's 6000 a minute); a higher one refuses the attempt
//!   (`fee_changed: …`), a lower one is what is added. Should Binance raise its fee between
//!   that read and the send, the payee receives less: the history then reports
//!   `amount − transactionFee` under the payout's amount, a mismatch, and the payout is stuck
//!   for an operator (CONTRACT §7), never COMPLETED. The history's `amount` is read as what was asked for, and
//!   `amount − transactionFee` is checked against the payout's amount.
//! - **Rate limits.** The withdraw endpoint weighs 900 of a UID's 180000 a minute (200
//!   withdrawals a minute), so withdrawals are held to 3 a second with bursts of 3; the history
//!   to its documented 10 requests a second; other reads to 10 a second. A 429 or 418 (an IP
//!   ban, "from 2 minutes to 3 days") stops every request of this provider until its
//!   `Retry-After` has passed: withdrawals answer "rate limited" (nothing was sent, the job
//!   waits), reads answer [`ExchangeError::Paused`] (the exchange was reached: a run looks its
//!   withdrawals up again later and its job never fails for it).
//! - **Clock.** A request refused as outside `recvWindow` (-1021) reads `GET /api/v3/time`,
//!   keeps the difference, and is signed and sent once more (it was refused before anything was
//!   done).
//! - Refused credentials or permissions (-2015 "Invalid API-key, IP, or permissions for
//!   action", -2014, -1022) fail the job; wallet refusals (-4xxx: not whitelisted, illegal
//!   address, insufficient balance, under the minimum…) fail that payout with Binance's
//!   message; a 5xx or a timeout is unknown and looked up.
//!
//! Binance cannot pull money from the treasury wallet, so treasury transfers answer
//! [`ExchangeError::TransferUnsupported`] with the deposit address.

mod answers;
mod history;
pub mod protocol;

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use awc::http::Method;
use chrono::{DateTime, Utc};
use payroll_entities::{Cents, Network};
use serde::de::DeserializeOwned;

use self::{
    answers::{
        BAN_BACKOFF_MS, RATE_LIMIT_BACKOFF_MS, describe, error_code, step_cents, withdrawal_outcome,
    },
    protocol::{COIN, CodeClass, Rounding},
};
use super::{
    Balances, ExchangeError, ExchangeProvider, FEE_CHANGED, Quote, RemoteStatus, WithdrawalOutcome,
    WithdrawalRequest, cut_exchange_text,
    http::{Answer, EndpointLimiter, Wire, lock},
};
use crate::settings::BinanceSettings;

/// Withdrawals a second (and their burst): 900 of the 180000 weight a UID has a minute.
pub const WITHDRAWALS_PER_SECOND: u32 = 3;
/// History requests a second, as documented.
const HISTORY_PER_SECOND: u32 = 10;
/// Other reads a second: far under their IP weight.
const READS_PER_SECOND: u32 = 10;
/// Fee quotes for confirm are read again after this long…
const QUOTE_TTL: Duration = Duration::from_secs(60);
/// …and read again for each batch of sends (a fee fixed at confirm is checked against the
/// current one, not one remembered).
pub const SEND_QUOTE_TTL: Duration = Duration::ZERO;
/// A read waits out a pause this short rather than failing.
const SHORT_PAUSE: Duration = Duration::from_secs(2);

/// One network's terms.
#[derive(Debug, Clone, Copy)]
struct NetworkQuote {
    fee: Cents,
    minimum: Cents,
    step: Cents,
}

/// The endpoints' limiters.
struct Limiters {
    reads: EndpointLimiter,
    withdraw: EndpointLimiter,
    history: EndpointLimiter,
}

/// Why a signed request got no answer worth reading.
enum CallError {
    /// Nothing was sent: the provider is paused after a 429 or 418, this much longer.
    Paused(Duration),
    /// No whole answer (timeout, reset, refused).
    NoAnswer(String),
}

pub struct BinanceProvider {
    settings: BinanceSettings,
    wire: Wire,
    networks: HashMap<Network, String>,
    deposit_network: Network,
    limiters: Limiters,
    /// Binance's clock minus ours, in milliseconds, as last read.
    clock_offset_ms: AtomicI64,
    /// Nothing is sent before this (a 429's or 418's `Retry-After`).
    paused_until: Mutex<Option<Instant>>,
    quotes: Mutex<Option<(Instant, HashMap<String, NetworkQuote>)>>,
    deposit_address: Mutex<Option<String>>,
}

impl BinanceProvider {
    /// The provider for validated settings (`src/config.rs` checks every key first).
    pub fn new(settings: BinanceSettings) -> Result<BinanceProvider, String> {
        let networks = settings.network_map()?;
        let deposit_network = crate::settings::deposit_in(
            &networks,
            &settings.deposit_network,
            "exchange.binance.networks",
        )?;
        Ok(BinanceProvider {
            wire: Wire::new(&settings.base_url, settings.timeout_ms),
            networks,
            deposit_network,
            limiters: Limiters {
                reads: EndpointLimiter::new(READS_PER_SECOND),
                withdraw: EndpointLimiter::new(WITHDRAWALS_PER_SECOND),
                history: EndpointLimiter::new(HISTORY_PER_SECOND),
            },
            clock_offset_ms: AtomicI64::new(0),
            paused_until: Mutex::new(None),
            quotes: Mutex::new(None),
            deposit_address: Mutex::new(None),
            settings,
        })
    }

    fn wallet_type(&self) -> &'static str {
        if self.settings.wallet == "funding" {
            "1"
        } else {
            "0"
        }
    }

    /// How much longer nothing may be sent.
    fn pause_left(&self) -> Option<Duration> {
        let mut paused = lock(&self.paused_until);
        match *paused {
            Some(until) if until > Instant::now() => Some(until - Instant::now()),
            Some(_) => {
                *paused = None;
                None
            }
            None => None,
        }
    }

    fn pause_for(&self, wait_ms: u64) {
        let until = Instant::now() + Duration::from_millis(wait_ms.max(1));
        let mut paused = lock(&self.paused_until);
        if paused.is_none_or(|p| p < until) {
            *paused = Some(until);
        }
    }

    /// Sends one signed request: `timestamp` (by Binance's clock as last read) and
    /// `recvWindow` are appended to `params`, the signature last. A GET carries them in its
    /// query string, a POST in its form body. A 429 or 418 pauses the provider.
    async fn signed(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Answer, CallError> {
        if let Some(left) = self.pause_left() {
            return Err(CallError::Paused(left));
        }
        let timestamp =
            Utc::now().timestamp_millis() + self.clock_offset_ms.load(Ordering::Relaxed);
        let mut all: Vec<(&str, String)> = params.to_vec();
        all.push(("timestamp", timestamp.to_string()));
        all.push(("recvWindow", self.settings.recv_window_ms.to_string()));
        let payload = protocol::query(&all);
        let signed = format!(
            "{payload}&signature={}",
            protocol::sign(&self.settings.secret_key, &payload)
        );
        let (target, body) = if method == Method::GET {
            (format!("{path}?{signed}"), None)
        } else {
            (
                path.to_owned(),
                Some(("application/x-www-form-urlencoded", signed)),
            )
        };
        let request = self
            .wire
            .request(method, &target)
            .insert_header(("X-MBX-APIKEY", self.settings.api_key.as_str()));
        let answer = self
            .wire
            .send(request, body)
            .await
            .map_err(CallError::NoAnswer)?;
        match answer.status {
            418 => self.pause_for(answer.retry_after_ms.unwrap_or(BAN_BACKOFF_MS)),
            429 => self.pause_for(answer.retry_after_ms.unwrap_or(RATE_LIMIT_BACKOFF_MS)),
            _ => {}
        }
        Ok(answer)
    }

    /// Reads Binance's clock and keeps how far ours is from it.
    async fn resync_clock(&self) -> Result<(), String> {
        let before = Utc::now().timestamp_millis();
        let request = self.wire.request(Method::GET, "/api/v3/time");
        let answer = self.wire.send(request, None).await?;
        let after = Utc::now().timestamp_millis();
        let time: protocol::ServerTime = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("HTTP {}, unreadable server time: {e}", answer.status))?;
        let offset = time.server_time - (before + after) / 2;
        tracing::warn!(
            offset_ms = offset,
            "Binance refused a timestamp as outside recvWindow; its clock was read again"
        );
        self.clock_offset_ms.store(offset, Ordering::Relaxed);
        Ok(())
    }

    /// A signed request whose timestamp, refused as outside `recvWindow`, is signed again
    /// once after Binance's clock was read: Binance refused it before doing anything.
    async fn signed_resynced(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
        deadline: Option<Instant>,
    ) -> Result<Answer, CallError> {
        let answer = self.signed(method.clone(), path, params).await?;
        if protocol::classify_answer(answer.status, error_code(&answer)) != CodeClass::Timestamp {
            return Ok(answer);
        }
        if let Err(why) = self.resync_clock().await {
            tracing::warn!(%why, "Binance's clock could not be read");
            return Ok(answer);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Ok(answer);
        }
        self.signed(method, path, params).await
    }

    /// A read: the answer's JSON, or why there is none.
    async fn read<T: DeserializeOwned>(
        &self,
        limiter: &EndpointLimiter,
        method: Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<T, ExchangeError> {
        limiter.acquire().await;
        if let Some(left) = self.pause_left()
            && left <= SHORT_PAUSE
        {
            actix_rt::time::sleep(left).await;
        }
        let answer = match self.signed_resynced(method, path, params, None).await {
            Ok(answer) => answer,
            Err(CallError::Paused(left)) => {
                return Err(ExchangeError::Paused(format!(
                    "Binance {path}: rate limited or banned for {} s more; nothing is sent until then",
                    left.as_secs().max(1)
                )));
            }
            Err(CallError::NoAnswer(why)) => return Err(unavailable(path, &why)),
        };
        if matches!(answer.status, 418 | 429) {
            // Reached, and told to wait: the provider is paused until `Retry-After`.
            return Err(ExchangeError::Paused(format!(
                "Binance {path}: {}",
                describe(&answer)
            )));
        }
        if !(200..300).contains(&answer.status) {
            return Err(unavailable(path, &describe(&answer)));
        }
        serde_json::from_slice(&answer.body).map_err(|e| {
            unavailable(
                path,
                &format!("HTTP {}, unreadable answer: {e}", answer.status),
            )
        })
    }

    /// Every network's terms for USDC, read at most `ttl` ago. A failed read falls back on the
    /// last one, however old, when there is one and `ttl` is not zero (a send never adds a fee
    /// remembered from before).
    async fn quotes(&self, ttl: Duration) -> Result<HashMap<String, NetworkQuote>, ExchangeError> {
        let cached = lock(&self.quotes).clone();
        if let Some((at, quotes)) = &cached
            && at.elapsed() < ttl
        {
            return Ok(quotes.clone());
        }
        let coins: Vec<protocol::CoinInfo> = match self
            .read(
                &self.limiters.reads,
                Method::GET,
                "/sapi/v1/capital/config/getall",
                &[],
            )
            .await
        {
            Ok(coins) => coins,
            Err(err) => {
                return match cached.filter(|_| !ttl.is_zero()) {
                    Some((_, quotes)) => {
                        tracing::warn!(error = %err, "Binance's coin configuration could not be read; the last one is used");
                        Ok(quotes)
                    }
                    None => Err(err),
                };
            }
        };
        let mut quotes = HashMap::new();
        for coin in coins
            .into_iter()
            .filter(|c| c.coin == COIN && c.withdraw_all_enable)
        {
            for n in coin.network_list.into_iter().filter(|n| n.withdraw_enable) {
                let fee = protocol::amount_to_cents(&n.withdraw_fee, Rounding::Up);
                let minimum = protocol::amount_to_cents(&n.withdraw_min, Rounding::Up);
                let step = step_cents(&n.withdraw_integer_multiple);
                match (fee, minimum, step) {
                    (Some(fee), Some(minimum), Some(step)) => {
                        quotes.insert(n.network, NetworkQuote { fee, minimum, step });
                    }
                    _ => {
                        tracing::warn!(
                            network = %cut_exchange_text(&n.network),
                            fee = %cut_exchange_text(&n.withdraw_fee),
                            min = %cut_exchange_text(&n.withdraw_min),
                            multiple = %cut_exchange_text(&n.withdraw_integer_multiple),
                            "Binance quoted terms in no whole cents; the network is left out"
                        )
                    }
                }
            }
        }
        *lock(&self.quotes) = Some((Instant::now(), quotes.clone()));
        Ok(quotes)
    }

    async fn deposit_address(&self) -> Result<String, ExchangeError> {
        if let Some(address) = lock(&self.deposit_address).clone() {
            return Ok(address);
        }
        let network = self
            .networks
            .get(&self.deposit_network)
            .cloned()
            .unwrap_or_default();
        let found: protocol::DepositAddress = self
            .read(
                &self.limiters.reads,
                Method::GET,
                "/sapi/v1/capital/deposit/address",
                &[("coin", COIN.into()), ("network", network.clone())],
            )
            .await?;
        if found.address.is_empty() {
            return Err(ExchangeError::Unavailable(format!(
                "Binance has no {COIN} deposit address on {network}"
            )));
        }
        *lock(&self.deposit_address) = Some(found.address.clone());
        Ok(found.address)
    }

    /// Sends one withdrawal and reads Binance's answer.
    async fn withdraw_one(
        &self,
        request: &WithdrawalRequest,
        quotes: &Result<HashMap<String, NetworkQuote>, ExchangeError>,
        deadline: Instant,
    ) -> WithdrawalOutcome {
        let (order_id, network) = match super::compact_request(
            "Binance",
            request,
            &self.networks,
            "exchange.binance.networks",
        ) {
            Ok(compact) => compact,
            Err(refused) => return refused,
        };
        // Binance takes its fee out of what it is asked to send: the current fee is added, and
        // one higher than the attempt's refuses it before anything is sent.
        let fee = match quotes {
            Ok(quotes) => match quotes.get(network) {
                Some(q) if q.fee > request.fee => {
                    return WithdrawalOutcome::Rejected {
                        reason: format!(
                            "{FEE_CHANGED}Binance's fee on {network} is {} cents now, {} cents were fixed at confirm; nothing was sent",
                            q.fee.0, request.fee.0
                        ),
                    };
                }
                Some(q) => q.fee,
                None => {
                    return WithdrawalOutcome::Rejected {
                        reason: format!(
                            "Binance does not withdraw {COIN} on {network} now; nothing was sent"
                        ),
                    };
                }
            },
            // Nothing was sent: tried again later, like a rate limit.
            Err(err) => {
                tracing::warn!(client_id = %request.client_id, error = %err, "Binance's fee could not be read; the withdrawal waits");
                return WithdrawalOutcome::RateLimited {
                    retry_after_ms: RATE_LIMIT_BACKOFF_MS,
                };
            }
        };
        let amount = Cents(request.amount.0.saturating_add(fee.0));
        let params = [
            ("coin", COIN.to_owned()),
            ("withdrawOrderId", order_id),
            ("network", network.clone()),
            ("address", request.address.clone()),
            ("amount", protocol::cents_to_amount(amount)),
            ("walletType", self.wallet_type().to_owned()),
        ];
        self.limiters.withdraw.acquire().await;
        // Sent only while its stamp is fresh: a limiter, or a paused process, may have held it
        // past the deadline, after which another instance may have resent it.
        if Instant::now() > deadline {
            return super::not_sent_past_deadline();
        }
        let answer = match self
            .signed_resynced(
                Method::POST,
                "/sapi/v1/capital/withdraw/apply",
                &params,
                Some(deadline),
            )
            .await
        {
            Ok(answer) => answer,
            Err(CallError::Paused(left)) => {
                return WithdrawalOutcome::RateLimited {
                    retry_after_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1),
                };
            }
            Err(CallError::NoAnswer(why)) => {
                return WithdrawalOutcome::Ambiguous {
                    reason: format!("no answer from Binance: {why}"),
                };
            }
        };
        withdrawal_outcome(&answer)
    }
}

fn unavailable(path: &str, why: &str) -> ExchangeError {
    ExchangeError::Unavailable(format!("Binance {path}: {}", cut_exchange_text(why)))
}

#[async_trait(?Send)]
impl ExchangeProvider for BinanceProvider {
    fn name(&self) -> &'static str {
        "binance"
    }

    fn withdrawal_limit(&self) -> Option<(u32, u32)> {
        Some((WITHDRAWALS_PER_SECOND, WITHDRAWALS_PER_SECOND))
    }

    async fn balances(&self) -> Result<Balances, ExchangeError> {
        let balances: Vec<protocol::AssetBalance> = if self.settings.wallet == "funding" {
            self.read(
                &self.limiters.reads,
                Method::POST,
                "/sapi/v1/asset/get-funding-asset",
                &[("asset", COIN.into())],
            )
            .await?
        } else {
            let account: protocol::SpotAccount = self
                .read(&self.limiters.reads, Method::GET, "/api/v3/account", &[])
                .await?;
            account.balances
        };
        let available = match balances.iter().find(|b| b.asset == COIN) {
            None => Cents::ZERO,
            Some(b) => protocol::amount_to_cents(&b.free, Rounding::Down).ok_or_else(|| {
                ExchangeError::Unavailable(format!(
                    "Binance reported an unreadable {COIN} balance: {:?}",
                    cut_exchange_text(&b.free)
                ))
            })?,
        };
        Ok(Balances {
            available,
            deposit_address: self.deposit_address().await?,
            network: self.deposit_network,
            treasury: None,
        })
    }

    async fn may_withdraw(&self) -> Result<Option<bool>, ExchangeError> {
        let restrictions: protocol::ApiRestrictions = self
            .read(
                &self.limiters.reads,
                Method::GET,
                "/sapi/v1/account/apiRestrictions",
                &[],
            )
            .await?;
        Ok(Some(
            restrictions.enable_withdrawals && restrictions.ip_restrict,
        ))
    }

    async fn deposit(&self) -> Result<(String, Network), ExchangeError> {
        Ok((self.deposit_address().await?, self.deposit_network))
    }

    async fn quote(&self, network: Network) -> Result<Option<Quote>, ExchangeError> {
        let Some(name) = self.networks.get(&network) else {
            return Ok(None);
        };
        Ok(self.quotes(QUOTE_TTL).await?.get(name).map(|q| Quote {
            fee: q.fee,
            minimum: q.minimum,
            step: q.step,
            fee_from_amount: true,
        }))
    }

    async fn withdraw(
        &self,
        batch: &[WithdrawalRequest],
        deadline: Instant,
    ) -> Vec<WithdrawalOutcome> {
        // Binance's current fees, read once for the batch: what each send adds.
        let quotes = self.quotes(SEND_QUOTE_TTL).await;
        if Instant::now() > deadline {
            // The read took the sends' time: none is sent, and none counts as sent.
            return vec![
                WithdrawalOutcome::RateLimited {
                    retry_after_ms: RATE_LIMIT_BACKOFF_MS,
                };
                batch.len()
            ];
        }
        super::one_by_one("binance", batch, |request| {
            self.withdraw_one(request, &quotes, deadline)
        })
        .await
    }

    async fn lookup(
        &self,
        client_ids: &[String],
        sent_since: Option<DateTime<Utc>>,
    ) -> Result<HashMap<String, RemoteStatus>, ExchangeError> {
        self.look_up(client_ids, sent_since).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_never_shows_the_credentials() {
        let settings = BinanceSettings {
            base_url: "https://api.binance.com".into(),
            api_key: "key-123".into(),
            secret_key: "secret-456".into(),
            recv_window_ms: 5000,
            networks: [("ETHEREUM".to_owned(), "ETH".to_owned())].into(),
            deposit_network: "ETHEREUM".into(),
            wallet: "spot".into(),
            timeout_ms: 1000,
        };
        let shown = format!("{settings:?}");
        for secret in ["key-123", "secret-456"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("[redacted]"));
    }
}
