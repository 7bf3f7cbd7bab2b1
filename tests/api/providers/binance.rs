//! A Binance stand-in: the REST endpoints the provider uses, over the shared account model.
//! Every signed request is checked as Binance documents it: `X-MBX-APIKEY`, the hex
//! HMAC-SHA256 of the query string then the body (without `signature`), and `timestamp`
//! within `recvWindow` of its own clock (`timestamp < serverTime + 1000` and
//! `serverTime − timestamp ≤ recvWindow`, else -1021). Like Binance as documented, it does not
//! refuse a second withdrawal under a `withdrawOrderId` it holds: it makes another, which the
//! tests would count.

use std::{collections::HashMap, time::Duration};

use hmac::{Hmac, Mac};
use payroll::config::Settings;
use serde_json::{Value, json};
use sha2::Sha256;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers};

use super::{
    StandIn,
    model::{Account, Decision, Fault, Made, Shared, amount_of, cents_of, now_ms},
    proxy::Proxy,
};

pub(crate) const API_KEY: &str = "binance-test-key";
const SECRET_KEY: &str = "binance-test-secret";
pub(crate) const DEPOSIT_ADDRESS: &str = "0xb1a0000000000000000000000000000000000001";
/// Binance's names of the networks the tests pay on.
const NETWORKS: &[(&str, &str)] = &[
    ("ETHEREUM", "ETH"),
    ("POLYGON", "MATIC"),
    ("BASE", "BASE"),
    ("ARBITRUM", "ARBITRUM"),
    ("OPTIMISM", "OPTIMISM"),
    ("SOLANA", "SOL"),
];
const DAY_MS: i64 = 24 * 3600 * 1000;

fn error(status: u16, code: i64, msg: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("content-type", "application/json")
        .set_body_string(json!({"code": code, "msg": msg}).to_string())
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "application/json")
        .set_body_string(body.to_string())
}

struct Responder {
    account: Shared,
}

/// The parameters of a request (query string and form body) without `signature`, the payload
/// that was signed, and the signature.
fn signed_parts(request: &Request) -> (HashMap<String, String>, String, String) {
    let query = request.url.query().unwrap_or("").to_owned();
    let body = String::from_utf8_lossy(&request.body).into_owned();
    let mut signature = String::new();
    let mut strip = |text: &str| -> String {
        text.split('&')
            .filter(|pair| match pair.strip_prefix("signature=") {
                Some(s) => {
                    signature = s.to_owned();
                    false
                }
                None => !pair.is_empty(),
            })
            .collect::<Vec<_>>()
            .join("&")
    };
    let (query, body) = (strip(&query), strip(&body));
    let payload = format!("{query}{body}");
    let pairs = |text: &str| -> Vec<(String, String)> {
        request
            .url
            .join(&format!("?{text}"))
            .map(|u| u.query_pairs().into_owned().collect())
            .unwrap_or_default()
    };
    let params = pairs(&query).into_iter().chain(pairs(&body)).collect();
    (params, payload, signature)
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut account = self.account.lock();
        let path = request.url.path().to_owned();
        if path == "/api/v3/time" {
            account.time_requests += 1;
            return ok(json!({"serverTime": account.clock_ms()}));
        }
        if account.banned_until_ms > now_ms() {
            let left = (account.banned_until_ms - now_ms()) / 1000 + 1;
            return error(418, -1003, "Way too much request weight used; IP banned")
                .insert_header("Retry-After", left.to_string().as_str());
        }
        let key = request
            .headers
            .get("X-MBX-APIKEY")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let withdrawing = path == "/sapi/v1/capital/withdraw/apply";
        if (account.credentials_refused && withdrawing) || key != API_KEY {
            return error(
                401,
                -2015,
                "Invalid API-key, IP, or permissions for action.",
            );
        }
        let (params, payload, signature) = signed_parts(request);
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET_KEY.as_bytes()).expect("hmac");
        mac.update(payload.as_bytes());
        if !hex::encode(mac.finalize().into_bytes()).eq_ignore_ascii_case(&signature) {
            account.bad_signatures.push(format!("{path}: {payload}"));
            return error(400, -1022, "Signature for this request is not valid.");
        }
        let timestamp: i64 = params
            .get("timestamp")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let window: i64 = params
            .get("recvWindow")
            .and_then(|t| t.parse().ok())
            .unwrap_or(5000);
        let server = account.clock_ms();
        if !(timestamp < server + 1000 && server - timestamp <= window) {
            return error(
                400,
                -1021,
                "Timestamp for this request is outside of the recvWindow.",
            );
        }
        let get = |name: &str| params.get(name).cloned().unwrap_or_default();
        match (request.method.as_str(), path.as_str()) {
            ("GET", "/api/v3/account") => ok(json!({
                "canWithdraw": true,
                "balances": [
                    {"asset": "BTC", "free": "1.00000000", "locked": "0.00000000"},
                    // More decimals than cents: the provider rounds down.
                    {"asset": "USDC", "free": format!("{}9999", amount_of(account.balance)), "locked": "0.00000000"},
                ],
            })),
            ("GET", "/sapi/v1/account/apiRestrictions") => ok(json!({
                "ipRestrict": true, "createTime": 1_698_645_219_000_i64, "enableReading": true,
                "enableWithdrawals": !account.credentials_refused, "enableSpotAndMarginTrading": false,
            })),
            ("POST", "/sapi/v1/asset/get-funding-asset") => ok(json!([
                {"asset": "USDC", "free": amount_of(account.balance), "locked": "0", "freeze": "0", "withdrawing": "0"}
            ])),
            ("GET", "/sapi/v1/capital/deposit/address") => {
                assert_eq!(get("coin"), "USDC");
                ok(json!({"address": DEPOSIT_ADDRESS, "coin": "USDC", "tag": "", "url": ""}))
            }
            ("GET", "/sapi/v1/capital/config/getall") => {
                let networks: Vec<Value> = NETWORKS
                    .iter()
                    .filter_map(|(_, name)| account.terms.get(*name).map(|t| (name, t)))
                    .map(|(name, t)| {
                        json!({
                            "network": name, "coin": "USDC", "withdrawEnable": t.enabled,
                            "withdrawFee": amount_of(t.fee), "withdrawMin": amount_of(t.minimum),
                            "withdrawMax": "9999999", "withdrawIntegerMultiple": amount_of(t.step),
                            "withdrawDesc": if t.enabled { "" } else { "Wallet maintenance, withdrawal suspended" },
                            "depositEnable": true, "isDefault": *name == "ETH",
                        })
                    })
                    .collect();
                ok(json!([
                    {"coin": "BTC", "withdrawAllEnable": true, "networkList": []},
                    {"coin": "USDC", "withdrawAllEnable": true, "networkList": networks},
                ]))
            }
            ("POST", "/sapi/v1/capital/withdraw/apply") => {
                let order_id = get("withdrawOrderId");
                assert_eq!(get("coin"), "USDC");
                assert!(matches!(get("walletType").as_str(), "0" | "1"));
                let Some(asked) = cents_of(&get("amount")) else {
                    return error(
                        400,
                        -4021,
                        "Asset withdrawal must be an 0.01 multiple of 0.01.",
                    );
                };
                let decision = account.withdraw(
                    &order_id,
                    &get("network"),
                    &get("address"),
                    asked,
                    None,
                    false,
                );
                withdraw_answer(decision)
            }
            ("GET", "/sapi/v1/capital/withdraw/history") => {
                account.history_requests += 1;
                if account.down {
                    return ResponseTemplate::new(503).set_body_string("Service Unavailable");
                }
                history(&account, &get)
            }
            (method, path) => panic!("the Binance stand-in has no {method} {path}"),
        }
    }
}

fn withdraw_answer(decision: Decision) -> ResponseTemplate {
    match decision {
        Decision::Made { id, hang, .. } => {
            let answer = ok(json!({"id": id}));
            if hang {
                answer.set_delay(Duration::from_millis(super::HANG_MS))
            } else {
                answer
            }
        }
        Decision::Repeated(id) => ok(json!({"id": id})),
        Decision::Refused(Fault::Insufficient) => {
            error(400, -4026, "You have insufficient balance.")
        }
        Decision::Refused(Fault::NotWhitelisted) => error(
            400,
            -4035,
            "This address is not on the whitelist. Please join and try again.",
        ),
        Decision::Refused(_) => error(400, -4033, "Illegal address."),
        Decision::Terms(why) => error(
            400,
            -4022,
            &format!("Not less than the minimum pick-up quantity: {why}"),
        ),
        Decision::FeeTooLow(why) => error(400, -4028, &why),
        Decision::Unavailable => ResponseTemplate::new(503).set_body_string("Service Unavailable"),
        Decision::RateLimited => {
            error(429, -1003, "Too many requests.").insert_header("Retry-After", "1")
        }
        // The proxy in front resets the connection; should one come through, it is a 5xx.
        Decision::Reset => ResponseTemplate::new(502).set_body_string("Bad Gateway"),
    }
}

fn history(account: &Account, get: &dyn Fn(&str) -> String) -> ResponseTemplate {
    let skew = account.clock_skew_ms;
    let now = account.clock_ms();
    let order_id = get("withdrawOrderId");
    let start: Option<i64> = get("startTime").parse().ok();
    let end: Option<i64> = get("endTime").parse().ok();
    let span = end.unwrap_or(now) - start.unwrap_or(now - 7 * DAY_MS);
    if !order_id.is_empty() && span >= 7 * DAY_MS {
        return error(
            400,
            -1102,
            "time between startTime and endTime must be less than 7 days with withdrawOrderId",
        );
    }
    if span >= 90 * DAY_MS {
        return error(400, -4047, "Time interval must be within 0-90 days");
    }
    let offset: usize = get("offset").parse().unwrap_or(0);
    let limit: usize = get("limit").parse().unwrap_or(1000).min(1000);
    let shown: Vec<Value> = account
        .history()
        .into_iter()
        .filter(|(m, _)| order_id.is_empty() || m.client_id == order_id)
        .filter(|(m, _)| start.is_none_or(|s| m.at_ms + skew >= s))
        .filter(|(m, _)| end.is_none_or(|e| m.at_ms + skew <= e))
        .skip(offset)
        .take(limit)
        .map(|(m, on_chain)| record(&m, on_chain))
        .collect();
    ok(Value::Array(shown))
}

fn record(m: &Made, on_chain: bool) -> Value {
    let apply = chrono::DateTime::from_timestamp_millis(m.at_ms)
        .expect("time")
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    json!({
        "id": m.id, "amount": format!("{}000000", amount_of(m.asked)), "transactionFee": amount_of(m.fee),
        "coin": "USDC", "status": if on_chain { 6 } else { 4 }, "address": m.address,
        "txId": if on_chain { format!("0x{:0>64}", &m.id[1..]) } else { String::new() },
        "applyTime": apply, "network": m.network, "transferType": 0,
        "withdrawOrderId": m.client_id, "info": "", "confirmNo": if on_chain { 12 } else { 0 },
        "walletType": 0, "txKey": "",
    })
}

/// A Binance account behind its stand-in (and a proxy that can reset connections).
pub(crate) struct BinanceStandIn {
    pub(crate) account: Shared,
    _server: MockServer,
    proxy: Proxy,
}

impl BinanceStandIn {
    pub(crate) async fn start(seed: u64) -> BinanceStandIn {
        let names: Vec<&str> = NETWORKS.iter().map(|(_, n)| *n).collect();
        let account = Shared::new(Account::new(seed, &names));
        let server = MockServer::start().await;
        Mock::given(matchers::any())
            .respond_with(Responder {
                account: account.clone(),
            })
            .mount(&server)
            .await;
        let proxy = Proxy::start(
            &server.uri(),
            account.clone(),
            "/sapi/v1/capital/withdraw/apply",
        );
        BinanceStandIn {
            account,
            _server: server,
            proxy,
        }
    }
}

impl StandIn for BinanceStandIn {
    fn account(&self) -> Option<&Shared> {
        Some(&self.account)
    }

    fn env(&self) -> Vec<(String, String)> {
        [
            ("PAYROLL__EXCHANGE__PROVIDER", "binance".to_owned()),
            ("PAYROLL__EXCHANGE__BINANCE__BASE_URL", self.proxy.url()),
            ("PAYROLL__EXCHANGE__ALLOW_INSECURE_HTTP", "true".into()),
            ("PAYROLL__EXCHANGE__BINANCE__API_KEY", API_KEY.into()),
            ("PAYROLL__EXCHANGE__BINANCE__SECRET_KEY", SECRET_KEY.into()),
            (
                "PAYROLL__EXCHANGE__BINANCE__TIMEOUT_MS",
                super::TIMEOUT_MS.to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn configure(&self, s: &mut Settings) {
        s.exchange.provider = "binance".into();
        s.exchange.binance.base_url = self.proxy.url();
        s.exchange.allow_insecure_http = true;
        s.exchange.binance.api_key = API_KEY.into();
        s.exchange.binance.secret_key = SECRET_KEY.into();
        s.exchange.binance.timeout_ms = super::TIMEOUT_MS;
    }

    fn network(&self, ours: &str) -> String {
        NETWORKS
            .iter()
            .find(|(n, _)| *n == ours)
            .map(|(_, theirs)| (*theirs).to_owned())
            .expect("a network the stand-in knows")
    }

    fn received(&self, made: &Made) -> i64 {
        // Binance takes its fee out of what it is asked to send.
        made.asked - made.fee
    }
}
