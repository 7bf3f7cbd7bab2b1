//! Timestamps are UTC with millisecond precision, on the wire and in the database alike.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Now, truncated to milliseconds so that what is stored is exactly what is shown.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

/// RFC 3339 with milliseconds and a `Z`: `2026-03-01T00:00:00.000Z`.
pub fn format(ts: &DateTime<Utc>) -> String {
    // Written directly, with no format string to parse on every call.
    ts.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn formats_with_milliseconds_and_z() {
        let ts = Utc
            .with_ymd_and_hms(2026, 3, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        assert_eq!(format(&ts), "2026-03-01T00:00:00.000Z");
        let ts = ts + chrono::Duration::milliseconds(45_296_789);
        assert_eq!(format(&ts), "2026-03-01T12:34:56.789Z");
    }
}
