//! Every change of an employee's wallet or network, by any path (an update, an import), is
//! seen and held (CONTRACT §16): the classic payroll fraud is a changed wallet. In the change's
//! own transaction it leaves an audit entry of its own, `EMPLOYEE_WALLET_CHANGED`, with the
//! address and network before and after; an `employee.wallet_changed` event; a notice to the
//! employee at the address on file; and a hold on the employee's payouts at confirm for
//! `employees.wallet_change_hold_hours`, which another key lineage with `payroll:approve` may
//! lift early (`POST /employees/{employee_id}/wallet-approvals`).

use chrono::{DateTime, Duration, Utc};
use payroll_actors::{events, mailer::notices};
use payroll_entities::{Network, audit_entry, bulk, db::WriteTx, employee, time};
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter, sea_query::Expr};
use serde_json::json;

use super::input::EmployeeResource;

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

/// The hold a change made at `now` puts on the employee's payouts (none when the setting is 0).
pub fn hold_until(req: &ApiRequest, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let hours = req.state().settings.employees.wallet_change_hold_hours;
    (hours > 0).then(|| now + Duration::hours(hours as i64))
}

/// Changes whose rows are read back per statement.
const CHUNK: usize = 1000;

/// Records changes in the request's transaction, as the request's own (its key, request id and
/// idempotency key), `via` the operation that made it: the hold on each employee, one
/// `EMPLOYEE_WALLET_CHANGED` entry, one `employee.wallet_changed` event and one notice each.
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
    bulk::insert_models(&**tx, entries).await?;
    let now = time::now();
    let lineage = req.caller.as_ref().map(|c| c.key_lineage_id.clone());
    for chunk in changes.chunks(CHUNK) {
        let ids = chunk.iter().map(|c| c.employee_id.clone());
        employee::Entity::update_many()
            .col_expr(employee::Column::WalletChangedAt, Expr::value(now))
            .col_expr(
                employee::Column::WalletHoldUntil,
                Expr::value(hold_until(req, now)),
            )
            .col_expr(
                employee::Column::WalletChangedByLineageId,
                Expr::value(lineage.clone()),
            )
            .filter(bulk::one_of(
                tx.get_database_backend(),
                employee::Column::Id,
                ids.clone(),
            ))
            .exec(&**tx)
            .await?;
        let changed = employee::Entity::find()
            .filter(bulk::one_of(
                tx.get_database_backend(),
                employee::Column::Id,
                ids,
            ))
            .all(&**tx)
            .await?;
        let kinds: Vec<events::NewEvent> = changed
            .iter()
            .map(|e| {
                events::new_event("employee.wallet_changed", &e.id, &EmployeeResource::from(e))
            })
            .collect();
        events::insert_events(tx, kinds).await?;
        let notices: Vec<notices::WalletNotice> = changed
            .iter()
            .map(|e| notices::WalletNotice {
                employee_id: e.id.clone(),
                name: e.name.clone(),
                email: e.email.clone(),
                network: e.network,
                wallet_address: e.wallet_address.clone(),
                changed_at: now,
            })
            .collect();
        notices::enqueue_wallet_notices(&**tx, &notices).await?;
    }
    Ok(())
}
