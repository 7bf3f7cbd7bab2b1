//! Every change of an employee's wallet or network, by any path (an update, an import), leaves
//! an audit entry of its own, `EMPLOYEE_WALLET_CHANGED`, with the address and network before and
//! after: the classic payroll fraud is a changed wallet, and it must be seen (CONTRACT §12,
//! §16 builds the hold on top of it).

use payroll_entities::{Network, audit_entry, bulk, db::WriteTx};
use sea_orm::{DbErr, IntoActiveModel};
use serde_json::json;

use crate::http::{
    audit::{AuditRecord, request_entry},
    request::ApiRequest,
};

/// One employee's wallet as it was and as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletChange {
    pub employee_id: String,
    pub network_before: Network,
    pub wallet_before: String,
    pub network_after: Network,
    pub wallet_after: String,
}

impl WalletChange {
    /// The change, if the wallet or the network differs.
    pub fn of(
        employee_id: &str,
        before: (Network, &str),
        after: (Network, &str),
    ) -> Option<WalletChange> {
        (before.0 != after.0 || before.1 != after.1).then(|| WalletChange {
            employee_id: employee_id.to_owned(),
            network_before: before.0,
            wallet_before: before.1.to_owned(),
            network_after: after.0,
            wallet_after: after.1.to_owned(),
        })
    }
}

/// Writes one `EMPLOYEE_WALLET_CHANGED` entry a change, in the request's transaction, as the
/// request's own (its key, request id and idempotency key), `via` the operation that made it.
pub async fn record(
    req: &ApiRequest,
    tx: &WriteTx,
    changes: &[WalletChange],
    via: &str,
) -> Result<(), DbErr> {
    if changes.is_empty() {
        return Ok(());
    }
    let facts = req.audit_facts(req.route.method.as_str(), &req.path);
    let entries: Vec<audit_entry::ActiveModel> = changes
        .iter()
        .map(|c| {
            let record = AuditRecord::new("EMPLOYEE_WALLET_CHANGED", "employee", &c.employee_id)
                .details(json!({
                    "via": via,
                    "network": {"before": c.network_before, "after": c.network_after},
                    "wallet_address": {"before": c.wallet_before, "after": c.wallet_after},
                }));
            request_entry(&facts, 200, Some(&record), json!({})).into_active_model()
        })
        .collect();
    bulk::insert_models(&**tx, entries).await.map(|_| ())
}
