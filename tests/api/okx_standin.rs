//! What the OKX stand-ins share: the v5 endpoints the provider uses, OKX's answer envelope and
//! error form, and mounting one responder per endpoint on a mock server.

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Respond, ResponseTemplate, matchers};

/// An OKX v5 endpoint the provider calls.
#[derive(Clone, Copy)]
pub enum Endpoint {
    Balances,
    DepositAddress,
    Currencies,
    Withdrawal,
    WithdrawalHistory,
}

/// A success: `{"code": "0", "msg": "", "data": …}`.
pub fn envelope(data: Value) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "application/json")
        .set_body_string(json!({"code": "0", "msg": "", "data": data}).to_string())
}

/// An OKX error answer with its code and message.
pub fn okx_error(status: u16, code: &str, msg: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .insert_header("content-type", "application/json")
        .set_body_string(json!({"code": code, "msg": msg, "data": []}).to_string())
}

/// Mounts `responder(endpoint)` on each endpoint's method and path.
pub async fn mount<R: Respond + 'static>(server: &MockServer, responder: impl Fn(Endpoint) -> R) {
    for (method, path, endpoint) in [
        ("GET", "/api/v5/asset/balances", Endpoint::Balances),
        (
            "GET",
            "/api/v5/asset/deposit-address",
            Endpoint::DepositAddress,
        ),
        ("GET", "/api/v5/asset/currencies", Endpoint::Currencies),
        ("POST", "/api/v5/asset/withdrawal", Endpoint::Withdrawal),
        (
            "GET",
            "/api/v5/asset/withdrawal-history",
            Endpoint::WithdrawalHistory,
        ),
    ] {
        Mock::given(matchers::method(method))
            .and(matchers::path(path))
            .respond_with(responder(endpoint))
            .mount(server)
            .await;
    }
}
