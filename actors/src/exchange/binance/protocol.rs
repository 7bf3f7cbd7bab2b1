//! The rules of Binance's REST API that need no IO: request signing, the query form signed
//! and sent, withdrawal statuses and error codes.
//!
//! Facts from Binance's documentation:
//! - Signed (`USER_DATA`) requests carry the API key in `X-MBX-APIKEY`, and `timestamp`,
//!   optionally `recvWindow` (default 5000, at most 60000), and `signature` = hex
//!   HMAC-SHA256 (secret key) of the query string concatenated with the body; non-ASCII
//!   characters are percent-encoded before signing
//!   (<https://developers.binance.com/docs/binance-spot-api-docs/rest-api/request-security>).
//!   The server takes a request when `timestamp < serverTime + 1000` and
//!   `serverTime - timestamp <= recvWindow`; otherwise code -1021. `GET /api/v3/time` answers
//!   `{"serverTime": …}`.
//! - HTTP 429 answers a broken rate limit and 418 an IP ban for going on after 429s ("from 2
//!   minutes to 3 days"); both carry `Retry-After` in seconds. A 5xx means "the execution
//!   status is UNKNOWN and could have been a success"
//!   (<https://github.com/binance/binance-spot-api-docs/blob/master/rest-api.md>, "HTTP Return
//!   Codes"). Errors are `{"code": -1121, "msg": "…"}`.
//! - Withdrawal statuses (`GET /sapi/v1/capital/withdraw/history`): 0 Email Sent, 1 Cancelled,
//!   2 Awaiting Approval, 3 Rejected, 4 Processing, 5 Failure, 6 Completed
//!   (<https://developers.binance.com/docs/wallet/capital/withdraw-history>).
//! - Wallet error codes (<https://developers.binance.com/docs/wallet/error-code>): -4026
//!   insufficient balance, -4035 address not on the whitelist, -4033 illegal address, -4007
//!   address validation not passed, -4022 under the minimum, -4021 not the required multiple,
//!   -4019 asset not open for withdrawal, -4005 too many new requests; general codes -1021
//!   (timestamp outside recvWindow), -1022 (invalid signature), -2014 / -2015 (API key format,
//!   or "Invalid API-key, IP, or permissions for action"), -1003 (too many requests), -1000 /
//!   -1001 / -1006 / -1007 (unknown, disconnected, unexpected answer, timeout: "execution
//!   status unknown").

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

pub use crate::exchange::history::StateClass;
pub use crate::exchange::wire::{
    Rounding, amount_to_cents, cents_to_amount, from_compact_client_id as from_binance_id,
    to_compact_client_id as to_binance_id,
};

/// The coin of every payout.
pub const COIN: &str = "USDC";

/// The hex HMAC-SHA256 of a signed request's payload (its query string, then its body).
pub fn sign(secret: &str, payload: &str) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(payload.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Parameters as the query string that is signed and sent, each value percent-encoded
/// (everything but `A-Z a-z 0-9 - _ . ~`), in the order given.
pub fn query(params: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in params.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        for byte in value.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
                out.push(byte as char);
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

/// An error answer: `{"code": -1121, "msg": "…"}`.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    pub code: i64,
    #[serde(default)]
    pub msg: String,
}

/// `GET /api/v3/time`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerTime {
    pub server_time: i64,
}

/// `POST /sapi/v1/capital/withdraw/apply` → `{"id": "…"}`.
#[derive(Debug, Deserialize)]
pub struct WithdrawAck {
    #[serde(default)]
    pub id: String,
}

/// `GET /sapi/v1/capital/withdraw/history` → one record.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    #[serde(default)]
    pub id: String,
    /// What was asked to be withdrawn; Binance's fee (`transactionFee`) comes out of it.
    #[serde(default)]
    pub amount: String,
    #[serde(default)]
    pub transaction_fee: String,
    #[serde(default)]
    pub coin: String,
    #[serde(default = "unknown_status")]
    pub status: i64,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub tx_id: String,
    /// `YYYY-MM-DD HH:MM:SS`, UTC.
    #[serde(default)]
    pub apply_time: String,
    #[serde(default)]
    pub network: String,
    #[serde(default)]
    pub withdraw_order_id: String,
    /// Why a withdrawal failed.
    #[serde(default)]
    pub info: String,
}

fn unknown_status() -> i64 {
    -1
}

/// `GET /sapi/v1/capital/config/getall` → one coin.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoinInfo {
    #[serde(default)]
    pub coin: String,
    #[serde(default)]
    pub withdraw_all_enable: bool,
    #[serde(default)]
    pub network_list: Vec<NetworkInfo>,
}

/// One network of a coin.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInfo {
    #[serde(default)]
    pub network: String,
    #[serde(default)]
    pub withdraw_enable: bool,
    #[serde(default)]
    pub withdraw_fee: String,
    #[serde(default)]
    pub withdraw_min: String,
    #[serde(default)]
    pub withdraw_integer_multiple: String,
    /// Shown when withdrawals are disabled: why.
    #[serde(default)]
    pub withdraw_desc: String,
}

/// `GET /sapi/v1/capital/deposit/address`.
#[derive(Debug, Deserialize)]
pub struct DepositAddress {
    #[serde(default)]
    pub address: String,
}

/// One asset's balance: `GET /api/v3/account` → `balances[]`, or
/// `POST /sapi/v1/asset/get-funding-asset` → `[]`.
#[derive(Debug, Deserialize)]
pub struct AssetBalance {
    #[serde(default)]
    pub asset: String,
    #[serde(default)]
    pub free: String,
}

/// `GET /sapi/v1/account/apiRestrictions`: what the key may do. "You must apply the IP Access
/// Restriction filter in order to enable withdrawals."
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiRestrictions {
    #[serde(default)]
    pub enable_withdrawals: bool,
    #[serde(default)]
    pub ip_restrict: bool,
}

/// `GET /api/v3/account`.
#[derive(Debug, Deserialize)]
pub struct SpotAccount {
    #[serde(default)]
    pub balances: Vec<AssetBalance>,
}

/// A history status. One this code does not know counts as pending: only a status documented
/// as final ends a payout.
pub fn classify_status(status: i64) -> StateClass {
    match status {
        6 => StateClass::Success,
        1 | 3 | 5 => StateClass::Failed,
        _ => StateClass::Pending,
    }
}

pub fn describe_status(status: i64) -> &'static str {
    match status {
        0 => "email sent",
        1 => "cancelled",
        2 => "awaiting approval",
        3 => "rejected",
        4 => "processing",
        5 => "failure",
        6 => "completed",
        _ => "unknown status",
    }
}

/// What an answer to a signed request means for the money.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeClass {
    /// Binance's rate limit or ban: the request was refused before anything was done.
    RateLimited,
    /// The timestamp fell outside `recvWindow`: refused before anything was done; read
    /// Binance's clock and sign again.
    Timestamp,
    /// Binance may or may not have acted: look the client id up.
    Ambiguous,
    /// A definite refusal: no withdrawal was made.
    Rejected,
    /// Our credentials or their permissions were refused: nothing was done, and nothing will
    /// be until an operator fixes them.
    Credentials,
}

/// Classifies an error code (negative). Only the codes documented as refusing the request
/// before anything is done count as refusals: the request's form (-1100 to -1199) and the
/// wallet refusals listed here. Any other code is ambiguous: an unknown answer is only ever
/// reconciled, never taken as a refusal.
pub fn classify_code(code: i64) -> CodeClass {
    match code {
        -1003 | -1015 | -4005 => CodeClass::RateLimited,
        -1021 => CodeClass::Timestamp,
        -1002 | -1022 | -2014 | -2015 | -4004 => CodeClass::Credentials,
        c if (-1199..=-1100).contains(&c) => CodeClass::Rejected,
        // Address or tag invalid, whitelist off or missing, 2FA, login or password delays,
        // withdrawals limited, no such asset or not open, multiple, minimum, daily maximum, no
        // balance, not more than the fee, illegal or suspect address, new address delay,
        // deposit not confirmed, tag not supported, 2FA needed, no asset.
        -4007 | -4008 | -4012 | -4013 | -4014 | -4015 | -4016 | -4017 | -4018 | -4019 | -4021
        | -4022 | -4023 | -4024 | -4025 | -4026 | -4028 | -4033 | -4034 | -4035 | -4036 | -4060
        | -4106 | -3001 | -3002 => CodeClass::Rejected,
        _ => CodeClass::Ambiguous,
    }
}

/// What an HTTP answer with this status and (maybe) an error code means.
pub fn classify_answer(status: u16, code: Option<i64>) -> CodeClass {
    match (status, code) {
        (418 | 429, _) => CodeClass::RateLimited,
        // "The execution status is UNKNOWN and could have been a success."
        (500.., _) => CodeClass::Ambiguous,
        (_, Some(code)) => classify_code(code),
        (401, None) => CodeClass::Credentials,
        _ => CodeClass::Ambiguous,
    }
}

/// An `applyTime` (`YYYY-MM-DD HH:MM:SS`, UTC) in Unix milliseconds.
pub fn apply_time_ms(text: &str) -> Option<i64> {
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .ok()
        .map(|t| t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Binance's own example (request-security page, "SIGNED Endpoint Examples"): key
    /// `NhqPtmdSJYdKjVHjA7PZj4Mge3R5YNiP1e3UZjInClVN65XAbvqqM6A7H5fATj0j`.
    #[test]
    fn the_signature_is_hex_hmac_sha256_of_the_query_then_the_body() {
        let secret = "NhqPtmdSJYdKjVHjA7PZj4Mge3R5YNiP1e3UZjInClVN65XAbvqqM6A7H5fATj0j";
        assert_eq!(
            sign(
                secret,
                "symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTC&quantity=1&price=0.1&recvWindow=5000&timestamp=1499827319559"
            ),
            "c8db56825ae71d6d79447849e617115f4a920fa2acdcab2b053c4b2838bd6b71"
        );
        // Example 3: part in the query string, part in the body, joined with no `&`.
        assert_eq!(
            sign(
                secret,
                "symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTCquantity=1&price=0.1&recvWindow=5000&timestamp=1499827319559"
            ),
            "0fd168b8ddb4876a0358a8d14d0c9f3da0e9b20c5d52b2a00fcf7d1c602f9a77"
        );
        // Non-ASCII values are percent-encoded before signing.
        let encoded = query(&[
            ("symbol", "１２３４５６".to_owned()),
            ("side", "BUY".into()),
            ("type", "LIMIT".into()),
            ("timeInForce", "GTC".into()),
            ("quantity", "1".into()),
            ("price", "0.1".into()),
            ("recvWindow", "5000".into()),
            ("timestamp", "1499827319559".into()),
        ]);
        assert_eq!(
            sign(secret, &encoded),
            "e1353ec6b14d888f1164ae9af8228a3dbd508bc82eb867db8ab6046442f33ef3"
        );
    }

    #[test]
    fn queries_keep_their_order_and_encode_what_is_not_unreserved() {
        assert_eq!(
            query(&[("coin", "USDC".into()), ("name", "a b&c=d".into())]),
            "coin=USDC&name=a%20b%26c%3Dd"
        );
    }

    #[test]
    fn statuses_map_to_ours() {
        assert_eq!(classify_status(6), StateClass::Success);
        for failed in [1, 3, 5] {
            assert_eq!(classify_status(failed), StateClass::Failed, "{failed}");
        }
        for pending in [0, 2, 4, 7, -1] {
            assert_eq!(classify_status(pending), StateClass::Pending, "{pending}");
        }
    }

    #[test]
    fn error_codes_map_to_rate_limit_ambiguity_or_refusal() {
        for code in [-1003, -1015, -4005] {
            assert_eq!(classify_code(code), CodeClass::RateLimited, "{code}");
        }
        assert_eq!(classify_code(-1021), CodeClass::Timestamp);
        for code in [-1022, -2014, -2015] {
            assert_eq!(classify_code(code), CodeClass::Credentials, "{code}");
        }
        for code in [
            -4026, -4035, -4033, -4007, -4022, -4021, -4019, -1102, -1121,
        ] {
            assert_eq!(classify_code(code), CodeClass::Rejected, "{code}");
        }
        for code in [
            -1000, -1001, -1006, -1007, -4027, -4030, -4032, -4045, -4199, -9999, 0,
        ] {
            assert_eq!(classify_code(code), CodeClass::Ambiguous, "{code}");
        }
        assert_eq!(classify_answer(429, None), CodeClass::RateLimited);
        assert_eq!(classify_answer(418, Some(-1003)), CodeClass::RateLimited);
        assert_eq!(classify_answer(503, Some(-4026)), CodeClass::Ambiguous);
        assert_eq!(classify_answer(502, None), CodeClass::Ambiguous);
        assert_eq!(classify_answer(400, Some(-4035)), CodeClass::Rejected);
        assert_eq!(classify_answer(401, Some(-2015)), CodeClass::Credentials);
        assert_eq!(classify_answer(401, None), CodeClass::Credentials);
        assert_eq!(classify_answer(400, Some(-1021)), CodeClass::Timestamp);
        assert_eq!(classify_answer(200, None), CodeClass::Ambiguous);
    }

    #[test]
    fn apply_times_are_utc() {
        assert_eq!(
            apply_time_ms("2019-10-12 11:12:02"),
            Some(1_570_878_722_000)
        );
        assert_eq!(apply_time_ms("yesterday"), None);
    }
}
