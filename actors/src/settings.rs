//! The configuration sections the actors use (CONTRACT §13); `src/config.rs` reads them.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use payroll_entities::Network;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsSettings {
    /// How often a CONFIRMED run looks for funds on its own.
    pub funds_watch_interval_ms: u64,
    /// How often a PAYING_OUT run asks the exchange about its withdrawals.
    pub poll_interval_ms: u64,
    /// An idle run actor (nothing to watch) stops after this long.
    pub idle_actor_timeout_ms: u64,
    /// How long a run's lease lasts without a heartbeat; the holder renews it three times
    /// per lease, and another instance takes the run over once it expires.
    pub lease_ttl_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeSettings {
    /// `sandbox` (the embedded exchange), `okx` (OKX v5 REST) or `binance` (Binance REST).
    pub provider: String,
    /// Withdrawals per second, 0 for no limit; bursts of `burst`.
    pub withdrawals_per_second: u32,
    pub burst: u32,
    /// Payouts handed to the exchange and not yet answered, per run.
    pub in_flight_window: u32,
    /// How long after its last send a withdrawal the exchange does not know is sent again.
    pub reconcile_grace_ms: u64,
    /// A payout PROCESSING longer than this is stuck: reported, never re-sent.
    pub stuck_after_ms: u64,
    /// Client ids looked up in one pass.
    pub reconcile_batch: u32,
    /// Sends of one client id before a payout whose outcome is still unknown is stuck, where
    /// the exchange documents refusing a second withdrawal under an id it already holds.
    pub max_sends: u32,
    /// Where the exchange does not document that refusal: how long after its last send an
    /// id the look-ups have not found (at least three of them, the last after this) is sent
    /// again…
    pub resend_grace_without_dedupe_ms: u64,
    /// …and how many sends of one id there are at most before its payout is stuck.
    pub max_sends_without_dedupe: u32,
    /// A job that cannot reach the exchange this long is FAILED.
    pub unreachable_fail_ms: u64,
    /// The exchange's base URL may be `http://` (tests only: credentials would go in clear).
    #[serde(default)]
    pub allow_insecure_http: bool,
    /// A send stamped this long ago and not yet started is not sent: it stays unknown and is
    /// looked up (so an instance paused between stamp and send does not send after another
    /// instance resent). Used at most as half of the provider's resend grace (see
    /// [`ExchangeSettings::send_deadline`]).
    pub send_deadline_ms: u64,
    pub sandbox: SandboxSettings,
    pub okx: OkxSettings,
    pub binance: BinanceSettings,
}

/// The most withdrawals sent in one call to the provider.
pub const UNPACED_BATCH: usize = 512;

/// The least window of a run when nothing paces withdrawals: two batches, so that the run
/// records the answers to one and claims the next while the exchange actor sends the other.
pub const UNPACED_WINDOW: usize = 2 * UNPACED_BATCH;

/// When an id whose outcome is unknown and that the exchange does not show is sent again
/// (CONTRACT §7, "Resends depend on the exchange").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resends {
    /// Since the id's last send.
    pub grace_ms: u64,
    /// Sends of one id in all; then its payout is stuck.
    pub max_sends: u32,
    /// Look-ups since the last send that must not have found it, the last after the grace.
    pub unfound_lookups: i32,
}

/// Look-ups that must miss an id before it is resent where our record is the only guard.
pub const UNFOUND_LOOKUPS_BEFORE_RESEND: i32 = 3;

impl ExchangeSettings {
    /// The resend rule for a provider: `deduped` when its exchange documents refusing a
    /// second withdrawal under a client id it already holds (the resend then cannot pay
    /// twice), otherwise the slower rule where only our own record guards against it.
    pub fn resends(&self, deduped: bool) -> Resends {
        if deduped {
            Resends {
                grace_ms: self.reconcile_grace_ms,
                max_sends: self.max_sends,
                unfound_lookups: 1,
            }
        } else {
            Resends {
                grace_ms: self.resend_grace_without_dedupe_ms,
                max_sends: self.max_sends_without_dedupe,
                unfound_lookups: UNFOUND_LOOKUPS_BEFORE_RESEND,
            }
        }
    }

    /// How long after its stamp a send may still start: `send_deadline_ms`, and at most half
    /// of the resend grace of the provider's rule ([`ExchangeSettings::resends`]), so that no
    /// instance starts a send after another may have resent it (which waits the grace since
    /// the stamp).
    pub fn send_deadline(&self, deduped: bool) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.send_deadline_ms
                .min(self.resends(deduped).grace_ms / 2)
                .max(1),
        )
    }

    /// Payouts a run keeps handed to the exchange: `in_flight_window`, and at least
    /// [`UNPACED_WINDOW`] when nothing paces withdrawals (`withdrawals_per_second = 0`): then
    /// every send goes out at once, and a larger window writes fewer, larger batches.
    pub fn window(&self) -> usize {
        let window = self.in_flight_window.max(1) as usize;
        if self.withdrawals_per_second == 0 {
            window.max(UNPACED_WINDOW)
        } else {
            window
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    pub treasury_initial_usd_cents: i64,
    pub exchange_initial_usd_cents: i64,
    pub withdrawal_fee_usd_cents: i64,
    pub completion_delay_ms: u64,
    /// Withdrawals to these addresses fail (compared case-insensitively).
    pub fail_addresses: Vec<String>,
    /// The sandbox's own limit (0: none); above it it answers "rate limited".
    pub max_withdrawals_per_second: u32,
    pub transfer_delay_ms: u64,
}

/// The OKX account (`exchange.provider = "okx"`). The three credentials come from the
/// environment only (`PAYROLL__EXCHANGE__OKX__API_KEY`, `…__SECRET_KEY`, `…__PASSPHRASE`) and
/// are never printed.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OkxSettings {
    /// `https://www.okx.com`; tests point it at a scripted server.
    pub base_url: String,
    #[serde(default)]
    pub api_key: String,
    #[serde(default)]
    pub secret_key: String,
    #[serde(default)]
    pub passphrase: String,
    /// Our network → OKX's chain name for USDC (`ETHEREUM` → `USDC-ERC20`). A payee on a
    /// network missing here cannot be paid through OKX.
    pub chains: BTreeMap<String, String>,
    /// The network whose OKX deposit address is shown for funding the account.
    pub deposit_network: String,
    /// One request to OKX (connect, send, answer) takes at most this long; after that a
    /// withdrawal's outcome is unknown and it is looked up by client id.
    pub timeout_ms: u64,
}

impl OkxSettings {
    /// The chain map with its keys read as networks (case-insensitively: environment variable
    /// names may arrive in lower case), or the first key that names no network.
    pub fn chain_map(&self) -> Result<HashMap<Network, String>, String> {
        network_map(&self.chains)
    }

    /// The deposit network, read like the chain map's keys.
    pub fn deposit_network(&self) -> Option<Network> {
        Network::parse(&self.deposit_network.to_ascii_uppercase())
    }
}

impl std::fmt::Debug for OkxSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |s: &String| if s.is_empty() { "" } else { "[redacted]" };
        f.debug_struct("OkxSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &redacted(&self.api_key))
            .field("secret_key", &redacted(&self.secret_key))
            .field("passphrase", &redacted(&self.passphrase))
            .field("chains", &self.chains)
            .field("deposit_network", &self.deposit_network)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// The Binance account (`exchange.provider = "binance"`). The two credentials come from the
/// environment only (`PAYROLL__EXCHANGE__BINANCE__API_KEY`, `…__SECRET_KEY`) and are never
/// printed.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinanceSettings {
    /// `https://api.binance.com`; tests point it at a scripted server.
    pub base_url: String,
    #[serde(default)]
    pub api_key: String,
    #[serde(default)]
    pub secret_key: String,
    /// How long after its `timestamp` Binance may still take a signed request (at most 60000).
    pub recv_window_ms: u64,
    /// Our network → Binance's network name for USDC (`ETHEREUM` → `ETH`). A payee on a
    /// network missing here cannot be paid through Binance.
    pub networks: BTreeMap<String, String>,
    /// The network whose Binance deposit address is shown for funding the account.
    pub deposit_network: String,
    /// The wallet withdrawals are paid from and whose balance counts: `spot` or `funding`.
    pub wallet: String,
    /// One request to Binance (connect, send, answer) takes at most this long.
    pub timeout_ms: u64,
}

impl BinanceSettings {
    /// The network map with its keys read as our networks (case-insensitively), or the first
    /// key that names none.
    pub fn network_map(&self) -> Result<HashMap<Network, String>, String> {
        network_map(&self.networks)
    }

    /// The deposit network, read like the network map's keys.
    pub fn deposit_network(&self) -> Option<Network> {
        Network::parse(&self.deposit_network.to_ascii_uppercase())
    }
}

impl std::fmt::Debug for BinanceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |s: &String| if s.is_empty() { "" } else { "[redacted]" };
        f.debug_struct("BinanceSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &redacted(&self.api_key))
            .field("secret_key", &redacted(&self.secret_key))
            .field("recv_window_ms", &self.recv_window_ms)
            .field("networks", &self.networks)
            .field("deposit_network", &self.deposit_network)
            .field("wallet", &self.wallet)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// A network map and its deposit network, which must be in it; `section` names the map's
/// settings (`exchange.okx.chains`) in the refusal.
pub fn deposit_in(
    map: &HashMap<Network, String>,
    deposit: &str,
    section: &str,
) -> Result<Network, String> {
    let network = Network::parse(&deposit.to_ascii_uppercase())
        .ok_or_else(|| format!("{deposit} is not a network"))?;
    if !map.contains_key(&network) {
        return Err(format!(
            "the deposit network {network} has none in {section}"
        ));
    }
    Ok(network)
}

/// A map keyed by network names (as written in a config file or an environment variable's
/// lower-cased name) with its keys read as networks, or the first key that names none.
fn network_map(map: &BTreeMap<String, String>) -> Result<HashMap<Network, String>, String> {
    let mut out = HashMap::new();
    for (key, value) in map {
        let network = Network::parse(&key.to_ascii_uppercase())
            .ok_or_else(|| format!("{key} is not a network ({})", Network::spellings()))?;
        out.insert(network, value.clone());
    }
    Ok(out)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// `file` (one .eml per message under `<data.dir>/outbox/`) or `smtp`.
    pub transport: String,
    pub from: String,
    pub max_attempts: u32,
    /// The company's name, the one text of payee emails not computed by the service.
    pub company_name: String,
    pub smtp: SmtpSettings,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    /// `none`, `starttls` or `tls`.
    pub tls: String,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// Credentials may go over a connection without TLS (`tls = "none"`) only when this is
    /// set: otherwise such settings stop the start-up.
    #[serde(default)]
    pub allow_plaintext_auth: bool,
}

impl std::fmt::Debug for SmtpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestRunSettings {
    /// Each payout of a test run is min(this, the normal amount), in USDC cents.
    pub amount_usd_cents: i64,
    /// Completed test payouts are taken off the employee's next regular run.
    pub deduct_from_next_run: bool,
}

/// Where the email outbox files go.
#[derive(Debug, Clone)]
pub struct Paths {
    pub data_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> ExchangeSettings {
        let okx = OkxSettings {
            base_url: "https://www.okx.com".into(),
            api_key: String::new(),
            secret_key: String::new(),
            passphrase: String::new(),
            chains: BTreeMap::new(),
            deposit_network: "ETHEREUM".into(),
            timeout_ms: 10_000,
        };
        let binance = BinanceSettings {
            base_url: "https://api.binance.com".into(),
            api_key: String::new(),
            secret_key: String::new(),
            recv_window_ms: 5000,
            networks: BTreeMap::new(),
            deposit_network: "ETHEREUM".into(),
            wallet: "spot".into(),
            timeout_ms: 10_000,
        };
        ExchangeSettings {
            provider: "sandbox".into(),
            withdrawals_per_second: 6,
            burst: 6,
            in_flight_window: 64,
            reconcile_grace_ms: 60_000,
            stuck_after_ms: 3_600_000,
            reconcile_batch: 1000,
            max_sends: 10,
            resend_grace_without_dedupe_ms: 600_000,
            max_sends_without_dedupe: 3,
            unreachable_fail_ms: 600_000,
            allow_insecure_http: false,
            send_deadline_ms: 5000,
            sandbox: SandboxSettings {
                treasury_initial_usd_cents: 0,
                exchange_initial_usd_cents: 0,
                withdrawal_fee_usd_cents: 0,
                completion_delay_ms: 0,
                fail_addresses: Vec::new(),
                max_withdrawals_per_second: 0,
                transfer_delay_ms: 0,
            },
            okx,
            binance,
        }
    }

    #[test]
    fn resends_follow_what_the_exchange_documents() {
        let mut s = exchange();
        let deduped = s.resends(true);
        assert_eq!(
            (deduped.grace_ms, deduped.max_sends, deduped.unfound_lookups),
            (60_000, 10, 1)
        );
        let guarded = s.resends(false);
        assert_eq!(
            (guarded.grace_ms, guarded.max_sends, guarded.unfound_lookups),
            (600_000, 3, UNFOUND_LOOKUPS_BEFORE_RESEND)
        );
        // A stamped send may start at most half its rule's grace after its stamp.
        assert_eq!(s.send_deadline(false).as_millis(), 5000);
        s.reconcile_grace_ms = 4000;
        assert_eq!(s.send_deadline(true).as_millis(), 2000);
        assert_eq!(s.send_deadline(false).as_millis(), 5000);
        s.resend_grace_without_dedupe_ms = 3000;
        assert_eq!(s.send_deadline(false).as_millis(), 1500);
    }

    #[test]
    fn a_deposit_network_must_be_in_its_map() {
        let map: HashMap<Network, String> = [(Network::Base, "BASE".to_owned())].into();
        assert_eq!(
            deposit_in(&map, "base", "exchange.binance.networks"),
            Ok(Network::Base)
        );
        assert!(
            deposit_in(&map, "ETHEREUM", "exchange.binance.networks")
                .is_err_and(|e| e.contains("exchange.binance.networks"))
        );
        assert!(deposit_in(&map, "DOGE", "x").is_err());
    }
}
