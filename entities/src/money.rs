//! Money is integer cents of USDC (1 USDC = 100 cents), never a float.

use serde::{Deserialize, Serialize};

/// The largest amount any money input may carry: 100,000,000,000 cents ($1,000,000,000), so
/// that sums of up to millions of them stay exact in 64 bits (CONTRACT §1).
pub const MAX_MONEY_CENTS: i64 = 100_000_000_000;

/// An amount in cents. Arithmetic is checked: an overflow is an error, never a wrap.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cents(pub i64);

impl std::fmt::Display for Cents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Cents {
    pub const ZERO: Cents = Cents(0);

    pub fn checked_add(self, other: Cents) -> Option<Cents> {
        self.0.checked_add(other.0).map(Cents)
    }

    pub fn checked_sub(self, other: Cents) -> Option<Cents> {
        self.0.checked_sub(other.0).map(Cents)
    }

    /// The sum of many amounts, or `None` on overflow.
    pub fn sum<I: IntoIterator<Item = Cents>>(items: I) -> Option<Cents> {
        items
            .into_iter()
            .try_fold(Cents::ZERO, |acc, c| acc.checked_add(c))
    }

    /// Dollars with two decimals, for people (tables, emails); JSON keeps cents.
    pub fn display_usd(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        format!("{sign}{}.{:02}", abs / 100, abs % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_read_as_usd() {
        assert_eq!(Cents(123_456).display_usd(), "1234.56");
        assert_eq!(Cents(5).display_usd(), "0.05");
        assert_eq!(Cents(-250).display_usd(), "-2.50");
    }

    #[test]
    fn sums_are_checked() {
        assert_eq!(Cents::sum([Cents(1), Cents(2)]), Some(Cents(3)));
        assert_eq!(Cents::sum([Cents(i64::MAX), Cents(1)]), None);
        assert_eq!(Cents::sum(std::iter::empty()), Some(Cents::ZERO));
    }

    #[test]
    fn display_has_two_decimals() {
        assert_eq!(Cents(123456).display_usd(), "1234.56");
        assert_eq!(Cents(5).display_usd(), "0.05");
        assert_eq!(Cents(-250).display_usd(), "-2.50");
    }
}
