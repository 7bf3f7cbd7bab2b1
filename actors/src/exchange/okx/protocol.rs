//! The rules of OKX's v5 REST API that need no IO: request signing, our client withdrawal id in
//! the form OKX accepts, USDC amounts as decimal strings, withdrawal states and error codes.
//!
//! Facts from OKX's v5 documentation (<https://www.okx.com/docs-v5/en/>):
//! - Private requests carry `OK-ACCESS-KEY`, `OK-ACCESS-SIGN`, `OK-ACCESS-TIMESTAMP` and
//!   `OK-ACCESS-PASSPHRASE`. The signature is base64(HMAC-SHA256(secret, timestamp + METHOD +
//!   requestPath + body)); the query string of a GET belongs to requestPath, a GET has no body;
//!   the timestamp is UTC ISO 8601 with milliseconds, e.g. `2020-12-08T09:08:57.715Z`.
//! - Answers are `{"code": "0", "msg": "", "data": [...]}`; any other code is an error.
//! - `clientId` is "a combination of case-sensitive alphanumerics, all numbers, or all letters of
//!   up to 32 characters".
//! - Withdrawal states: pending `19`, `17`, `10`, `0`, `4`/`5`/`6`/`8`/`9`/`12` (manual review),
//!   `7` (approved); in progress `1` (broadcasting), `15`, `16`, `-3` (canceling); final `-2`
//!   (canceled), `-1` (failed), `2` (success).
//! - Error codes: `50011` rate limit (HTTP 200 or 429), `50061` account rate limit, `58102`
//!   funding rate limit (429); `50001` service unavailable (503), `50004` "endpoint request
//!   timeout (does not mean that the request was successful or failed)", `50013` systems busy,
//!   `50026` system error, `58007` funding service error; `582xx` are withdrawal refusals
//!   (`58207` address not on the verified list, `58350` insufficient balance, …).

use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

pub use crate::exchange::history::StateClass;
pub use crate::exchange::wire::{
    Rounding, amount_to_cents, cents_to_amount, from_compact_client_id as from_okx_client_id,
    to_compact_client_id as to_okx_client_id,
};

/// The currency of every payout.
pub const CCY: &str = "USDC";

/// `OK-ACCESS-TIMESTAMP`: UTC, ISO 8601, milliseconds.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `OK-ACCESS-SIGN` for one request. `request_path` includes the query string of a GET; `body`
/// is the exact JSON text sent ("" for a GET).
pub fn sign(secret: &str, timestamp: &str, method: &str, request_path: &str, body: &str) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(timestamp.as_bytes());
    mac.update(method.as_bytes());
    mac.update(request_path.as_bytes());
    mac.update(body.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

// ---------------------------------------------------------------------------------------------
// Answers

/// Every answer: `code` "0" with `data`, or an error code with `msg`.
#[derive(Debug, Deserialize)]
pub struct Envelope<T> {
    pub code: String,
    #[serde(default)]
    pub msg: String,
    #[serde(default = "Vec::new")]
    pub data: Vec<T>,
}

/// `POST /api/v5/asset/withdrawal` → `data[0]`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawalAck {
    #[serde(default)]
    pub wd_id: String,
    #[serde(default)]
    pub client_id: String,
}

/// `GET /api/v5/asset/withdrawal-history` → one record.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawalRecord {
    #[serde(default)]
    pub wd_id: String,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub tx_id: String,
    #[serde(default)]
    pub chain: String,
    /// When OKX made it, in Unix milliseconds.
    #[serde(default)]
    pub ts: String,
    /// The currency, the amount withdrawn (what the payee receives; OKX's fee is apart) and
    /// the address: checked against what was sent.
    #[serde(default)]
    pub ccy: String,
    #[serde(default)]
    pub amt: String,
    /// The receiving address (`to` in the history; `toAddr` is the request's name for it).
    #[serde(default, alias = "toAddr")]
    pub to: String,
}

/// `GET /api/v5/asset/balances` → one currency.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FundingBalance {
    #[serde(default)]
    pub ccy: String,
    #[serde(default)]
    pub avail_bal: String,
}

/// `GET /api/v5/asset/currencies` → one currency on one chain.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrencyChain {
    #[serde(default)]
    pub ccy: String,
    #[serde(default)]
    pub chain: String,
    #[serde(default)]
    pub can_wd: bool,
    /// The fixed withdrawal fee (current documentation).
    #[serde(default)]
    pub fee: String,
    /// The fee field of older versions of the API, used when `fee` is absent.
    #[serde(default)]
    pub min_fee: String,
    #[serde(default)]
    pub min_wd: String,
}

/// `GET /api/v5/asset/deposit-address` → one address.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DepositAddress {
    #[serde(default)]
    pub addr: String,
    #[serde(default)]
    pub chain: String,
    /// "6": the funding account, "18": the trading account.
    #[serde(default)]
    pub to: String,
    #[serde(default)]
    pub selected: bool,
}

/// The withdrawal-history `state`. A state this code does not know counts as pending: only a
/// state documented as final ends a payout.
pub fn classify_state(state: &str) -> StateClass {
    match state {
        "2" => StateClass::Success,
        "-1" | "-2" => StateClass::Failed,
        _ => StateClass::Pending,
    }
}

/// A short description of a withdrawal state, for failure reasons and logs.
pub fn describe_state(state: &str) -> &'static str {
    match state {
        "-3" => "canceling",
        "-2" => "canceled",
        "-1" => "failed",
        "0" => "waiting withdrawal",
        "1" => "broadcasting",
        "2" => "success",
        "4" | "5" | "6" | "8" | "9" | "12" => "waiting manual review",
        "7" => "approved",
        "10" => "waiting transfer",
        "15" => "pending transaction validation",
        "16" => "delayed by local regulation",
        "17" => "pending travel rule response",
        "19" => "insufficient balance in the hot wallet",
        _ => "unknown state",
    }
}

/// What an error answer to a withdrawal means for the money.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeClass {
    /// OKX's rate limit: the request was refused before anything was done.
    RateLimited,
    /// OKX may or may not have made the withdrawal: look the client id up.
    Ambiguous,
    /// A definite refusal: no withdrawal was made.
    Rejected,
    /// Our credentials were refused (key, passphrase, signature, timestamp, IP allow-list):
    /// nothing was done, and nothing will be until an operator fixes them.
    Credentials,
}

/// Classifies an OKX error code (never "0"). Codes not listed are ambiguous unless they are in
/// the funding class (58000–58999), whose codes are refusals of the request; an unknown answer
/// is only ever reconciled, never taken as a refusal.
pub fn classify_code(code: &str) -> CodeClass {
    match code {
        // Rate limits: general, account, funding; "too frequent operations".
        "50011" | "50040" | "50061" | "58102" => CodeClass::RateLimited,
        // Service unavailable, endpoint timeout, systems busy, system error, funding service
        // error, client id already exists.
        "50001" | "50004" | "50013" | "50026" | "58007" | "58404" => CodeClass::Ambiguous,
        // Authentication: API key frozen or for another environment, headers missing, a stale
        // or invalid timestamp, IP not allowed, invalid key, signature or authorization.
        "50100" | "50101" | "50102" | "50103" | "50104" | "50105" | "50106" | "50107" | "50110"
        | "50111" | "50112" | "50113" | "50114" => CodeClass::Credentials,
        // Bad request, permissions: refused before anything was done.
        "50000" | "50002" | "50006" | "50014" | "50015" | "50016" | "50024" | "50025" | "50030"
        | "50035" | "51000" => CodeClass::Rejected,
        c if c.len() == 5 && (c.starts_with("501") || c.starts_with("58")) => CodeClass::Rejected,
        _ => CodeClass::Ambiguous,
    }
}

/// What an HTTP answer with this status and (maybe) an envelope code means.
pub fn classify_answer(status: u16, code: Option<&str>) -> CodeClass {
    match code {
        // A documented code decides; its HTTP status only restates it.
        Some(code) if code != "0" => {
            let class = classify_code(code);
            if status >= 500 && matches!(class, CodeClass::Rejected | CodeClass::Credentials) {
                CodeClass::Ambiguous
            } else {
                class
            }
        }
        _ if status == 429 => CodeClass::RateLimited,
        _ if status == 401 => CodeClass::Credentials,
        _ => CodeClass::Ambiguous,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_base64_hmac_sha256_of_timestamp_method_path_body() {
        // Computed independently: printf '%s' '<prehash>' | openssl dgst -sha256 -hmac
        // 'SECRETKEY-EXAMPLE' -binary | base64
        assert_eq!(
            sign(
                "SECRETKEY-EXAMPLE",
                "2020-12-08T09:08:57.715Z",
                "GET",
                "/api/v5/account/balance?ccy=BTC",
                ""
            ),
            "icsZp1P4ibN6hqxP/3IAyumqV1oYbwChYak1o2Rc7SA="
        );
        assert_eq!(
            sign(
                "SECRETKEY-EXAMPLE",
                "2020-12-08T09:08:57.715Z",
                "POST",
                "/api/v5/asset/withdrawal",
                r#"{"amt":"12.34","ccy":"USDC"}"#
            ),
            "Ew9rSQW0vI/aq0AnULtikHh0+BiqUt87WN70eWMsjEQ="
        );
    }

    #[test]
    fn timestamps_are_iso_8601_with_milliseconds() {
        let at = DateTime::parse_from_rfc3339("2020-12-08T09:08:57.715123Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(timestamp(at), "2020-12-08T09:08:57.715Z");
        let whole = DateTime::parse_from_rfc3339("2020-12-08T09:08:57Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(timestamp(whole), "2020-12-08T09:08:57.000Z");
    }

    #[test]
    fn states_map_to_ours() {
        assert_eq!(classify_state("2"), StateClass::Success);
        assert_eq!(classify_state("-1"), StateClass::Failed);
        assert_eq!(classify_state("-2"), StateClass::Failed);
        for pending in [
            "-3", "0", "1", "4", "5", "6", "7", "8", "9", "10", "12", "15", "16", "17", "19", "99",
        ] {
            assert_eq!(classify_state(pending), StateClass::Pending, "{pending}");
        }
    }

    #[test]
    fn error_codes_map_to_rate_limit_ambiguity_or_refusal() {
        for code in ["50011", "50061", "58102", "50040"] {
            assert_eq!(classify_code(code), CodeClass::RateLimited, "{code}");
        }
        for code in [
            "50001", "50004", "50013", "50026", "58007", "58404", "12345",
        ] {
            assert_eq!(classify_code(code), CodeClass::Ambiguous, "{code}");
        }
        for code in ["58207", "58350", "58201", "58206", "50014", "51000"] {
            assert_eq!(classify_code(code), CodeClass::Rejected, "{code}");
        }
        for code in [
            "50100", "50102", "50105", "50110", "50111", "50113", "50114",
        ] {
            assert_eq!(classify_code(code), CodeClass::Credentials, "{code}");
        }
        assert_eq!(classify_answer(401, None), CodeClass::Credentials);
        assert_eq!(classify_answer(503, Some("50113")), CodeClass::Ambiguous);
        assert_eq!(classify_answer(429, None), CodeClass::RateLimited);
        assert_eq!(classify_answer(429, Some("50011")), CodeClass::RateLimited);
        assert_eq!(classify_answer(200, Some("50011")), CodeClass::RateLimited);
        assert_eq!(classify_answer(503, Some("50001")), CodeClass::Ambiguous);
        assert_eq!(classify_answer(500, None), CodeClass::Ambiguous);
        assert_eq!(classify_answer(502, Some("58207")), CodeClass::Ambiguous);
        assert_eq!(classify_answer(200, Some("58350")), CodeClass::Rejected);
        assert_eq!(classify_answer(401, Some("50113")), CodeClass::Credentials);
    }
}
