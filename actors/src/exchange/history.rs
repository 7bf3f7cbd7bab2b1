//! What a REST exchange's withdrawal history says of one withdrawal, in our terms: the record's
//! fields as the exchange wrote them become what it [`Reported`] withdrawing (to be checked
//! against what was sent), and its state a [`RemoteStatus`].

use std::collections::HashMap;

use payroll_entities::{Cents, Network};

use super::{RemoteStatus, Reported, cut_exchange_text, explorer_link};

/// Where a withdrawal stands in an exchange's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClass {
    /// Waiting, under review, processing, being cancelled: not final yet.
    Pending,
    /// Done: on chain once it has a transaction id.
    Success,
    /// Failed, cancelled or rejected: the money is back on the account.
    Failed,
}

/// One history record as the exchange wrote it (an empty field: left out).
pub struct Record<'a> {
    pub cex_id: &'a str,
    pub currency: &'a str,
    /// What the payee receives, in cents, as the provider reads the record (`None`: no amount
    /// written; `Some(-1)`: an amount that is not whole cents).
    pub received: Option<Cents>,
    pub amount_text: &'a str,
    /// The exchange's name of the network.
    pub network: &'a str,
    pub address: &'a str,
    pub tx_id: &'a str,
    pub state: StateClass,
}

impl Record<'_> {
    /// The record in our terms; `networks` maps our networks to the exchange's names, and
    /// `failed` says why, for a record that failed.
    pub fn status(
        &self,
        networks: &HashMap<Network, String>,
        failed: impl FnOnce() -> String,
    ) -> RemoteStatus {
        let cex_id = cut_exchange_text(self.cex_id);
        let network = networks
            .iter()
            .find(|(_, name)| name.as_str() == self.network)
            .map(|(network, _)| *network);
        // A record of a withdrawal under our id says what it withdrew: one that leaves any of
        // it out completes nothing (a history that omits the amount cannot be checked).
        let missing: Vec<&'static str> = [
            ("currency", self.currency),
            ("amount", self.amount_text),
            ("network", self.network),
            ("address", self.address),
        ]
        .into_iter()
        .filter(|(_, value)| value.is_empty())
        .map(|(name, _)| name)
        .collect();
        let reported = Reported {
            missing,
            currency: (!self.currency.is_empty()).then(|| self.currency.to_owned()),
            amount: self.received,
            network,
            address: if !self.network.is_empty() && network.is_none() {
                // A network no network of ours maps to is no place we sent to.
                Some(format!(
                    "{} on the unconfigured network {}",
                    self.address, self.network
                ))
            } else {
                (!self.address.is_empty()).then(|| self.address.to_owned())
            },
        };
        match self.state {
            StateClass::Pending => RemoteStatus::Pending { cex_id, reported },
            StateClass::Success if self.tx_id.is_empty() => {
                RemoteStatus::Pending { cex_id, reported }
            }
            StateClass::Success => RemoteStatus::Completed {
                cex_id,
                explorer_url: network.and_then(|n| explorer_link(n, self.tx_id)),
                tx_hash: cut_exchange_text(self.tx_id),
                reported,
            },
            StateClass::Failed => RemoteStatus::Failed {
                cex_id,
                reason: cut_exchange_text(&failed()),
            },
        }
    }
}

/// An amount as exact cents: one that is not whole cents (or not a number) is no amount we
/// sent, and reads as -1 so that it never matches one.
pub fn exact_cents(amount: &str) -> Cents {
    use super::wire::{Rounding, amount_to_cents};
    match (
        amount_to_cents(amount, Rounding::Down),
        amount_to_cents(amount, Rounding::Up),
    ) {
        (Some(down), Some(up)) if down == up => down,
        _ => Cents(-1),
    }
}

/// Our client ids in their compact form (the exchange's), each mapped back to ours; an id
/// with no compact form was never sent and is unknown at once (in `out`).
pub fn compact_ids(
    client_ids: &[String],
    out: &mut HashMap<String, RemoteStatus>,
) -> HashMap<String, String> {
    let mut wanted = HashMap::with_capacity(client_ids.len());
    for id in client_ids {
        match super::wire::to_compact_client_id(id) {
            Some(theirs) => {
                wanted.insert(theirs, id.clone());
            }
            None => {
                out.insert(id.clone(), RemoteStatus::Unknown);
            }
        }
    }
    wanted
}
