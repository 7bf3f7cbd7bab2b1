//! The payout notification, as plain text.

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

/// Subject and body of a payout notification.
pub fn render_payout_email(
    p: &payout::Model,
    run: Option<&payroll_run::Model>,
) -> (String, String) {
    let test = if p.is_test_run { "[Test] " } else { "" };
    let amount = Cents(p.amount_usd_cents).display_usd();
    let subject = format!(
        "{test}Your payout of {amount} {} is on its way",
        p.stablecoin
    );
    let label = run
        .and_then(|r| r.label.clone())
        .unwrap_or_else(|| "Payroll".into());
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
         A payout to your wallet has been started.\n\n\
         Amount:   {amount} {coin}\n\
         Network:  {network}\n\
         Wallet:   {wallet}\n\
         Run:      {label}\n\
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
    fn addresses_are_shortened() {
        assert_eq!(
            shorten_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"),
            "0x5aAe…eAed"
        );
        assert_eq!(shorten_address("short"), "short");
    }
}
