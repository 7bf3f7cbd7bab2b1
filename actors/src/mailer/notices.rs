//! Wallet-change notices (CONTRACT §16): when an employee's wallet or network changes, the
//! employee is told at the address on file, through the outbox, in the transaction of the
//! change. The notice holds what it says (the payee's own name, the network, the new wallet
//! shortened, when): text no client wrote for others.

use chrono::{DateTime, Utc};
use payroll_entities::{EmailKind, EmailStatus, Network, bulk, email_outbox, ids, time};
use sea_orm::{ConnectionTrait, DbErr};
use serde::{Deserialize, Serialize};

use super::render::shorten_address;

/// One notice: to whom, and the wallet now on file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WalletNotice {
    pub employee_id: String,
    pub name: String,
    pub email: String,
    pub network: Network,
    pub wallet_address: String,
    pub changed_at: DateTime<Utc>,
}

/// Queues one notice per change in `conn`'s transaction.
pub async fn enqueue_wallet_notices<C: ConnectionTrait>(
    conn: &C,
    notices: &[WalletNotice],
) -> Result<(), DbErr> {
    if notices.is_empty() {
        return Ok(());
    }
    let now = time::now();
    let rows: Vec<email_outbox::ActiveModel> = notices
        .iter()
        .map(|n| {
            let id = ids::new_id(ids::IdKind::Email);
            sea_orm::IntoActiveModel::into_active_model(email_outbox::Model {
                message_id: format!("<{id}@payroll.local>"),
                id,
                payout_id: n.employee_id.clone(),
                payout_attempt: 0,
                status: EmailStatus::Pending,
                attempts: 0,
                next_attempt_at: now,
                last_error: None,
                created_at: now,
                sent_at: None,
                kind: EmailKind::WalletChanged,
                notice: serde_json::to_string(n).ok(),
            })
        })
        .collect();
    bulk::insert_models(conn, rows).await.map(|_| ())
}

/// Subject and body of a wallet-change notice from `company`.
pub fn render_wallet_notice(n: &WalletNotice, company: &str) -> (String, String) {
    let subject = format!("Your payout wallet at {company} was changed");
    let body = format!(
        "Hello {name},\n\n\
         The wallet your {company} payroll is paid to was changed on {at} UTC to:\n\n\
         \x20 {network} {wallet}\n\n\
         If this was you, there is nothing to do. If this was not you, tell your employer at \
         once: payouts to the new wallet are held for a while so that it can be stopped.\n",
        name = n.name,
        at = time::format(&n.changed_at),
        network = n.network,
        wallet = shorten_address(&n.wallet_address),
    );
    (subject, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_names_the_new_wallet_shortened_and_what_to_do() {
        let notice = WalletNotice {
            employee_id: "emp_1".into(),
            name: "Ada".into(),
            email: "ada@example.com".into(),
            network: Network::Base,
            wallet_address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".into(),
            changed_at: time::now(),
        };
        let (subject, body) = render_wallet_notice(&notice, "Acme");
        assert_eq!(subject, "Your payout wallet at Acme was changed");
        assert!(body.contains("BASE 0x5aAe…eAed"), "{body}");
        assert!(body.contains("If this was not you, tell your employer"));
        assert!(!body.contains("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"));
    }
}
