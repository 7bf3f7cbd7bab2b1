//! `deploy/`: the Grafana dashboard and the Prometheus alerting rules name only series and labels
//! the service exports. A small batch is paid (one payout failing, an idempotent replay, a
//! refused request) and `/metrics` scraped while the run pays out; every metric, label and label
//! value the dashboard's and the rules' expressions name must be in that scrape. The JSON and the
//! YAML are read by their real formats, the rules into Prometheus's rule-file schema (unknown
//! keys refused); `promtool check rules` and `promtool test rules` run too where promtool is
//! installed (required in CI: `PAYROLL_REQUIRE_PROMTOOL=1`).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, evm_address, spawn_app_with},
    metrics::{Sample, scrape},
    process::output,
};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

// Prometheus's rule-file schema (rulefmt): groups of recording and alerting rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroups {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    interval: Option<String>,
    limit: Option<u64>,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    record: Option<String>,
    alert: Option<String>,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A Prometheus duration: one or more `<number><unit>` with units y, w, d, h, m, s, ms.
fn is_duration(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "y", "w", "d", "h", "m", "s"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(unit) = unit else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// One series selector of an expression: a metric and its label matchers.
#[derive(Debug, Clone, PartialEq)]
struct Selector {
    metric: String,
    /// (label, operator, value)
    matchers: Vec<(String, String, String)>,
}

/// What an expression names: its selectors and the labels of its `by`/`without`/`on`/
/// `ignoring`/`group_left`/`group_right` lists.
#[derive(Debug, Default)]
struct Named {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

/// PromQL's functions, aggregations and keywords used in `deploy/`: an identifier followed by
/// `(` is one of them, never a metric.
const FUNCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "deriv",
    "delta",
    "changes",
    "time",
    "histogram_quantile",
    "abs",
    "clamp_min",
    "clamp_max",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "topk",
    "bottomk",
    "vector",
    "scalar",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Reads the selectors and grouping labels out of a PromQL expression. Panics on what it cannot
/// read: a construct it does not know must be taught here, not skipped.
fn named(expr: &str) -> Named {
    let chars: Vec<char> = expr.chars().collect();
    let mut named = Named::default();
    let mut i = 0;
    let skip_space = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    let string = |i: &mut usize| -> String {
        let quote = chars[*i];
        *i += 1;
        let mut value = String::new();
        while *i < chars.len() && chars[*i] != quote {
            if chars[*i] == '\\' {
                *i += 1;
            }
            value.push(chars[*i]);
            *i += 1;
        }
        assert!(*i < chars.len(), "unterminated string in {expr}");
        *i += 1;
        value
    };
    let word = |i: &mut usize| -> String {
        let start = *i;
        while *i < chars.len()
            && (chars[*i].is_ascii_alphanumeric() || matches!(chars[*i], '_' | ':'))
        {
            *i += 1;
        }
        chars[start..*i].iter().collect()
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() || "()+-*/,^%<>=!".contains(c) {
            i += 1;
        } else if c == '[' {
            let end = chars[i..]
                .iter()
                .position(|c| *c == ']')
                .expect("closed range");
            let range: String = chars[i + 1..i + end].iter().collect();
            assert!(is_duration(&range), "bad range [{range}] in {expr}");
            i += end + 1;
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c == '"' || c == '\'' {
            string(&mut i);
        } else if c.is_ascii_alphabetic() || c == '_' {
            let ident = word(&mut i);
            let mut j = i;
            skip_space(&mut j);
            let next = chars.get(j).copied();
            if GROUPING.contains(&ident.as_str()) {
                if next == Some('(') {
                    let end = chars[j..]
                        .iter()
                        .position(|c| *c == ')')
                        .expect("closed list");
                    let list: String = chars[j + 1..j + end].iter().collect();
                    named.grouping.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_owned),
                    );
                    i = j + end + 1;
                }
            } else if KEYWORDS.contains(&ident.as_str()) {
            } else if FUNCTIONS.contains(&ident.as_str()) {
                // A function, or an aggregation whose `by (…)` may come before its `(`.
            } else if next == Some('(') {
                panic!("unknown function {ident} in {expr}");
            } else {
                assert!(is_metric_name(&ident), "bad metric {ident} in {expr}");
                let mut selector = Selector {
                    metric: ident,
                    matchers: Vec::new(),
                };
                if next == Some('{') {
                    i = j + 1;
                    loop {
                        skip_space(&mut i);
                        if chars[i] == '}' {
                            i += 1;
                            break;
                        }
                        let label = word(&mut i);
                        skip_space(&mut i);
                        let op: String = chars[i..]
                            .iter()
                            .take_while(|c| matches!(c, '=' | '!' | '~'))
                            .collect();
                        assert!(
                            ["=", "!=", "=~", "!~"].contains(&op.as_str()),
                            "bad matcher {label}{op} in {expr}"
                        );
                        i += op.len();
                        skip_space(&mut i);
                        let value = string(&mut i);
                        selector.matchers.push((label, op, value));
                        skip_space(&mut i);
                        if chars[i] == ',' {
                            i += 1;
                        }
                    }
                }
                named.selectors.push(selector);
            }
        } else if c == '$' {
            panic!("an unexpanded variable in {expr}");
        } else {
            panic!("unexpected {c:?} in {expr}");
        }
    }
    named
}

/// Labels Prometheus adds to every series it scrapes (target labels), not the service's own.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// The metric names and labels of a scrape: name -> label -> values seen.
type Exported = HashMap<String, BTreeMap<String, BTreeSet<String>>>;

fn exported(samples: &[Sample]) -> Exported {
    let mut out: Exported = HashMap::new();
    for s in samples {
        let labels = out.entry(s.name.clone()).or_default();
        for (k, v) in &s.labels {
            labels.entry(k.clone()).or_default().insert(v.clone());
        }
    }
    out
}

/// Every problem with what `expr` names, measured against the scrape; `legend` labels and
/// `$labels.x` references must be labels of its series too.
fn problems(source: &str, expr: &str, used_labels: &[String], exported: &Exported) -> Vec<String> {
    let named = named(expr);
    let mut found = Vec::new();
    assert!(!named.selectors.is_empty(), "{source}: no series in {expr}");
    let mut labels_of_expr: BTreeSet<String> =
        TARGET_LABELS.iter().map(|l| (*l).to_owned()).collect();
    for selector in &named.selectors {
        let Some(labels) = exported.get(&selector.metric) else {
            found.push(format!("{source}: {} is not exported", selector.metric));
            continue;
        };
        labels_of_expr.extend(labels.keys().cloned());
        for (label, op, value) in &selector.matchers {
            let Some(values) = labels.get(label) else {
                found.push(format!(
                    "{source}: {} has no label {label}",
                    selector.metric
                ));
                continue;
            };
            match op.as_str() {
                "=" if !values.contains(value) => found.push(format!(
                    "{source}: {}{{{label}}} is never {value:?} (seen: {values:?})",
                    selector.metric
                )),
                "=~" => {
                    let re = regex::Regex::new(&format!("^(?:{value})$")).expect("a regex");
                    // Literal alternatives must each be a value the label takes; a pattern
                    // must match one at least.
                    let literal = value
                        .split('|')
                        .all(|alt| alt.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                    if literal {
                        for alt in value.split('|') {
                            if !values.contains(alt) {
                                found.push(format!(
                                    "{source}: {}{{{label}}} is never {alt:?} (seen: {values:?})",
                                    selector.metric
                                ));
                            }
                        }
                    } else if !values.iter().any(|v| re.is_match(v)) {
                        found.push(format!(
                            "{source}: no value of {}{{{label}}} matches {value:?} (seen: {values:?})",
                            selector.metric
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    for label in named.grouping.iter().chain(used_labels) {
        if !labels_of_expr.contains(label) {
            found.push(format!(
                "{source}: label {label} is on none of the series of {expr}"
            ));
        }
    }
    found
}

/// `{{label}}` of a Grafana legend, `$labels.label` of an annotation.
fn referenced_labels(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in text.split("{{").skip(1) {
        let inner = part.split("}}").next().unwrap_or("").trim();
        if let Some(label) = inner.strip_prefix("$labels.") {
            out.push(label.split_whitespace().next().unwrap_or("").to_owned());
        } else if is_metric_name(inner) {
            out.push(inner.to_owned());
        }
    }
    out
}

/// Every panel of a dashboard, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// The GitHub anchors of a Markdown file's headings.
fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|title| {
            title
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// A small batch, scraped while it pays out: the run stays PAYING_OUT long enough (one
/// withdrawal a second, settled after 2 s), one payout fails at the exchange, one write is
/// replayed, one request is refused.
async fn scrape_a_batch_paying_out() -> (TestApp, Vec<Sample>) {
    let failing = evm_address("deploy-fails@example.com");
    let app = spawn_app_with(|s| {
        s.exchange.withdrawals_per_second = 1;
        s.exchange.burst = 1;
        s.exchange.sandbox.fail_addresses = vec![failing.clone()];
    })
    .await;
    for i in 0..4 {
        app.create_employee(
            &format!("Deploy {i}"),
            &format!("deploy{i}@example.com"),
            1000,
        )
        .await;
    }
    app.create_employee("Deploy fails", "deploy-fails@example.com", 1000)
        .await;
    app.fund(1_000_000).await;
    let body = json!({"period_start": "2026-04-01", "period_end": "2026-04-30", "label": "Deploy"});
    let run_id = app.deposited_run(body).await;
    // An idempotent replay and a refused request: their series exist from here on.
    let path = format!("/api/v1/payroll-runs/{run_id}/execute");
    let idempotency_key = uuid::Uuid::new_v4().to_string();
    for _ in 0..2 {
        let res = app
            .send(
                "POST",
                &path,
                Some(&app.key),
                Some(&idempotency_key),
                None,
                &[],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text);
    }
    let res = app.get("/api/v1/payroll-runs/run_nope").await;
    assert_eq!(res.status, 404, "{}", res.text);
    // Scrape while it pays, once a withdrawal has been answered.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let samples = loop {
        let (text, samples) = scrape(&app).await;
        let paying = samples.iter().any(|s| s.name == "payroll_run_payouts");
        let answered = samples
            .iter()
            .any(|s| s.name == "payroll_exchange_rate_limit_wait_seconds_bucket");
        if paying && answered {
            break samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run's series never appeared:\n{text}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    // One payout failed at the exchange: the run ends FAILED, its other payouts paid.
    app.wait_for_run(&run_id, 60, |r| r["status"] == "FAILED")
        .await;
    // After the run the per-run series are gone: nothing piles up.
    let (text, after) = scrape(&app).await;
    assert!(
        !after
            .iter()
            .any(|s| s.name == "payroll_run_payouts" && s.labels.get("run_id") == Some(&run_id)),
        "{text}"
    );
    (app, samples)
}

#[actix_web::test]
async fn the_dashboard_and_the_rules_name_only_exported_series() {
    let (_app, samples) = scrape_a_batch_paying_out().await;
    let exported = exported(&samples);
    let mut found = Vec::new();

    // The dashboard: Grafana's JSON model, every target an expression over exported series.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/payroll.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "payroll");
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let mut ids = BTreeSet::new();
    let mut exprs = 0;
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().expect("a panel title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("a panel id")),
            "{title}: id twice"
        );
        for key in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no target");
        for target in targets {
            let expr = target["expr"].as_str().expect("an expr");
            let expr = expr.replace("$__rate_interval", "5m");
            let legend = target["legendFormat"].as_str().unwrap_or("");
            found.extend(problems(
                &format!("dashboard {title:?}"),
                &expr,
                &referenced_labels(legend),
                &exported,
            ));
            exprs += 1;
        }
    }
    assert!(exprs >= 20, "{exprs} expressions");

    // The rules: Prometheus's rule-file schema, then every alert's expression.
    let rules_path = repo("deploy/prometheus/alerts.yml");
    let rules: RuleGroups =
        serde_norway::from_str(&std::fs::read_to_string(&rules_path).expect("rules"))
            .expect("alerts.yml is a Prometheus rule file");
    let operations = anchors(&std::fs::read_to_string(repo("docs/operations.md")).expect("docs"));
    let mut alerts = BTreeSet::new();
    for group in &rules.groups {
        assert!(!group.name.is_empty());
        assert!(group.interval.as_deref().is_none_or(is_duration));
        assert!(group.limit.is_none());
        for rule in &group.rules {
            let name = match (&rule.alert, &rule.record) {
                (Some(alert), None) => alert,
                other => panic!("a rule is either an alert or a record, here {other:?}"),
            };
            assert!(is_metric_name(name) && !name.contains(':'), "{name}");
            assert!(alerts.insert(name.clone()), "{name} twice");
            for duration in [&rule.for_, &rule.keep_firing_for].into_iter().flatten() {
                assert!(is_duration(duration), "{name}: for {duration}");
            }
            assert!(
                ["critical", "warning"].contains(&rule.labels["severity"].as_str()),
                "{name}: severity"
            );
            for key in ["summary", "description", "runbook_url"] {
                assert!(
                    rule.annotations
                        .get(key)
                        .is_some_and(|v| !v.trim().is_empty()),
                    "{name}: no {key}"
                );
            }
            let anchor = rule.annotations["runbook_url"]
                .strip_prefix("docs/operations.md#")
                .unwrap_or_else(|| panic!("{name}: the runbook is in docs/operations.md"));
            assert!(
                operations.contains(anchor),
                "{name}: no section #{anchor} in docs/operations.md"
            );
            let used: Vec<String> = rule
                .annotations
                .values()
                .flat_map(|v| referenced_labels(v))
                .collect();
            found.extend(problems(
                &format!("alert {name}"),
                &rule.expr,
                &used,
                &exported,
            ));
        }
    }
    let wanted: BTreeSet<String> = [
        "PayrollDatabaseDown",
        "PayrollRunNoProgress",
        "PayrollPayoutsStuck",
        "PayrollWebhookEndpointDisabled",
        "PayrollWithdrawalFailureRatio",
        "PayrollMailboxNearBound",
        "PayrollEmailBacklogGrowing",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(alerts, wanted);
    assert!(found.is_empty(), "{}", found.join("\n"));

    promtool(&rules_path).await;
}

/// `promtool check rules` and `promtool test rules` (the rules' unit tests), where promtool is
/// installed: `PAYROLL_PROMTOOL`, else on the PATH. Required when `PAYROLL_REQUIRE_PROMTOOL=1`.
async fn promtool(rules: &Path) {
    let promtool = std::env::var_os("PAYROLL_PROMTOOL")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join("promtool"))
                    .find(|p| p.is_file())
            })
        })
        .filter(|p| p.is_file());
    let Some(promtool) = promtool else {
        assert!(
            std::env::var("PAYROLL_REQUIRE_PROMTOOL").as_deref() != Ok("1"),
            "PAYROLL_REQUIRE_PROMTOOL=1 but promtool is not installed"
        );
        eprintln!("NOTICE: promtool is not installed; `promtool check rules` is skipped");
        return;
    };
    let tests = rules.with_file_name("alerts_test.yml");
    for args in [
        vec![
            "check".to_owned(),
            "rules".into(),
            rules.display().to_string(),
        ],
        vec![
            "test".to_owned(),
            "rules".into(),
            tests.display().to_string(),
        ],
    ] {
        let mut command = Command::new(&promtool);
        command.args(&args);
        let out = output(command).await;
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn expressions_are_read_into_selectors_and_labels() {
    let n = named(
        r#"histogram_quantile(0.99, sum by (le, route) (rate(payroll_http_request_duration_seconds_bucket{status=~"5..", method!="GET"}[5m]))) > 0.5 and on(instance) payroll_database_up == 1"#,
    );
    assert_eq!(
        n.selectors,
        vec![
            Selector {
                metric: "payroll_http_request_duration_seconds_bucket".into(),
                matchers: vec![
                    ("status".into(), "=~".into(), "5..".into()),
                    ("method".into(), "!=".into(), "GET".into()),
                ],
            },
            Selector {
                metric: "payroll_database_up".into(),
                matchers: vec![],
            },
        ]
    );
    assert_eq!(n.grouping, vec!["le", "route", "instance"]);
    assert!(is_duration("1h30m") && is_duration("15m") && !is_duration("5") && !is_duration("m"));
    assert_eq!(
        referenced_labels("{{run_id}} {{ $labels.actor }} {{ $value | humanize }}"),
        vec!["run_id", "actor"]
    );
    assert!(
        anchors("# A\n### PayrollDatabaseDown\n## Dashboard and alerts\n")
            .contains("dashboard-and-alerts")
    );
}
