//! Which employees a run pays and how much: pure rules of CONTRACT §8 and §9.

use chrono::{DateTime, NaiveDate, Utc};
use payroll_entities::{EmployeeStatus, employee};

/// Whether an employee's contract dates, where set, overlap the period.
pub fn contract_overlaps(
    start: Option<NaiveDate>,
    end: Option<NaiveDate>,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
) -> bool {
    let starts_in_time = start.is_none_or(|s| s <= period_end.date_naive());
    let ends_in_time = end.is_none_or(|e| e >= period_start.date_naive());
    starts_in_time && ends_in_time
}

/// Whether a regular run without `employee_ids` pays this employee.
pub fn paid_by_default(
    employee: &employee::Model,
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
) -> bool {
    employee.status == EmployeeStatus::Active
        && employee.salary_usd_cents > 0
        && contract_overlaps(
            employee.contract_start_date,
            employee.contract_end_date,
            period_start,
            period_end,
        )
}

/// The amount of a test-run payout: small, never more than the real one.
pub fn test_run_amount(normal: i64, cap: i64) -> i64 {
    normal.min(cap)
}

/// Whether two periods share an instant (end points included).
pub fn periods_overlap(
    a: (DateTime<Utc>, DateTime<Utc>),
    b: (DateTime<Utc>, DateTime<Utc>),
) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, 0, 0, 0)
            .single()
            .expect("valid")
    }

    fn day(y: i32, m: u32, d: u32) -> Option<NaiveDate> {
        NaiveDate::from_ymd_opt(y, m, d)
    }

    #[test]
    fn contract_dates_must_overlap_the_period() {
        let (s, e) = (at(2026, 3, 1), at(2026, 3, 31));
        assert!(contract_overlaps(None, None, s, e));
        assert!(contract_overlaps(day(2026, 3, 31), None, s, e));
        assert!(!contract_overlaps(day(2026, 4, 1), None, s, e));
        assert!(contract_overlaps(None, day(2026, 3, 1), s, e));
        assert!(!contract_overlaps(None, day(2026, 2, 28), s, e));
    }

    #[test]
    fn test_amounts_are_capped() {
        assert_eq!(test_run_amount(500_000, 100), 100);
        assert_eq!(test_run_amount(50, 100), 50);
    }

    #[test]
    fn adjacent_periods_do_not_overlap() {
        let march = (
            at(2026, 3, 1),
            at(2026, 3, 31) + chrono::Duration::milliseconds(86_399_999),
        );
        let april = (at(2026, 4, 1), at(2026, 4, 30));
        assert!(!periods_overlap(march, april));
        assert!(periods_overlap(march, (at(2026, 3, 15), at(2026, 4, 15))));
        assert!(periods_overlap((at(2026, 3, 10), at(2026, 3, 12)), march));
    }
}
