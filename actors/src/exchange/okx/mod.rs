//! The OKX provider: USDC withdrawals from an OKX funding account over OKX's v5 REST API,
//! signed with the account's API key.
//!
//! Endpoints (all private, "6 requests per second" per user ID in OKX's documentation, which
//! this provider keeps to for each endpoint on its own):
//! - `GET /api/v5/asset/balances?ccy=USDC`: the funding account's available balance;
//! - `GET /api/v5/asset/deposit-address?ccy=USDC`: where funds are sent to the account;
//! - `GET /api/v5/asset/currencies?ccy=USDC`: each chain's withdrawal fee and minimum;
//! - `POST /api/v5/asset/withdrawal` (`dest` "4", on-chain; the fee is not part of `amt`);
//! - `GET /api/v5/asset/withdrawal-history?ccy=USDC&clientId=…`: a withdrawal by client id.
//!
//! **Resends.** OKX's withdrawal documentation describes `clientId` only as the client-supplied
//! id of a withdrawal ("a combination of case-sensitive alphanumerics, all numbers, or all
//! letters of up to 32 characters"), by which the withdrawal history can be read
//! (<https://www.okx.com/docs-v5/en/#funding-account-rest-api-withdrawal>); it does not say that
//! a second withdrawal under a `clientId` it holds is refused. So
//! [`ExchangeProvider::refuses_repeated_client_id`] keeps its default (false): an unknown
//! outcome is resent only by the slower rule of CONTRACT §7.
//!
//! OKX cannot pull money from the treasury wallet, so treasury transfers answer
//! [`ExchangeError::TransferUnsupported`] with the deposit address.
//!
//! The HTTP client (`awc`) lives on the actix arbiter that calls the provider (the
//! `ExchangeActor`'s), which is why the provider interface's futures are not `Send`.

mod history;
pub mod protocol;

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use awc::http::Method;
use chrono::{DateTime, Utc};
use payroll_entities::{Cents, Network};
use serde::de::DeserializeOwned;
use serde_json::json;

use self::protocol::{
    CCY, CodeClass, CurrencyChain, DepositAddress, Envelope, FundingBalance, Rounding,
    WithdrawalAck,
};
use super::{
    Balances, ExchangeError, ExchangeProvider, FEE_CHANGED, Quote, RemoteStatus, WithdrawalOutcome,
    WithdrawalRequest, cut_exchange_text,
    http::{Answer, EndpointLimiter, Wire, lock},
};
use crate::settings::OkxSettings;

/// OKX's documented limit of every endpoint used here: 6 requests per second per user ID.
pub const REQUESTS_PER_SECOND: u32 = 6;

/// How long to wait after OKX's rate-limit answer when it does not say (`Retry-After`).
const RATE_LIMIT_BACKOFF_MS: u64 = 1000;

/// Fee quotes are read again after this long.
const QUOTE_TTL: Duration = Duration::from_secs(60);

struct Limiters {
    balances: EndpointLimiter,
    deposit_address: EndpointLimiter,
    currencies: EndpointLimiter,
    withdrawal: EndpointLimiter,
    withdrawal_history: EndpointLimiter,
}

/// A fee quote of one chain.
#[derive(Debug, Clone, Copy)]
struct ChainQuote {
    fee: Cents,
    min_withdrawal: Cents,
}

pub struct OkxProvider {
    settings: OkxSettings,
    wire: Wire,
    chains: HashMap<Network, String>,
    deposit_network: Network,
    limiters: Limiters,
    quotes: Mutex<Option<(Instant, HashMap<String, ChainQuote>)>>,
    /// The deposit address, once read: it does not change.
    deposit_address: Mutex<Option<String>>,
}

impl OkxProvider {
    /// The provider for validated settings (`src/config.rs` checks every key first).
    pub fn new(settings: OkxSettings) -> Result<OkxProvider, String> {
        let chains = settings.chain_map()?;
        let deposit_network =
            crate::settings::deposit_in(&chains, &settings.deposit_network, "exchange.okx.chains")?;
        Ok(OkxProvider {
            wire: Wire::new(&settings.base_url, settings.timeout_ms),
            chains,
            deposit_network,
            limiters: Limiters {
                balances: EndpointLimiter::new(REQUESTS_PER_SECOND),
                deposit_address: EndpointLimiter::new(REQUESTS_PER_SECOND),
                currencies: EndpointLimiter::new(REQUESTS_PER_SECOND),
                withdrawal: EndpointLimiter::new(REQUESTS_PER_SECOND),
                withdrawal_history: EndpointLimiter::new(REQUESTS_PER_SECOND),
            },
            quotes: Mutex::new(None),
            deposit_address: Mutex::new(None),
            settings,
        })
    }

    /// Sends one signed request; `Err` when no whole answer came within `timeout_ms` (one
    /// deadline for connect, head and body alike, CONTRACT §7).
    async fn call(
        &self,
        method: Method,
        request_path: &str,
        body: Option<String>,
    ) -> Result<Answer, String> {
        let timestamp = protocol::timestamp(chrono::Utc::now());
        let signature = protocol::sign(
            &self.settings.secret_key,
            &timestamp,
            method.as_str(),
            request_path,
            body.as_deref().unwrap_or(""),
        );
        let request = self
            .wire
            .request(method, request_path)
            .insert_header(("OK-ACCESS-KEY", self.settings.api_key.as_str()))
            .insert_header(("OK-ACCESS-SIGN", signature))
            .insert_header(("OK-ACCESS-TIMESTAMP", timestamp))
            .insert_header(("OK-ACCESS-PASSPHRASE", self.settings.passphrase.as_str()));
        self.wire
            .send(request, body.map(|b| ("application/json", b)))
            .await
    }

    /// A read: the envelope's data, or why there is none.
    async fn read<T: DeserializeOwned>(
        &self,
        limiter: &EndpointLimiter,
        request_path: &str,
    ) -> Result<Vec<T>, ExchangeError> {
        limiter.acquire().await;
        let answer = self
            .call(Method::GET, request_path, None)
            .await
            .map_err(|e| unavailable(request_path, &e))?;
        let envelope: Envelope<T> = serde_json::from_slice(&answer.body).map_err(|e| {
            unavailable(
                request_path,
                &format!("HTTP {}, unreadable answer: {e}", answer.status),
            )
        })?;
        if envelope.code != "0" || !(200..300).contains(&answer.status) {
            return Err(unavailable(
                request_path,
                &format!(
                    "HTTP {}, code {}: {}",
                    answer.status, envelope.code, envelope.msg
                ),
            ));
        }
        Ok(envelope.data)
    }

    async fn quotes(&self) -> Result<HashMap<String, ChainQuote>, ExchangeError> {
        if let Some((at, quotes)) = lock(&self.quotes).as_ref()
            && at.elapsed() < QUOTE_TTL
        {
            return Ok(quotes.clone());
        }
        let chains: Vec<CurrencyChain> = self
            .read(
                &self.limiters.currencies,
                &format!("/api/v5/asset/currencies?ccy={CCY}"),
            )
            .await?;
        let mut quotes = HashMap::new();
        for c in chains.into_iter().filter(|c| c.ccy == CCY && c.can_wd) {
            let fee_text = if c.fee.is_empty() { &c.min_fee } else { &c.fee };
            let fee = protocol::amount_to_cents(fee_text, Rounding::Up);
            let min = protocol::amount_to_cents(&c.min_wd, Rounding::Up);
            match (fee, min) {
                (Some(fee), Some(min_withdrawal)) => {
                    quotes.insert(
                        c.chain,
                        ChainQuote {
                            fee,
                            min_withdrawal,
                        },
                    );
                }
                _ => {
                    tracing::warn!(chain = %c.chain, fee = %fee_text, min = %c.min_wd, "OKX quoted an unreadable fee or minimum; the chain is left out")
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
        let chain = self
            .chains
            .get(&self.deposit_network)
            .cloned()
            .unwrap_or_default();
        let addresses: Vec<DepositAddress> = self
            .read(
                &self.limiters.deposit_address,
                &format!("/api/v5/asset/deposit-address?ccy={CCY}"),
            )
            .await?;
        // The funding account's address on the deposit chain, the one the website shows first.
        let mut candidates: Vec<&DepositAddress> = addresses
            .iter()
            .filter(|a| a.chain == chain && !a.addr.is_empty())
            .collect();
        candidates.sort_by_key(|a| (a.to != "6", !a.selected));
        let address = candidates.first().map(|a| a.addr.clone()).ok_or_else(|| {
            ExchangeError::Unavailable(format!(
                "OKX has no {CCY} deposit address on {chain}; create one on the OKX website"
            ))
        })?;
        *lock(&self.deposit_address) = Some(address.clone());
        Ok(address)
    }

    /// Sends one withdrawal and reads OKX's answer.
    async fn withdraw_one(
        &self,
        request: &WithdrawalRequest,
        deadline: std::time::Instant,
    ) -> WithdrawalOutcome {
        let (client_id, chain) =
            match super::compact_request("OKX", request, &self.chains, "exchange.okx.chains") {
                Ok(compact) => compact,
                Err(refused) => return refused,
            };
        let body = json!({
            "ccy": CCY,
            "amt": protocol::cents_to_amount(request.amount),
            "dest": "4",
            "toAddr": request.address,
            "chain": chain,
            "fee": protocol::cents_to_amount(request.fee),
            "clientId": client_id,
        })
        .to_string();
        self.limiters.withdrawal.acquire().await;
        // Sent only while its stamp is fresh: OKX's own limiter, or a paused process, may have
        // held it past the deadline, after which another instance may have resent it.
        if std::time::Instant::now() > deadline {
            return super::not_sent_past_deadline();
        }
        let answer = match self
            .call(Method::POST, "/api/v5/asset/withdrawal", Some(body))
            .await
        {
            Ok(answer) => answer,
            Err(e) => {
                return WithdrawalOutcome::Ambiguous {
                    reason: format!("no answer from OKX: {e}"),
                };
            }
        };
        let outcome = withdrawal_outcome(&answer, &client_id);
        if let WithdrawalOutcome::Rejected { reason } = &outcome
            && reason.starts_with(FEE_CHANGED)
        {
            // The next quote (a retry's) reads OKX's current fee.
            *lock(&self.quotes) = None;
        }
        outcome
    }
}

/// What OKX's answer to a withdrawal means.
fn withdrawal_outcome(answer: &Answer, client_id: &str) -> WithdrawalOutcome {
    let envelope = serde_json::from_slice::<Envelope<WithdrawalAck>>(&answer.body);
    if let Ok(envelope) = &envelope
        && envelope.code == "0"
        && (200..300).contains(&answer.status)
    {
        return match envelope.data.iter().find(|ack| {
            !ack.wd_id.is_empty() && (ack.client_id.is_empty() || ack.client_id == client_id)
        }) {
            Some(ack) => WithdrawalOutcome::Accepted {
                cex_id: cut_exchange_text(&ack.wd_id),
            },
            None => WithdrawalOutcome::Ambiguous {
                reason: "OKX answered success without a withdrawal id".into(),
            },
        };
    }
    let code = envelope.as_ref().ok().map(|e| e.code.as_str());
    // Text OKX sent is cut to 500 characters wherever it is logged or stored.
    let message = cut_exchange_text(&match &envelope {
        Ok(e) => format!("HTTP {}, OKX code {}: {}", answer.status, e.code, e.msg),
        Err(e) => format!("HTTP {}, unreadable answer: {e}", answer.status),
    });
    match protocol::classify_answer(answer.status, code) {
        CodeClass::RateLimited => WithdrawalOutcome::RateLimited {
            retry_after_ms: answer.retry_after_ms.unwrap_or(RATE_LIMIT_BACKOFF_MS),
        },
        CodeClass::Ambiguous => WithdrawalOutcome::Ambiguous { reason: message },
        CodeClass::Rejected if envelope.as_ref().is_ok_and(|e| mentions_fee(&e.msg)) => {
            WithdrawalOutcome::Rejected {
                reason: format!("{FEE_CHANGED}{message}"),
            }
        }
        CodeClass::Rejected => WithdrawalOutcome::Rejected { reason: message },
        CodeClass::Credentials => WithdrawalOutcome::CredentialsRefused { reason: message },
    }
}

/// Whether OKX's refusal is about the fee sent.
fn mentions_fee(message: &str) -> bool {
    message.to_ascii_lowercase().contains("fee")
}

fn unavailable(request_path: &str, why: &str) -> ExchangeError {
    let path = request_path.split('?').next().unwrap_or(request_path);
    ExchangeError::Unavailable(format!("OKX {path}: {}", cut_exchange_text(why)))
}

#[async_trait(?Send)]
impl ExchangeProvider for OkxProvider {
    fn name(&self) -> &'static str {
        "okx"
    }

    fn withdrawal_limit(&self) -> Option<(u32, u32)> {
        Some((REQUESTS_PER_SECOND, 1))
    }

    async fn balances(&self) -> Result<Balances, ExchangeError> {
        let balances: Vec<FundingBalance> = self
            .read(
                &self.limiters.balances,
                &format!("/api/v5/asset/balances?ccy={CCY}"),
            )
            .await?;
        // OKX lists only currencies with a balance above 0.
        let available = match balances.iter().find(|b| b.ccy == CCY) {
            None => Cents::ZERO,
            Some(b) => {
                protocol::amount_to_cents(&b.avail_bal, Rounding::Down).ok_or_else(|| {
                    ExchangeError::Unavailable(format!(
                        "OKX reported an unreadable {CCY} balance: {:?}",
                        b.avail_bal
                    ))
                })?
            }
        };
        Ok(Balances {
            available,
            deposit_address: self.deposit_address().await?,
            network: self.deposit_network,
            treasury: None,
        })
    }

    async fn deposit(&self) -> Result<(String, Network), ExchangeError> {
        Ok((self.deposit_address().await?, self.deposit_network))
    }

    async fn quote(&self, network: Network) -> Result<Option<Quote>, ExchangeError> {
        // A network with no configured chain, or a chain OKX does not withdraw on now, cannot
        // be paid.
        let Some(chain) = self.chains.get(&network) else {
            return Ok(None);
        };
        // OKX charges its fee on top of `amt` (the `fee` field of the request).
        Ok(self
            .quotes()
            .await?
            .get(chain)
            .map(|q| Quote::on_top(q.fee, q.min_withdrawal)))
    }

    async fn withdraw(
        &self,
        batch: &[WithdrawalRequest],
        deadline: std::time::Instant,
    ) -> Vec<WithdrawalOutcome> {
        super::one_by_one("okx", batch, |request| self.withdraw_one(request, deadline)).await
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

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            retry_after_ms: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn withdrawal_answers_map_to_outcomes() {
        let ok = r#"{"code":"0","msg":"","data":[{"amt":"1.00","wdId":"67485","ccy":"USDC","clientId":"X1","chain":"USDC-ERC20"}]}"#;
        assert_eq!(
            withdrawal_outcome(&answer(200, ok), "X1"),
            WithdrawalOutcome::Accepted {
                cex_id: "67485".into()
            }
        );
        assert!(matches!(
            withdrawal_outcome(&answer(200, r#"{"code":"0","msg":"","data":[]}"#), "X1"),
            WithdrawalOutcome::Ambiguous { .. }
        ));
        assert_eq!(
            withdrawal_outcome(
                &answer(
                    429,
                    r#"{"code":"50011","msg":"Too Many Requests","data":[]}"#
                ),
                "X1"
            ),
            WithdrawalOutcome::RateLimited {
                retry_after_ms: RATE_LIMIT_BACKOFF_MS
            }
        );
        assert_eq!(
            withdrawal_outcome(
                &Answer {
                    status: 429,
                    retry_after_ms: Some(2000),
                    body: b"Too Many Requests".to_vec()
                },
                "X1"
            ),
            WithdrawalOutcome::RateLimited {
                retry_after_ms: 2000
            }
        );
        assert!(matches!(
            withdrawal_outcome(&answer(200, r#"{"code":"58207","msg":"Withdrawal address isn't on the verified address list.","data":[]}"#), "X1"),
            WithdrawalOutcome::Rejected { reason } if reason.contains("58207")
        ));
        for (status, body) in [
            (500, "Internal Server Error"),
            (502, "<html>bad gateway</html>"),
            (
                503,
                r#"{"code":"50001","msg":"Service temporarily unavailable","data":[]}"#,
            ),
            (200, r#"{"code":"0","msg":"","data":[{"wdId":"#),
            (200, "not json"),
            (
                400,
                r#"{"code":"50004","msg":"API endpoint request timeout","data":[]}"#,
            ),
        ] {
            assert!(
                matches!(
                    withdrawal_outcome(&answer(status, body), "X1"),
                    WithdrawalOutcome::Ambiguous { .. }
                ),
                "{status} {body}"
            );
        }
    }

    #[test]
    fn settings_debug_never_shows_the_credentials() {
        let settings = OkxSettings {
            base_url: "https://www.okx.com".into(),
            api_key: "key-123".into(),
            secret_key: "secret-456".into(),
            passphrase: "phrase-789".into(),
            chains: [("ETHEREUM".to_owned(), "USDC-ERC20".to_owned())].into(),
            deposit_network: "ETHEREUM".into(),
            timeout_ms: 1000,
        };
        let shown = format!("{settings:?}");
        for secret in ["key-123", "secret-456", "phrase-789"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("[redacted]"));
    }
}
