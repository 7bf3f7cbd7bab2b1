//! What a payout can be paid with now, as confirm and retry judge it: the exchange's current
//! fee and minimum per network, and the hold on a payee's recently changed wallet (CONTRACT
//! §6, §7, §16).

use payroll_entities::{Network, time};
use std::collections::HashMap;

use super::{deps::RunDeps, messages::RunError};
use crate::{
    exchange::{Quote, actor::QuoteFees},
    telemetry::CountedSend,
};

/// The exchange's current fee and minimum of every network it can withdraw to now.
pub(super) async fn quote_fees(deps: &RunDeps) -> Result<HashMap<Network, Quote>, RunError> {
    deps.exchange
        .counted_send(QuoteFees(Network::ALL.to_vec()))
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))?
        .map_err(RunError::from)
}

/// The refusal of payout `payout_id` while its employee's changed wallet is held (CONTRACT
/// §16): `payouts[pay_…].wallet`, saying until when and who may lift it.
pub(super) fn wallet_held(
    e: &payroll_entities::employee::Model,
    payout_id: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<(String, String)> {
    let until = e.wallet_hold_until.filter(|until| *until > now)?;
    Some((
        format!("payouts[{payout_id}].wallet"),
        format!(
            "wallet recently changed; held until {} (another key lineage with payroll:approve may lift the hold: POST /api/v1/employees/{}/wallet-approvals)",
            time::format(&until),
            e.id
        ),
    ))
}
