//! `exchange.*` checks of the REST providers (OKX, Binance): the shape of every key always,
//! the credentials when the provider is the one in force. Each refusal is `key: why`.

use std::collections::HashMap;

use payroll_actors::settings::ExchangeSettings;
use payroll_entities::Network;

/// The providers `exchange.provider` may name.
pub(super) const PROVIDERS: &[&str] = &["sandbox", "okx", "binance"];

type Refusal = (String, String);

fn refuse<T>(key: &str, why: impl Into<String>) -> Result<T, Refusal> {
    Err((key.to_owned(), why.into()))
}

/// A provider's base URL: http(s) with a host and no query; `https://` unless a test allowed
/// plain HTTP (the credentials travel in every request).
fn base_url(key: &str, url: &str, example: &str, allow_http: bool) -> Result<(), Refusal> {
    let uri = url.parse::<awc::http::Uri>().ok();
    let sound = uri.as_ref().is_some_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https"))
            && u.authority().is_some()
            && u.query().is_none()
    });
    if !sound {
        return refuse(key, format!("must be an http(s) URL such as {example}"));
    }
    if uri.as_ref().and_then(|u| u.scheme_str()) == Some("http") && !allow_http {
        return refuse(
            key,
            "must be https:// (credentials go in every request); http:// only with exchange.allow_insecure_http = true, for tests",
        );
    }
    Ok(())
}

/// A map of our networks to the exchange's names, and the deposit network in it.
fn network_names(
    prefix: &str,
    map: Result<HashMap<Network, String>, String>,
    example: &str,
    deposit: Option<Network>,
) -> Result<(), Refusal> {
    let map = map.map_err(|why| (prefix.to_owned(), why))?;
    if let Some((network, _)) = map
        .iter()
        .find(|(_, name)| name.trim().is_empty() || name.len() > 64)
    {
        return refuse(
            &format!("{prefix}.{network}"),
            format!("must be a name such as {example}"),
        );
    }
    let deposit_key = format!(
        "{}.deposit_network",
        prefix.rsplit_once('.').map_or(prefix, |(p, _)| p)
    );
    let Some(deposit) = deposit else {
        return refuse(
            &deposit_key,
            format!("must be one of {}", Network::spellings()),
        );
    };
    if !map.contains_key(&deposit) {
        return refuse(&deposit_key, format!("{deposit} has none in {prefix}"));
    }
    Ok(())
}

fn timeout(key: &str, ms: u64) -> Result<(), Refusal> {
    if ms == 0 || ms > 300_000 {
        return refuse(key, "must be between 1 and 300000");
    }
    Ok(())
}

/// Credentials of the provider in force: each set (from the environment, `variable`).
fn credentials(provider: &str, given: &[(&str, &str, &String)]) -> Result<(), Refusal> {
    for (key, variable, value) in given {
        if value.trim().is_empty() {
            return refuse(
                key,
                format!("required when exchange.provider is \"{provider}\"; set {variable}"),
            );
        }
    }
    Ok(())
}

/// Checks the provider's name and the OKX and Binance sections.
pub(super) fn validate(exchange: &ExchangeSettings) -> Result<(), Refusal> {
    if !PROVIDERS.contains(&exchange.provider.as_str()) {
        return refuse(
            "exchange.provider",
            "must be \"sandbox\" (the embedded exchange), \"okx\" or \"binance\"",
        );
    }
    let allow_http = exchange.allow_insecure_http;
    let okx = &exchange.okx;
    base_url(
        "exchange.okx.base_url",
        &okx.base_url,
        "https://www.okx.com",
        allow_http,
    )?;
    timeout("exchange.okx.timeout_ms", okx.timeout_ms)?;
    network_names(
        "exchange.okx.chains",
        okx.chain_map(),
        "USDC-ERC20",
        okx.deposit_network(),
    )?;
    if exchange.provider == "okx" {
        credentials(
            "okx",
            &[
                (
                    "exchange.okx.api_key",
                    "PAYROLL__EXCHANGE__OKX__API_KEY",
                    &okx.api_key,
                ),
                (
                    "exchange.okx.secret_key",
                    "PAYROLL__EXCHANGE__OKX__SECRET_KEY",
                    &okx.secret_key,
                ),
                (
                    "exchange.okx.passphrase",
                    "PAYROLL__EXCHANGE__OKX__PASSPHRASE",
                    &okx.passphrase,
                ),
            ],
        )?;
    }
    let binance = &exchange.binance;
    base_url(
        "exchange.binance.base_url",
        &binance.base_url,
        "https://api.binance.com",
        allow_http,
    )?;
    timeout("exchange.binance.timeout_ms", binance.timeout_ms)?;
    if binance.recv_window_ms == 0 || binance.recv_window_ms > 60_000 {
        return refuse(
            "exchange.binance.recv_window_ms",
            "must be between 1 and 60000 (Binance's own bound)",
        );
    }
    if !matches!(binance.wallet.as_str(), "spot" | "funding") {
        return refuse("exchange.binance.wallet", "must be \"spot\" or \"funding\"");
    }
    network_names(
        "exchange.binance.networks",
        binance.network_map(),
        "ETH",
        binance.deposit_network(),
    )?;
    if exchange.provider == "binance" {
        credentials(
            "binance",
            &[
                (
                    "exchange.binance.api_key",
                    "PAYROLL__EXCHANGE__BINANCE__API_KEY",
                    &binance.api_key,
                ),
                (
                    "exchange.binance.secret_key",
                    "PAYROLL__EXCHANGE__BINANCE__SECRET_KEY",
                    &binance.secret_key,
                ),
            ],
        )?;
    }
    Ok(())
}
