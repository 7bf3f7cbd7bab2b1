//! Date input (CONTRACT §1): ISO 8601 extended date-times (an offset-less one is UTC) and plain
//! dates. A plain date is the start of that day, except where the field ends a period.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, SubsecRound, TimeZone, Utc};
use serde::{Deserialize, Deserializer};

/// The date-times without an offset that [`DateInput::parse`] takes (as UTC), for the OpenAPI
/// document beside `format: date-time` and `format: date`. Days 29 to 31 are left out so that
/// every string it matches is a real date.
pub const LOCAL_DATE_TIME_PATTERN: &str = r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]+)?)?$";

/// Which instant of a plain date's day is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayEdge {
    /// 00:00:00.000Z
    Start,
    /// 23:59:59.999Z
    End,
}

/// A date-time or plain date as the client sent it; resolved by the field that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateInput {
    Instant(DateTime<Utc>),
    Day(NaiveDate),
}

impl DateInput {
    pub fn resolve(self, edge: DayEdge) -> DateTime<Utc> {
        match self {
            DateInput::Instant(ts) => ts,
            DateInput::Day(day) => {
                let time = match edge {
                    DayEdge::Start => NaiveTime::MIN,
                    DayEdge::End => {
                        NaiveTime::from_hms_milli_opt(23, 59, 59, 999).unwrap_or(NaiveTime::MIN)
                    }
                };
                Utc.from_utc_datetime(&day.and_time(time))
            }
        }
    }

    pub fn parse(raw: &str) -> Result<DateInput, String> {
        let raw = raw.trim();
        four_digit_year(raw)?;
        if let Ok(day) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
            return Ok(DateInput::Day(day));
        }
        if let Ok(ts) = DateTime::parse_from_rfc3339(raw) {
            let utc = ts.with_timezone(&Utc);
            // An offset may carry the instant past the edge of the range (9999-12-31T23:30-01:00
            // is in the year 10000): the year that is stored is UTC's.
            if !(1..=9999).contains(&utc.year()) {
                return Err(format!(
                    "`{raw}` falls outside the years 0001 to 9999 in UTC (its offset moves it there)"
                ));
            }
            return Ok(DateInput::Instant(utc.trunc_subsecs(3)));
        }
        for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
            if let Ok(naive) = NaiveDateTime::parse_from_str(raw, format) {
                return Ok(DateInput::Instant(
                    Utc.from_utc_datetime(&naive).trunc_subsecs(3),
                ));
            }
        }
        Err(format!(
            "`{raw}` is not an ISO 8601 date-time (2026-03-01T00:00:00Z) or date (2026-03-01)"
        ))
    }
}

impl<'de> Deserialize<'de> for DateInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DateInput, D::Error> {
        let raw = String::deserialize(d)?;
        DateInput::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// Years are 0001–9999, four digits and no sign (CONTRACT §1): a wider year would compare
/// wrongly as text (SQLite keeps timestamps as text) and is no payroll date anyway.
fn four_digit_year(raw: &str) -> Result<(), String> {
    let bytes = raw.as_bytes();
    let four_digits =
        bytes.len() >= 5 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-';
    if four_digits && &raw[..4] != "0000" {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a date of a year from 0001 to 9999 (four digits, no sign), such as 2026-03-01",
            raw.chars().take(40).collect::<String>()
        ))
    }
}

/// Parses a date or date-time into an instant.
pub fn parse_instant(raw: &str, edge: DayEdge) -> Result<DateTime<Utc>, String> {
    DateInput::parse(raw).map(|d| d.resolve(edge))
}

/// A plain calendar date (`YYYY-MM-DD`), as employee contract dates are.
pub fn parse_day(raw: &str) -> Result<NaiveDate, String> {
    four_digit_year(raw.trim())?;
    NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d")
        .map_err(|_| format!("`{raw}` is not a date of the form 2026-03-01"))
}

/// Serde adapter for plain-date fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Day(pub NaiveDate);

impl<'de> Deserialize<'de> for Day {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Day, D::Error> {
        let raw = String::deserialize(d)?;
        parse_day(&raw).map(Day).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_are_four_digits_from_0001() {
        assert!(DateInput::parse("2026-03-01").is_ok());
        assert!(DateInput::parse("0001-01-01").is_ok());
        assert!(DateInput::parse("9999-12-31T23:59:59Z").is_ok());
        assert!(DateInput::parse("9999-12-31T23:30:00-01:00").is_err());
        assert!(DateInput::parse("0001-01-01T00:00:00+01:00").is_err());
        assert!(DateInput::parse("0001-01-01T00:00:00Z").is_ok());
        for bad in [
            "+10001-01-01",
            "10001-01-01",
            "0000-01-01",
            "-0001-01-01",
            "+2026-03-01",
            "226-03-01",
        ] {
            assert!(DateInput::parse(bad).is_err(), "{bad}");
            assert!(parse_day(bad).is_err(), "{bad}");
        }
    }
    use payroll_entities::time::format;

    #[test]
    fn plain_dates_take_the_day_edge() {
        let d = DateInput::parse("2026-03-31").expect("date");
        assert_eq!(
            format(&d.resolve(DayEdge::Start)),
            "2026-03-31T00:00:00.000Z"
        );
        assert_eq!(format(&d.resolve(DayEdge::End)), "2026-03-31T23:59:59.999Z");
    }

    #[test]
    fn date_times_with_and_without_offset() {
        let with = parse_instant("2026-03-01T02:00:00+02:00", DayEdge::Start).expect("offset");
        assert_eq!(format(&with), "2026-03-01T00:00:00.000Z");
        let without = parse_instant("2026-03-01T00:00:00", DayEdge::End).expect("no offset");
        assert_eq!(format(&without), "2026-03-01T00:00:00.000Z");
        let z = parse_instant("2026-03-01T00:00:00.123456Z", DayEdge::Start).expect("z");
        assert_eq!(format(&z), "2026-03-01T00:00:00.123Z");
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(DateInput::parse("yesterday").is_err());
        assert!(DateInput::parse("2026-02-30").is_err());
        assert!(DateInput::parse("").is_err());
    }
}
