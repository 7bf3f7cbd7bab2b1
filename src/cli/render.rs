//! How the CLI shows an answer's data as a table or as CSV (`-f table`, `-f csv`): money in
//! dollars, nothing that drives the terminal, CSV cells defused.

use serde_json::{Map, Value};

/// A column's heading: money fields, shown in dollars, are named so (`amount (USD)`), never
/// cents under a dollars figure.
fn heading(key: &str) -> String {
    if let Some(name) = key.strip_suffix("_usd_cents") {
        format!("{name} (USD)")
    } else if let Some(name) = key.strip_suffix("_usdc_cents") {
        format!("{name} (USDC)")
    } else {
        key.to_owned()
    }
}

/// A cell: money as dollars with two decimals, nested values as compact JSON.
fn cell(key: &str, value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => crate::text_out::for_terminal(s).into_owned(),
        Value::Number(n) if key.ends_with("_usd_cents") || key.ends_with("_usdc_cents") => n
            .as_i64()
            .map(|c| payroll_entities::Cents(c).display_usd())
            .unwrap_or_else(|| n.to_string()),
        other => crate::text_out::for_terminal(&other.to_string()).into_owned(),
    }
}

/// The columns shown for a list, by what its items look like.
fn columns(first: &Map<String, Value>) -> Vec<String> {
    let preferred: &[&str] = if first.contains_key("payroll_run_id") {
        &[
            "id",
            "employee_name",
            "status",
            "amount_usd_cents",
            "network",
            "wallet_address",
        ]
    } else if first.contains_key("period_start") {
        &[
            "id",
            "status",
            "type",
            "label",
            "employee_count",
            "total_amount_usd_cents",
            "created_at",
        ]
    } else if first.contains_key("wallet_address") {
        &[
            "id",
            "name",
            "email",
            "status",
            "salary_usd_cents",
            "network",
        ]
    } else if first.contains_key("occurred_at") {
        &[
            "occurred_at",
            "operation",
            "action",
            "status_code",
            "api_key_id",
            "resource_id",
        ]
    } else if first.contains_key("prefix") {
        &["id", "name", "prefix", "status", "scopes", "expires_at"]
    } else if first.contains_key("url") && first.contains_key("events") {
        &["id", "url", "status", "events", "description", "created_at"]
    } else if first.contains_key("attempts") && first.contains_key("event_type") {
        &[
            "id",
            "event_type",
            "status",
            "next_attempt_at",
            "last_error",
            "created_at",
        ]
    } else if first.contains_key("direction") {
        &[
            "id",
            "direction",
            "amount_usd_cents",
            "status",
            "created_at",
        ]
    } else {
        &[]
    };
    let cols: Vec<String> = preferred
        .iter()
        .filter(|c| first.contains_key(**c))
        .map(|c| c.to_string())
        .collect();
    if cols.is_empty() {
        first.keys().take(8).cloned().collect()
    } else {
        cols
    }
}

pub(super) fn render_table(data: &Value) -> String {
    match data {
        Value::Array(items) => {
            let Some(Value::Object(first)) = items.first() else {
                return "(none)\n".into();
            };
            let cols = columns(first);
            let rows: Vec<Vec<String>> = items
                .iter()
                .map(|item| cols.iter().map(|c| cell(c, &item[c.as_str()])).collect())
                .collect();
            let widths: Vec<usize> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    rows.iter()
                        .map(|r| r[i].chars().count())
                        .chain([c.len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: Vec<String>| {
                cells
                    .iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("{c:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_owned()
                    + "\n"
            };
            let mut out = line(cols.iter().map(|c| heading(c).to_uppercase()).collect());
            for row in rows {
                out.push_str(&line(row));
            }
            out
        }
        Value::Object(map) => {
            let width = map.keys().map(|k| heading(k).len()).max().unwrap_or(0);
            map.iter()
                .map(|(k, v)| format!("{:<width$}  {}\n", heading(k), cell(k, v)))
                .collect()
        }
        other => format!("{}\n", crate::text_out::for_terminal(&other.to_string())),
    }
}

pub(super) fn render_csv(data: &Value) -> String {
    let items = match data {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    let Some(Value::Object(first)) = items.first() else {
        return String::new();
    };
    let keys: Vec<String> = first.keys().cloned().collect();
    let mut writer = csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(&keys);
    for item in &items {
        let row: Vec<String> = keys
            .iter()
            .map(|k| match &item[k.as_str()] {
                Value::Null => String::new(),
                // As the server's CSV exports: never a formula to a spreadsheet.
                Value::String(s) => crate::text_out::csv_cell(s).into_owned(),
                other => other.to_string(),
            })
            .collect();
        let _ = writer.write_record(&row);
    }
    writer
        .into_inner()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_show_money_as_dollars() {
        let table = render_table(
            &json!([{"id": "run_1", "status": "DRAFT", "period_start": "x", "total_amount_usd_cents": 123456}]),
        );
        assert!(table.contains("TOTAL_AMOUNT (USD)"), "{table}");
        assert!(!table.contains("CENTS"), "{table}");
        assert!(table.contains("1234.56"), "{table}");
        let single = render_table(&json!({"sufficient": false, "deficit_usdc_cents": 5}));
        assert!(single.contains("deficit (USDC)  0.05"), "{single}");
        assert!(!single.contains("cents"), "{single}");
    }

    #[test]
    fn csv_lists_every_field() {
        let csv = render_csv(&json!([{"a": 1, "b": "x,y"}, {"a": 2, "b": null}]));
        assert_eq!(csv, "a,b\n1,\"x,y\"\n2,\n");
    }
}
