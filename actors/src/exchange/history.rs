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
            also: Vec::new(),
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

/// What the exchange knows of one client id from all the records it holds under it (an
/// exchange that does not refuse a repeated id may hold several). One record: its status.
/// Several: those that failed moved no money; if one other is left, it is the withdrawal; if
/// more are, money left more than once, and the first is reported with the others' ids in
/// [`Reported::also`], a mismatch that makes the payout stuck for an operator.
pub fn combine(statuses: Vec<RemoteStatus>) -> RemoteStatus {
    let mut seen = std::collections::HashSet::new();
    let statuses: Vec<RemoteStatus> = statuses
        .into_iter()
        .filter(|s| seen.insert(cex_id_of(s).to_owned()))
        .collect();
    let (failed, mut live): (Vec<RemoteStatus>, Vec<RemoteStatus>) = statuses
        .into_iter()
        .filter(|s| !matches!(s, RemoteStatus::Unknown))
        .partition(|s| matches!(s, RemoteStatus::Failed { .. }));
    if live.is_empty() {
        return failed.into_iter().next().unwrap_or(RemoteStatus::Unknown);
    }
    let others: Vec<String> = live
        .iter()
        .skip(1)
        .map(|s| cex_id_of(s).to_owned())
        .collect();
    let mut first = live.swap_remove(0);
    if let RemoteStatus::Pending { reported, .. } | RemoteStatus::Completed { reported, .. } =
        &mut first
    {
        reported.also = others;
    }
    first
}

fn cex_id_of(status: &RemoteStatus) -> &str {
    match status {
        RemoteStatus::Unknown => "",
        RemoteStatus::Pending { cex_id, .. }
        | RemoteStatus::Completed { cex_id, .. }
        | RemoteStatus::Failed { cex_id, .. } => cex_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(id: &str) -> RemoteStatus {
        RemoteStatus::Pending {
            cex_id: id.into(),
            reported: Reported::default(),
        }
    }

    fn failed(id: &str) -> RemoteStatus {
        RemoteStatus::Failed {
            cex_id: id.into(),
            reason: "cancelled".into(),
        }
    }

    #[test]
    fn several_withdrawals_under_one_id_are_never_taken_for_one() {
        assert_eq!(combine(vec![pending("a")]), pending("a"));
        // A failed one beside a live one: the live one is the withdrawal, never FAILED.
        assert_eq!(combine(vec![failed("a"), pending("b")]), pending("b"));
        assert_eq!(combine(vec![failed("a"), failed("b")]), failed("a"));
        // The same record read twice (paging) is one.
        assert_eq!(combine(vec![pending("a"), pending("a")]), pending("a"));
        // Two live ones: money left twice, reported for an operator.
        match combine(vec![pending("a"), failed("c"), pending("b")]) {
            RemoteStatus::Pending { cex_id, reported } => {
                assert_eq!(cex_id, "a");
                assert_eq!(reported.also, vec!["b".to_owned()]);
            }
            other => panic!("{other:?}"),
        }
    }
}
