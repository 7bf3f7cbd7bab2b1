//! What the OKX stand-ins share: the v5 endpoints the provider uses, OKX's answer envelope and
//! error form, and mounting one responder per endpoint on a mock server.

use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers};

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

/// Checks a request's headers as OKX would: key, passphrase, timestamp form, and the signature
/// recomputed here from the documented prehash.
pub fn signature_problem(
    request: &Request,
    api_key: &str,
    secret_key: &str,
    passphrase: &str,
) -> Option<String> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    if header("OK-ACCESS-KEY") != api_key {
        return Some("OK-ACCESS-KEY".into());
    }
    if header("OK-ACCESS-PASSPHRASE") != passphrase {
        return Some("OK-ACCESS-PASSPHRASE".into());
    }
    let timestamp = header("OK-ACCESS-TIMESTAMP");
    let parsed = chrono::DateTime::parse_from_rfc3339(&timestamp);
    if timestamp.len() != 24 || !timestamp.ends_with('Z') || parsed.is_err() {
        return Some(format!("OK-ACCESS-TIMESTAMP {timestamp}"));
    }
    let mut path = request.url.path().to_owned();
    if let Some(query) = request.url.query() {
        path.push('?');
        path.push_str(query);
    }
    let prehash = format!(
        "{timestamp}{}{path}{}",
        request.method.as_str(),
        String::from_utf8_lossy(&request.body)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret_key.as_bytes()).expect("hmac");
    mac.update(prehash.as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    (header("OK-ACCESS-SIGN") != expected).then(|| format!("OK-ACCESS-SIGN of {prehash}"))
}
