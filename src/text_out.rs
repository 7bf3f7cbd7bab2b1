//! Text written where other programs read it (CONTRACT §1): a CSV cell a spreadsheet shows as
//! text and never runs as a formula, and a table cell that never drives a terminal. The server's
//! CSV exports and the CLI's CSV and table output go through here.

use std::borrow::Cow;

/// Whether a spreadsheet would run a cell starting with `c` as a formula: `= + - @` and their
/// full-width forms, tab and carriage return.
fn starts_a_formula(c: char) -> bool {
    matches!(
        c,
        '=' | '+' | '-' | '@' | '\t' | '\r' | '\u{FF1D}' | '\u{FF0B}' | '\u{FF0D}' | '\u{FF20}'
    )
}

/// Free text as a CSV cell: one a spreadsheet would run as a formula starts with `'`.
pub fn csv_cell(value: &str) -> Cow<'_, str> {
    if value.starts_with(starts_a_formula) {
        Cow::Owned(format!("'{value}"))
    } else {
        Cow::Borrowed(value)
    }
}

/// Text for a terminal: every control character (C0, DEL, C1: ESC among them), bidi control
/// and line separator shown as `\u{…}`, so what a value holds is seen and never acted on.
pub fn for_terminal(value: &str) -> Cow<'_, str> {
    if !value.contains(crate::http::body::is_refused_in_text) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(
        value
            .chars()
            .map(|c| {
                if crate::http::body::is_refused_in_text(c) {
                    format!("\\u{{{:04x}}}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_are_defused_full_width_forms_too() {
        for formula in [
            "=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "＝1+1", "＋1", "－1", "＠x",
        ] {
            assert_eq!(csv_cell(formula), format!("'{formula}"), "{formula:?}");
        }
        assert_eq!(csv_cell("Ada"), "Ada");
    }

    #[test]
    fn terminals_see_control_characters_and_are_not_driven_by_them() {
        assert_eq!(for_terminal("Ada"), "Ada");
        assert_eq!(for_terminal("a\u{1b}[31mb"), "a\\u{001b}[31mb");
        assert_eq!(for_terminal("x\u{0}y\u{202e}z"), "x\\u{0000}y\\u{202e}z");
    }
}
