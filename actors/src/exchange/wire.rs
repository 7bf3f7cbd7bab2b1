//! Forms an exchange's API takes that are not one exchange's own: our client withdrawal id in
//! a compact form of letters and digits (OKX's `clientId` allows "up to 32" case-sensitive
//! alphanumerics; Binance documents no form for `withdrawOrderId`, so the same one is used), and
//! USDC amounts as decimal strings.

use payroll_entities::Cents;

// ---------------------------------------------------------------------------------------------
// Client withdrawal ids

const PAYOUT_PREFIX: &str = "pay_";
const ULID_LEN: usize = 26;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Our client withdrawal id `pay_<ULID>-<attempt>` in a compact form (an OKX `clientId`, a Binance `withdrawOrderId`): the payout's 26-letter
/// ULID followed by the attempt in base 62 (`0-9A-Za-z`, no leading zeros). The ULID has a fixed
/// length, so the two parts never run together; an attempt up to 4,294,967,295 takes at most 6
/// characters, so the id is at most 32 letters and digits. `None` for an id of any other shape.
pub fn to_compact_client_id(ours: &str) -> Option<String> {
    let rest = ours.strip_prefix(PAYOUT_PREFIX)?;
    let (ulid, attempt) = rest.split_once('-')?;
    if !is_canonical_ulid(ulid) {
        return None;
    }
    let n: u32 = attempt.parse().ok()?;
    if n.to_string() != attempt {
        return None;
    }
    Some(format!("{ulid}{}", base62(n)))
}

/// The inverse of [`to_compact_client_id`]: `None` for anything it cannot have made.
pub fn from_compact_client_id(theirs: &str) -> Option<String> {
    if !theirs.is_ascii() || theirs.len() <= ULID_LEN {
        return None;
    }
    let (ulid, attempt) = theirs.split_at(ULID_LEN);
    if !is_canonical_ulid(ulid) {
        return None;
    }
    let n = from_base62(attempt)?;
    Some(format!("{PAYOUT_PREFIX}{ulid}-{n}"))
}

fn is_canonical_ulid(text: &str) -> bool {
    text.len() == ULID_LEN && ulid::Ulid::from_string(text).is_ok_and(|u| u.to_string() == text)
}

fn base62(mut n: u32) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(BASE62[(n % 62) as usize]);
        n /= 62;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

fn from_base62(text: &str) -> Option<u32> {
    if text.is_empty() || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    let mut n: u32 = 0;
    for c in text.bytes() {
        let digit = BASE62.iter().position(|d| *d == c)? as u32;
        n = n.checked_mul(62)?.checked_add(digit)?;
    }
    Some(n)
}

// ---------------------------------------------------------------------------------------------
// Amounts

/// How a USDC amount with more than two decimals becomes cents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Toward zero: for what we hold (never count money we do not have).
    Down,
    /// Away from zero: for what we pay (fees, minimums are never underestimated).
    Up,
}

/// Decimal places [`units`] keeps: Binance prints amounts with 8.
pub const UNIT_DECIMALS: u32 = 8;

/// A non-negative decimal string ("0.00500000", "12") in units of 10^-8 exactly, trailing
/// zeros beyond the eighth decimal allowed; `None` for anything else (more precision, not a
/// number).
pub fn units(text: &str) -> Option<i128> {
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, f.trim_end_matches('0')),
        None => (text, ""),
    };
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > UNIT_DECIMALS as usize
        || whole.len() > 20
    {
        return None;
    }
    let whole: i128 = whole.parse().ok()?;
    let fraction: i128 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<8}").parse().ok()?
    };
    whole
        .checked_mul(10_i128.pow(UNIT_DECIMALS))?
        .checked_add(fraction)
}

/// Units of 10^-8 in a cent.
pub const UNITS_PER_CENT: i128 = 1_000_000;

/// Cents as a USDC decimal string, as exchanges take it: 1234 → "12.34".
pub fn cents_to_amount(cents: Cents) -> String {
    cents.display_usd()
}

/// A non-negative USDC decimal string ("12", "12.3456") in cents, exactly, rounding the digits
/// beyond the second decimal as told. `None` for anything that is not such a number.
pub fn amount_to_cents(text: &str, rounding: Rounding) -> Option<Cents> {
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, f),
        None => (text, ""),
    };
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || (text.contains('.') && fraction.is_empty())
    {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let mut cents = whole.checked_mul(100)?;
    let mut kept = fraction.bytes().take(2).map(|b| i64::from(b - b'0'));
    cents = cents.checked_add(kept.next().unwrap_or(0) * 10)?;
    cents = cents.checked_add(kept.next().unwrap_or(0))?;
    let rest_nonzero = fraction.bytes().skip(2).any(|b| b != b'0');
    if rest_nonzero && rounding == Rounding::Up {
        cents = cents.checked_add(1)?;
    }
    Some(Cents(cents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_fit_32_letters_and_map_back_one_to_one() {
        let ulid = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        for attempt in [
            0u32,
            1,
            2,
            9,
            10,
            61,
            62,
            63,
            3843,
            3844,
            1_000_000,
            i32::MAX as u32,
            u32::MAX,
        ] {
            let ours = format!("pay_{ulid}-{attempt}");
            let theirs = to_compact_client_id(&ours).expect("mappable");
            assert!(theirs.len() <= 32, "{theirs} is too long");
            assert!(theirs.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(
                from_compact_client_id(&theirs).as_deref(),
                Some(ours.as_str())
            );
        }
        assert_eq!(
            to_compact_client_id(&format!("pay_{ulid}-1")).as_deref(),
            Some("01ARZ3NDEKTSV4RRFFQ69G5FAV1")
        );
        assert_eq!(
            to_compact_client_id(&format!("pay_{ulid}-62")).as_deref(),
            Some("01ARZ3NDEKTSV4RRFFQ69G5FAV10")
        );
        assert_eq!(
            to_compact_client_id(&format!("pay_{ulid}-{}", u32::MAX)).map(|s| s.len()),
            Some(32)
        );
    }

    #[test]
    fn distinct_attempts_never_share_a_compact_id() {
        let ulid = ulid::Ulid::new().to_string();
        let mut seen = std::collections::HashSet::new();
        for attempt in 0..10_000u32 {
            let theirs = to_compact_client_id(&format!("pay_{ulid}-{attempt}")).expect("mappable");
            assert!(seen.insert(theirs));
        }
    }

    #[test]
    fn ids_of_other_shapes_are_not_mapped() {
        for ours in [
            "pay_a-1",
            "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV-",
            "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV-01",
            "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV--1",
            "pay_01ARZ3NDEKTSV4RRFFQ69G5FAV-4294967296",
            "pay_01arz3ndektsv4rrffq69g5fav-1",
            "run_01ARZ3NDEKTSV4RRFFQ69G5FAV-1",
        ] {
            assert_eq!(to_compact_client_id(ours), None, "{ours}");
        }
        for theirs in [
            "",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV01",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV-1",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV5gfFC4",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV4gfFC3A",
            "01arz3ndektsv4rrffq69g5fav1",
        ] {
            assert_eq!(from_compact_client_id(theirs), None, "{theirs}");
        }
    }

    #[test]
    fn units_read_eight_decimals_exactly() {
        assert_eq!(units("0.01000000"), Some(UNITS_PER_CENT));
        assert_eq!(units("0.00000001"), Some(1));
        assert_eq!(units("12"), Some(1_200_000_000));
        assert_eq!(units("0.004"), Some(400_000));
        assert_eq!(units("0.000000001"), None);
        assert_eq!(units("0.0000000010"), None);
        assert_eq!(units("0.00000001000"), Some(1));
        for bad in ["", ".5", "-1", "1e3", "abc"] {
            assert_eq!(units(bad), None, "{bad}");
        }
    }

    #[test]
    fn amounts_convert_exactly() {
        assert_eq!(cents_to_amount(Cents(1234)), "12.34");
        assert_eq!(cents_to_amount(Cents(5)), "0.05");
        assert_eq!(cents_to_amount(Cents(100)), "1.00");
        assert_eq!(amount_to_cents("12.34", Rounding::Down), Some(Cents(1234)));
        assert_eq!(amount_to_cents("12", Rounding::Down), Some(Cents(1200)));
        assert_eq!(amount_to_cents("12.3", Rounding::Down), Some(Cents(1230)));
        assert_eq!(
            amount_to_cents("12.3456", Rounding::Down),
            Some(Cents(1234))
        );
        assert_eq!(amount_to_cents("12.3456", Rounding::Up), Some(Cents(1235)));
        assert_eq!(amount_to_cents("12.3400", Rounding::Up), Some(Cents(1234)));
        assert_eq!(amount_to_cents("0.000001", Rounding::Up), Some(Cents(1)));
        assert_eq!(amount_to_cents("0", Rounding::Up), Some(Cents(0)));
        assert_eq!(
            amount_to_cents("92233720368547758.07", Rounding::Down),
            Some(Cents(i64::MAX))
        );
        for bad in [
            "",
            ".5",
            "5.",
            "-1",
            "1e3",
            "1.2.3",
            " 1",
            "abc",
            "92233720368547758.08",
        ] {
            let rounded = if bad == "92233720368547758.08" {
                amount_to_cents(bad, Rounding::Down)
            } else {
                amount_to_cents(bad, Rounding::Up)
            };
            assert_eq!(rounded, None, "{bad}");
        }
    }
}
