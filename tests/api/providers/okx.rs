//! An OKX stand-in over the shared account model: the v5 endpoints the provider uses, every
//! request's signature checked as OKX documents it. Like OKX as documented, it does not refuse
//! a second withdrawal under a `clientId` it holds: it makes another, which the tests would
//! count. OKX charges its fee on top of `amt`; a `fee` under the current one is refused.

use std::{collections::HashMap, time::Duration};

use payroll::config::Settings;
use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use super::{
    StandIn,
    model::{Account, Decision, Fault, Made, Shared, amount_of, cents_of},
    proxy::Proxy,
};
use crate::okx_standin::{Endpoint, envelope, mount, okx_error, signature_problem};

const API_KEY: &str = "okx-conformance-key";
const SECRET_KEY: &str = "okx-conformance-secret";
const PASSPHRASE: &str = "okx-conformance-passphrase";
const DEPOSIT_ADDRESS: &str = "0xd3b0000000000000000000000000000000000002";
const CHAINS: &[(&str, &str)] = &[
    ("ETHEREUM", "USDC-ERC20"),
    ("POLYGON", "USDC-Polygon"),
    ("BASE", "USDC-Base"),
    ("ARBITRUM", "USDC-Arbitrum One"),
    ("OPTIMISM", "USDC-Optimism"),
    ("SOLANA", "USDC-Solana"),
];

struct Responder {
    endpoint: Endpoint,
    account: Shared,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut account = self.account.lock();
        if account.credentials_refused && matches!(self.endpoint, Endpoint::Withdrawal) {
            return okx_error(
                401,
                "50105",
                "Your API key does not have permission to withdraw",
            );
        }
        if let Some(problem) = signature_problem(request, API_KEY, SECRET_KEY, PASSPHRASE) {
            account.bad_signatures.push(problem);
            return okx_error(401, "50113", "Invalid Sign");
        }
        let query: HashMap<String, String> = request.url.query_pairs().into_owned().collect();
        match self.endpoint {
            Endpoint::Balances => envelope(json!([{
                "ccy": "USDC", "bal": amount_of(account.balance), "frozenBal": "0",
                "availBal": amount_of(account.balance),
            }])),
            Endpoint::DepositAddress => envelope(json!([{
                "addr": DEPOSIT_ADDRESS, "chain": "USDC-ERC20", "ccy": "USDC", "to": "6", "selected": true,
            }])),
            Endpoint::Currencies => envelope(Value::Array(
                CHAINS
                    .iter()
                    .filter_map(|(_, chain)| account.terms.get(*chain).map(|t| (chain, t)))
                    .map(|(chain, t)| {
                        json!({"ccy": "USDC", "chain": chain, "canWd": t.enabled,
                               "fee": amount_of(t.fee), "minWd": amount_of(t.minimum), "wdTickSz": "2"})
                    })
                    .collect(),
            )),
            Endpoint::Withdrawal => {
                let body: Value = serde_json::from_slice(&request.body).expect("json body");
                let text = |name: &str| body[name].as_str().unwrap_or("").to_owned();
                let asked = cents_of(&text("amt")).unwrap_or(0);
                let offered = cents_of(&text("fee"));
                let decision = account.withdraw(
                    &text("clientId"),
                    &text("chain"),
                    &text("toAddr"),
                    asked,
                    offered,
                    false,
                );
                match decision {
                    Decision::Made { id, hang, .. } => {
                        let ok = envelope(json!([{"amt": text("amt"), "wdId": id, "ccy": "USDC",
                                                  "clientId": text("clientId"), "chain": text("chain")}]));
                        if hang {
                            ok.set_delay(Duration::from_millis(super::HANG_MS))
                        } else {
                            ok
                        }
                    }
                    Decision::Repeated(_) => okx_error(200, "58404", "ClientId already exists"),
                    Decision::Refused(Fault::Insufficient) => {
                        okx_error(200, "58350", "Insufficient balance")
                    }
                    Decision::Refused(Fault::NotWhitelisted) => okx_error(
                        200,
                        "58207",
                        "Withdrawal address isn't on the verified address list.",
                    ),
                    Decision::Refused(_) => {
                        okx_error(200, "58203", "Please add a withdrawal address")
                    }
                    Decision::Terms(why) => okx_error(200, "58201", &why),
                    Decision::FeeTooLow(why) => okx_error(200, "58237", &format!("fee: {why}")),
                    Decision::Unavailable | Decision::Reset => {
                        ResponseTemplate::new(503).set_body_string("Service Unavailable")
                    }
                    Decision::RateLimited => okx_error(429, "50011", "Too Many Requests"),
                }
            }
            Endpoint::WithdrawalHistory => {
                account.history_requests += 1;
                if account.down {
                    return ResponseTemplate::new(503).set_body_string("Service Unavailable");
                }
                history(&account, &query)
            }
        }
    }
}

fn history(account: &Account, query: &HashMap<String, String>) -> ResponseTemplate {
    let client_id = query.get("clientId").cloned();
    let after: Option<i64> = query.get("after").and_then(|a| a.parse().ok());
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(100)
        .min(100);
    envelope(Value::Array(
        account
            .history()
            .into_iter()
            .filter(|(m, _)| client_id.as_ref().is_none_or(|c| *c == m.client_id))
            .filter(|(m, _)| after.is_none_or(|a| m.at_ms < a))
            .take(limit)
            .map(|(m, on_chain)| {
                json!({
                    "chain": m.network, "fee": amount_of(m.fee), "feeCcy": "USDC", "ccy": "USDC",
                    "clientId": m.client_id, "amt": amount_of(m.asked), "to": m.address,
                    "txId": if on_chain { format!("0x{:0>64}", &m.id[1..]) } else { String::new() },
                    "state": if on_chain { "2" } else { "0" },
                    "ts": m.at_ms.to_string(), "wdId": m.id,
                })
            })
            .collect(),
    ))
}

/// An OKX account behind its stand-in (and a proxy that can reset connections).
pub(crate) struct OkxStandIn {
    pub(crate) account: Shared,
    _server: MockServer,
    proxy: Proxy,
}

impl OkxStandIn {
    pub(crate) async fn start(seed: u64) -> OkxStandIn {
        let names: Vec<&str> = CHAINS.iter().map(|(_, c)| *c).collect();
        let account = Shared::new(Account::new(seed, &names));
        let server = MockServer::start().await;
        mount(&server, |endpoint| Responder {
            endpoint,
            account: account.clone(),
        })
        .await;
        let proxy = Proxy::start(&server.uri(), account.clone(), "/api/v5/asset/withdrawal");
        OkxStandIn {
            account,
            _server: server,
            proxy,
        }
    }
}

impl StandIn for OkxStandIn {
    fn account(&self) -> Option<&Shared> {
        Some(&self.account)
    }

    fn env(&self) -> Vec<(String, String)> {
        [
            ("PAYROLL__EXCHANGE__PROVIDER", "okx".to_owned()),
            ("PAYROLL__EXCHANGE__OKX__BASE_URL", self.proxy.url()),
            ("PAYROLL__EXCHANGE__ALLOW_INSECURE_HTTP", "true".into()),
            ("PAYROLL__EXCHANGE__OKX__API_KEY", API_KEY.into()),
            ("PAYROLL__EXCHANGE__OKX__SECRET_KEY", SECRET_KEY.into()),
            ("PAYROLL__EXCHANGE__OKX__PASSPHRASE", PASSPHRASE.into()),
            (
                "PAYROLL__EXCHANGE__OKX__TIMEOUT_MS",
                super::TIMEOUT_MS.to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn configure(&self, s: &mut Settings) {
        s.exchange.provider = "okx".into();
        s.exchange.okx.base_url = self.proxy.url();
        s.exchange.allow_insecure_http = true;
        s.exchange.okx.api_key = API_KEY.into();
        s.exchange.okx.secret_key = SECRET_KEY.into();
        s.exchange.okx.passphrase = PASSPHRASE.into();
        s.exchange.okx.timeout_ms = super::TIMEOUT_MS;
    }

    fn network(&self, ours: &str) -> String {
        CHAINS
            .iter()
            .find(|(n, _)| *n == ours)
            .map(|(_, theirs)| (*theirs).to_owned())
            .expect("a network the stand-in knows")
    }

    fn received(&self, made: &Made) -> i64 {
        // OKX charges its fee on top.
        made.asked
    }
}
