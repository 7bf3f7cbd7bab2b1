//! The payout notification, as plain text. It carries only what the service itself computes
//! (amount, network, the wallet shortened, pay date, payout id) and the company's name from
//! configuration: never text a client wrote (a run's label, a note), so a key that can write a
//! label cannot write to every payee from the company's payroll address (CONTRACT §11).

use payroll_entities::{Cents, payout, payroll_run, time};

/// `0x5aAe…BeAed`: enough to recognise an address, not to copy it.
pub fn shorten_address(address: &str) -> String {
    let chars: Vec<char> = address.chars().collect();
    if chars.len() <= 12 {
        return address.to_owned();
    }
    let head: String = chars[..6].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}…{tail}")
}

/// Subject and body of a payout notification from `company` (`email.company_name`).
pub fn render_payout_email(
    p: &payout::Model,
    run: Option<&payroll_run::Model>,
    company: &str,
) -> (String, String) {
    let test = if p.is_test_run { "[Test] " } else { "" };
    let amount = Cents(p.amount_usd_cents).display_usd();
    let subject = format!(
        "{test}Your payout of {amount} {} from {company} is on its way",
        p.stablecoin
    );
    let pay_date = run
        .and_then(|r| r.pay_date)
        .map(|d| time::format(&d)[..10].to_owned())
        .unwrap_or_else(|| "as soon as it settles".into());
    let mut body = String::new();
    if p.is_test_run {
        body.push_str(
            "This is a test payout of a small amount, sent to check the payment path.\n\n",
        );
    }
    body.push_str(&format!(
        "Hello {name},\n\n\
         {company} has started a payout to your wallet.\n\n\
         Amount:   {amount} {coin}\n\
         Network:  {network}\n\
         Wallet:   {wallet}\n\
         Pay date: {pay_date}\n\
         Payout:   {id}\n\n\
         If the wallet above is not yours, reply to this email at once.\n",
        name = p.employee_name,
        coin = p.stablecoin,
        network = p.network,
        wallet = shorten_address(&p.wallet_address),
        id = p.id,
    ));
    (subject, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_email_carries_no_text_a_client_wrote() {
        let now = time::now();
        let payout = payout::Model {
            id: "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            payroll_run_id: "run_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            employee_id: "emp_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            employee_name: "Ada".into(),
            employee_email: "ada@example.com".into(),
            status: payroll_entities::PayoutStatus::Pending,
            amount_usd_cents: 123_456,
            fee_usd_cents: 0,
            test_run_deduction_usd_cents: 0,
            stablecoin: payroll_entities::Stablecoin::Usdc,
            network: payroll_entities::Network::Base,
            wallet_address: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".into(),
            attempt: 1,
            is_test_run: false,
            job_id: None,
            client_withdrawal_id: None,
            cex_withdrawal_id: None,
            on_chain_tx_hash: None,
            block_explorer_url: None,
            failed_reason: None,
            note: None,
            initiated_at: None,
            completed_at: None,
            stuck_since: None,
            send_count: 0,
            last_sent_at: None,
            unfound_lookups: 0,
            created_at: now,
            updated_at: now,
        };
        let (subject, body) = render_payout_email(&payout, None, "Acme");
        assert!(subject.contains("Acme"), "{subject}");
        assert!(body.contains("Acme has started a payout"), "{body}");
        assert!(!body.contains("Run:"), "{body}");
    }

    #[test]
    fn addresses_are_shortened() {
        assert_eq!(
            shorten_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"),
            "0x5aAe…eAed"
        );
        assert_eq!(shorten_address("short"), "short");
    }
}
