//! One exchange account as the stand-ins keep it, whatever protocol fronts it: its balance,
//! the withdrawals it made (and every request for one), its terms per network, and the faults
//! scripted for the next withdrawal requests or drawn at random. Each stand-in (OKX, Binance)
//! translates its protocol to these calls; the tests hold the model's count of withdrawals,
//! not ours, to one per payout.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use rand::{Rng, SeedableRng, rngs::StdRng};

/// What the exchange does to one withdrawal request, scripted for the next ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Refuses: not enough money.
    Insufficient,
    /// Refuses: the address is not on the account's whitelist.
    NotWhitelisted,
    /// Refuses: the address is not one of the network's.
    BadAddress,
    /// A 5xx before anything is made.
    Unavailable,
    /// The rate limit (429) before anything is made.
    RateLimited,
    /// Makes the withdrawal, then answers after the client gave up.
    HangAfterAccepting,
    /// Reads the request and closes the connection: nothing made.
    ResetBefore,
    /// Makes the withdrawal and closes the connection without an answer.
    ResetAfterAccepting,
}

/// Faults drawn at random for every withdrawal request, besides the scripted ones.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Odds {
    pub(crate) hang: f64,
    pub(crate) unavailable: f64,
    pub(crate) rate_limited: f64,
}

/// A withdrawal the exchange made.
#[derive(Debug, Clone)]
pub(crate) struct Made {
    /// The client id, in the exchange's form.
    pub(crate) client_id: String,
    pub(crate) id: String,
    /// What it was asked to withdraw, in cents (for an exchange that takes its fee out of it,
    /// the payee gets this less `fee`).
    pub(crate) asked: i64,
    pub(crate) fee: i64,
    pub(crate) network: String,
    pub(crate) address: String,
    /// When it was made, Unix milliseconds.
    pub(crate) at_ms: i64,
}

/// Terms of one network.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) fee: i64,
    pub(crate) minimum: i64,
    /// Amounts are multiples of this (cents).
    pub(crate) step: i64,
    pub(crate) enabled: bool,
}

pub(crate) struct Account {
    pub(crate) balance: i64,
    pub(crate) made: Vec<Made>,
    /// Withdrawal requests received per client id (the exchange's form).
    pub(crate) posts: HashMap<String, u32>,
    pub(crate) script: VecDeque<Fault>,
    pub(crate) odds: Odds,
    rng: StdRng,
    /// Network name → terms.
    pub(crate) terms: HashMap<String, Terms>,
    /// When set, only these addresses (lower case) are paid.
    pub(crate) whitelist: Option<HashSet<String>>,
    /// The key lacks the withdrawal permission: every withdrawal request is refused as
    /// unauthorized (reads still work).
    pub(crate) credentials_refused: bool,
    /// Withdrawals and history answer 5xx.
    pub(crate) down: bool,
    /// A withdrawal shows in the history this long after it was made…
    pub(crate) history_lag_ms: i64,
    /// …and is on chain this long after.
    pub(crate) settle_ms: i64,
    /// The exchange's clock minus the real one.
    pub(crate) clock_skew_ms: i64,
    /// Every request is answered with a ban (418) until then (Unix ms).
    pub(crate) banned_until_ms: i64,
    /// Requests whose signature or credentials did not check out.
    pub(crate) bad_signatures: Vec<String>,
    /// History requests received.
    pub(crate) history_requests: u32,
    /// Reads of the exchange's clock.
    pub(crate) time_requests: u32,
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// What the model decided for one withdrawal request.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    Made {
        id: String,
        hang: bool,
    },
    Refused(Fault),
    Unavailable,
    RateLimited,
    Reset,
    /// Under the network's minimum, not its step, or a network it does not withdraw on.
    Terms(String),
    /// The client id was seen before and made: what a deduplicating exchange would answer.
    Repeated(String),
    /// The fee offered with the request is below the current one.
    FeeTooLow(String),
}

impl Account {
    pub(crate) fn new(seed: u64, networks: &[&str]) -> Account {
        Account {
            balance: 10_000_000_000,
            made: Vec::new(),
            posts: HashMap::new(),
            script: VecDeque::new(),
            odds: Odds::default(),
            rng: StdRng::seed_from_u64(seed),
            terms: networks
                .iter()
                .map(|n| {
                    (
                        (*n).to_owned(),
                        Terms {
                            fee: 25,
                            minimum: 100,
                            step: 1,
                            enabled: true,
                        },
                    )
                })
                .collect(),
            whitelist: None,
            credentials_refused: false,
            down: false,
            history_lag_ms: 0,
            settle_ms: 300,
            clock_skew_ms: 0,
            banned_until_ms: 0,
            bad_signatures: Vec::new(),
            history_requests: 0,
            time_requests: 0,
        }
    }

    /// One withdrawal request: `asked` cents to `address` on `network` under `client_id`.
    /// `dedupe`: answer a client id already made with [`Decision::Repeated`] instead of making
    /// another (what no exchange we target documents; off for the Binance stand-in).
    pub(crate) fn withdraw(
        &mut self,
        client_id: &str,
        network: &str,
        address: &str,
        asked: i64,
        fee_offered: Option<i64>,
        dedupe: bool,
    ) -> Decision {
        *self.posts.entry(client_id.to_owned()).or_default() += 1;
        if self.down {
            return Decision::Unavailable;
        }
        if let Some(fault) = self.script.pop_front() {
            match fault {
                Fault::Unavailable => return Decision::Unavailable,
                Fault::RateLimited => return Decision::RateLimited,
                Fault::ResetBefore => return Decision::Reset,
                Fault::Insufficient | Fault::NotWhitelisted | Fault::BadAddress => {
                    return Decision::Refused(fault);
                }
                Fault::HangAfterAccepting | Fault::ResetAfterAccepting => {
                    return self.make(
                        client_id,
                        network,
                        address,
                        (asked, fee_offered),
                        fault,
                        dedupe,
                    );
                }
            }
        }
        let roll: f64 = self.rng.r#gen();
        let odds = self.odds;
        if roll < odds.unavailable {
            return Decision::Unavailable;
        }
        if roll < odds.unavailable + odds.rate_limited {
            return Decision::RateLimited;
        }
        let fault = if roll < odds.unavailable + odds.rate_limited + odds.hang {
            Fault::HangAfterAccepting
        } else {
            Fault::Insufficient // not a fault here: `make` reads only the two above
        };
        self.make(
            client_id,
            network,
            address,
            (asked, fee_offered),
            fault,
            dedupe,
        )
    }

    fn make(
        &mut self,
        client_id: &str,
        network: &str,
        address: &str,
        (asked, fee_offered): (i64, Option<i64>),
        fault: Fault,
        dedupe: bool,
    ) -> Decision {
        if dedupe && let Some(m) = self.made.iter().find(|m| m.client_id == client_id) {
            return Decision::Repeated(m.id.clone());
        }
        let Some(terms) = self.terms.get(network).copied() else {
            return Decision::Terms(format!("network {network} is not supported"));
        };
        if !terms.enabled {
            return Decision::Terms(format!("withdrawals on {network} are suspended"));
        }
        if let Some(offered) = fee_offered
            && offered < terms.fee
        {
            return Decision::FeeTooLow(format!(
                "the fee offered, {offered} cents, is below the current fee of {} cents",
                terms.fee
            ));
        }
        if asked < terms.minimum {
            return Decision::Terms(format!("{asked} is under the minimum {}", terms.minimum));
        }
        if asked % terms.step != 0 {
            return Decision::Terms(format!("{asked} is not a multiple of {}", terms.step));
        }
        if let Some(list) = &self.whitelist
            && !list.contains(&address.to_ascii_lowercase())
        {
            return Decision::Refused(Fault::NotWhitelisted);
        }
        if asked > self.balance {
            return Decision::Refused(Fault::Insufficient);
        }
        self.balance -= asked;
        let id = format!("w{:08}", 1 + self.made.len());
        self.made.push(Made {
            client_id: client_id.to_owned(),
            id: id.clone(),
            asked,
            fee: terms.fee,
            network: network.to_owned(),
            address: address.to_owned(),
            at_ms: now_ms(),
        });
        Decision::Made {
            id,
            hang: fault == Fault::HangAfterAccepting,
        }
    }

    /// The withdrawals the history shows now, newest first, with whether each is on chain.
    pub(crate) fn history(&self) -> Vec<(Made, bool)> {
        let now = now_ms();
        let mut shown: Vec<(Made, bool)> = self
            .made
            .iter()
            .filter(|m| now - m.at_ms >= self.history_lag_ms)
            .map(|m| (m.clone(), now - m.at_ms >= self.settle_ms))
            .collect();
        shown.sort_by_key(|(m, _)| std::cmp::Reverse(m.at_ms));
        shown
    }

    /// The exchange's clock.
    pub(crate) fn clock_ms(&self) -> i64 {
        now_ms() + self.clock_skew_ms
    }
}

/// The account, shared by the stand-in's responders and the test.
#[derive(Clone)]
pub(crate) struct Shared(pub(crate) Arc<Mutex<Account>>);

impl Shared {
    pub(crate) fn new(account: Account) -> Shared {
        Shared(Arc::new(Mutex::new(account)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Account> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set(&self, change: impl FnOnce(&mut Account)) {
        change(&mut self.lock());
    }

    pub(crate) fn script(&self, faults: &[Fault]) {
        self.lock().script.extend(faults);
    }

    /// Withdrawals made under each client id (the exchange's form).
    pub(crate) fn made_per_client_id(&self) -> HashMap<String, Vec<Made>> {
        let mut out: HashMap<String, Vec<Made>> = HashMap::new();
        for m in &self.lock().made {
            out.entry(m.client_id.clone()).or_default().push(m.clone());
        }
        out
    }

    pub(crate) fn assert_signed(&self) {
        let bad = self.lock().bad_signatures.clone();
        assert!(bad.is_empty(), "badly signed requests: {bad:?}");
    }
}

/// `12.34` → 1234; an amount that is not whole cents is `None`.
pub(crate) fn cents_of(text: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 2 && fraction[2..].bytes().any(|b| b != b'0') {
        return None;
    }
    let two = format!("{:0<2}", &fraction[..fraction.len().min(2)]);
    Some(whole.parse::<i64>().ok()? * 100 + two.parse::<i64>().ok()?)
}

pub(crate) fn amount_of(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}
