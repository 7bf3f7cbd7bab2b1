//! JSON bodies parsed so that every invalid field is listed, not just the first.

use serde::de::DeserializeOwned;
use serde_json::Value;

use payroll_entities::MAX_MONEY_CENTS;

use crate::http::error::FieldError;

/// Deserializes `value` into `T`, failing with every invalid field.
pub fn parse_collecting<T: DeserializeOwned>(value: Value) -> Result<T, Vec<FieldError>> {
    match parse_partial(value) {
        (Some(parsed), errors) if errors.is_empty() => Ok(parsed),
        (_, errors) => Err(errors),
    }
}

/// Deserializes `value` into `T`; on a type error records it, removes the offending top-level
/// field and tries again. Returns what parsed without the bad fields (so that further checks
/// can run on the rest) and the type errors.
pub fn parse_partial<T: DeserializeOwned>(mut value: Value) -> (Option<T>, Vec<FieldError>) {
    integral_numbers_as_integers(&mut value);
    let mut errors = Vec::new();
    for _ in 0..64 {
        match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(parsed) => return (Some(parsed), errors),
            Err(err) => {
                let path = err.path().to_string();
                let path = if path == "." { String::new() } else { path };
                errors.push(FieldError::new(
                    &path,
                    describe_serde_error(&err.inner().to_string()),
                ));
                let top = err.path().iter().next().and_then(|seg| match seg {
                    serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                    _ => None,
                });
                let removed = match (top, value.as_object_mut()) {
                    (Some(key), Some(map)) => map.remove(&key).is_some(),
                    _ => false,
                };
                if !removed {
                    return (None, errors);
                }
            }
        }
    }
    (None, errors)
}

/// JSON Schema, and so the OpenAPI document, counts a number without a fractional part as an
/// integer (`125.0`, `1e2`); such numbers are read as the integers they are. Anything else
/// with a fraction stays a type error.
fn integral_numbers_as_integers(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer up to it is exact
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= EXACT
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_numbers_as_integers),
        _ => {}
    }
}

/// Adds `more` to `errors`, skipping fields that already have an error (or one inside them).
pub fn merge_errors(errors: &mut Vec<FieldError>, more: Vec<FieldError>) {
    for error in more {
        let covered = errors.iter().any(|e| {
            e.field == error.field
                || e.field
                    .strip_prefix(error.field.as_str())
                    .is_some_and(|rest| rest.starts_with('[') || rest.starts_with('.'))
        });
        if !covered {
            errors.push(error);
        }
    }
}

/// serde's messages, made plainer for people and agents.
fn describe_serde_error(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field ") {
        return format!("unknown field {rest}");
    }
    if message.contains("expected i64") || message.contains("expected u64") {
        return format!("{message} (a whole number of cents or a count)");
    }
    message.to_owned()
}

/// Query parameters, taken one by one so that unknown ones can be reported.
/// The error of a money input above the limit every one of them has (CONTRACT §1).
pub fn money_over_limit(field: impl Into<String>) -> FieldError {
    FieldError::new(
        field,
        format!("must be at most {MAX_MONEY_CENTS} cents ($1,000,000,000)"),
    )
}

/// Free text a client writes (names, emails, labels, notes, descriptions) as JSON Schema
/// states it: no control character (C0, DEL, C1), bidi control (U+202A–U+202E,
/// U+2066–U+2069) or line/paragraph separator (U+2028, U+2029) anywhere (CONTRACT §1).
pub const TEXT_PATTERN: &str =
    r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]*$";

/// Whether a character is refused in free text ([`TEXT_PATTERN`]): such a character can end
/// a header line, hide what a name says (bidi) or drive a terminal (ESC).
pub fn is_refused_in_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                // The bidi marks: LRM, RLM and the Arabic letter mark.
                | '\u{200E}'
                | '\u{200F}'
                | '\u{061C}'
        )
}

/// Why `value` is refused as free text, if it is.
pub fn text_problem(value: &str) -> Option<String> {
    let (at, c) = value
        .chars()
        .enumerate()
        .find(|(_, c)| is_refused_in_text(*c))?;
    Some(format!(
        "must not contain control characters, bidi controls or line separators (U+{:04X} at character {})",
        c as u32,
        at + 1
    ))
}

/// Checks optional free text: at most `max` characters, none refused ([`text_problem`]).
pub fn check_text(errors: &mut Vec<FieldError>, field: &str, value: Option<&str>, max: usize) {
    let Some(value) = value else { return };
    if value.chars().count() > max {
        errors.push(FieldError::new(field, format!("at most {max} characters")));
    } else if let Some(problem) = text_problem(value) {
        errors.push(FieldError::new(field, problem));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        amount: Option<i64>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: Option<String>,
        count: Option<i64>,
        items: Option<Vec<Item>>,
    }

    #[test]
    fn every_invalid_field_is_listed() {
        let value =
            serde_json::json!({"name": 1, "count": "x", "extra": true, "items": [{"amount": "y"}]});
        let errors = parse_collecting::<Body>(value).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields.len(), 4, "{errors:?}");
        for f in ["name", "count", "extra", "items[0].amount"] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn integral_numbers_are_integers_and_fractions_are_not() {
        let body: Body =
            parse_collecting(serde_json::json!({"count": 125.0, "items": [{"amount": 1e2}]}))
                .expect("integral");
        assert_eq!(body.count, Some(125));
        assert_eq!(body.items.expect("items")[0].amount, Some(100));
        let errors = parse_collecting::<Body>(serde_json::json!({"count": 1.5})).expect_err("1.5");
        assert_eq!(errors[0].field, "count");
    }

    #[test]
    fn valid_bodies_parse() {
        let body: Body = parse_collecting(serde_json::json!({"name": "a"})).expect("valid");
        assert_eq!(body.name.as_deref(), Some("a"));
    }
}
