//! One conformance suite every exchange provider passes (CONTRACT §7): the same scenarios,
//! written once in [`scenarios`], run against each provider's stand-in — the sandbox (the
//! product's own embedded exchange), an OKX stand-in and a Binance stand-in, both checking
//! every request's signature as their exchange documents it and both, like the exchanges as
//! documented, making a second withdrawal for a repeated client id. A scenario that cannot
//! apply to a provider is named with the reason ([`not_applicable`]); the tests print it.
//!
//! What is held is the stand-in's own count: each paid payout withdrawn exactly once, for the
//! payout's amount as the payee receives it, to its wallet.

pub(crate) mod binance;
pub(crate) mod model;
pub(crate) mod okx;
pub(crate) mod proxy;
pub(crate) mod scenarios;

use std::collections::HashMap;

use payroll::config::Settings;
use payroll_actors::exchange::wire::from_compact_client_id;
use payroll_entities::sandbox_withdrawal;
use sea_orm::EntityTrait;

use self::model::{Made, Shared};

/// A call to a stand-in gives up after this long (ms)…
pub(crate) const TIMEOUT_MS: u64 = 600;
/// …so an answer this late comes after the client gave up.
pub(crate) const HANG_MS: u64 = 1_500;

/// An exchange as the tests drive it.
pub(crate) trait StandIn {
    /// The scripted account; `None` for the sandbox, which is the product's own.
    fn account(&self) -> Option<&Shared>;
    /// The `PAYROLL__…` variables of a service process paying through it.
    fn env(&self) -> Vec<(String, String)>;
    /// The settings of an in-process service paying through it.
    fn configure(&self, s: &mut Settings);
    /// The exchange's name of one of our networks.
    fn network(&self, ours: &str) -> String;
    /// What the payee of a made withdrawal receives.
    fn received(&self, made: &Made) -> i64;
}

/// The embedded sandbox: its withdrawals are rows of the service's own database.
pub(crate) struct SandboxStandIn;

impl StandIn for SandboxStandIn {
    fn account(&self) -> Option<&Shared> {
        None
    }

    fn env(&self) -> Vec<(String, String)> {
        [
            ("PAYROLL__EXCHANGE__PROVIDER", "sandbox"),
            (
                "PAYROLL__EXCHANGE__SANDBOX__EXCHANGE_INITIAL_USD_CENTS",
                "10000000000",
            ),
            ("PAYROLL__EXCHANGE__SANDBOX__COMPLETION_DELAY_MS", "300"),
            ("PAYROLL__EXCHANGE__SANDBOX__WITHDRAWAL_FEE_USD_CENTS", "25"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn configure(&self, s: &mut Settings) {
        s.exchange.provider = "sandbox".into();
        s.exchange.sandbox.exchange_initial_usd_cents = 10_000_000_000;
        s.exchange.sandbox.completion_delay_ms = 300;
        s.exchange.sandbox.withdrawal_fee_usd_cents = 25;
    }

    fn network(&self, ours: &str) -> String {
        ours.to_owned()
    }

    fn received(&self, made: &Made) -> i64 {
        made.asked
    }
}

/// Why a scenario does not apply to a provider, if it does not.
pub(crate) fn not_applicable(provider: &str, scenario: &str) -> Option<&'static str> {
    let scripted = "the sandbox is the service's own exchange, answering inside its own database: \
                    there is no wire to time out, reset or answer 5xx, and no script to refuse with";
    match (provider, scenario) {
        (
            "sandbox",
            "timeout_after_accepting"
            | "unavailable_before_accepting"
            | "reset"
            | "lagging_history"
            | "refused_insufficient"
            | "refused_not_whitelisted"
            | "refused_bad_address",
        ) => Some(scripted),
        ("sandbox", "refused_credentials") => Some("the sandbox has no credentials to refuse"),
        ("sandbox", "below_minimum" | "network_suspended") => Some(
            "the sandbox withdraws any amount of at least 1 cent on every network (payout amounts are at least 1 cent)",
        ),
        ("sandbox", "fee_rose") => Some(
            "the sandbox's fee is a setting (exchange.sandbox.withdrawal_fee_usd_cents), fixed while it runs",
        ),
        _ => None,
    }
}

/// Withdrawals made under each of our client ids, as (what the payee receives, address).
pub(crate) async fn made_by_client_id(
    stand_in: &impl StandIn,
    db: &payroll_entities::db::Db,
) -> HashMap<String, Vec<(i64, String)>> {
    let mut out: HashMap<String, Vec<(i64, String)>> = HashMap::new();
    match stand_in.account() {
        Some(account) => {
            for (theirs, made) in account.made_per_client_id() {
                let ours = from_compact_client_id(&theirs).unwrap_or(theirs);
                for m in made {
                    out.entry(ours.clone())
                        .or_default()
                        .push((stand_in.received(&m), m.address.clone()));
                }
            }
        }
        None => {
            for w in sandbox_withdrawal::Entity::find()
                .all(&db.conn)
                .await
                .expect("sandbox withdrawals")
            {
                out.entry(w.client_id)
                    .or_default()
                    .push((w.amount_usd_cents, w.address));
            }
        }
    }
    out
}
