//! The last hour on `/status`: a ring of samples taken every 10 s (360 of them) from the
//! same counters and gauges `/metrics` exports — the Prometheus text the recorder renders is
//! read back, so there is no second bookkeeping — and drawn as inline SVG charts by the
//! server (no script, nothing loaded from elsewhere: the page keeps its CSP).
//!
//! Each sample keeps only the figures drawn, already derived (rates from two consecutive
//! readings of a counter, a p99 from the latency histogram's buckets), in a few dozen numbers:
//! the ring is bounded by its length, whatever the traffic.

use std::{
    collections::{BTreeMap, VecDeque},
    fmt::Write as _,
    sync::Mutex,
    time::Duration,
};

use super::super::html::escape;

/// Samples kept: an hour of one every [`INTERVAL`].
pub const CAPACITY: usize = 360;
/// Time between samples.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// A chart: its title and unit.
pub struct Chart {
    pub title: &'static str,
    pub unit: &'static str,
}

const CHARTS: &[Chart] = &[
    Chart {
        title: "Withdrawals answered, by outcome",
        unit: "/s",
    },
    Chart {
        title: "Payouts settled",
        unit: "/min",
    },
    Chart {
        title: "Webhook deliveries, by outcome",
        unit: "/min",
    },
    Chart {
        title: "Email backlog",
        unit: "emails",
    },
    Chart {
        title: "HTTP requests",
        unit: "/s",
    },
    Chart {
        title: "HTTP latency p99",
        unit: "ms",
    },
    Chart {
        title: "Mailbox depth, by actor",
        unit: "messages",
    },
    Chart {
        title: "Database up",
        unit: "1 = up",
    },
];

/// Counter readings of one render: (metric name, label) → value summed over other labels.
type Readings = BTreeMap<(String, String), f64>;

/// One sample: when, and each chart's series values.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at_ms: i64,
    /// (chart index, series) → value.
    pub values: Vec<(u8, String, f64)>,
}

/// The ring, and the last readings rates are taken from.
#[derive(Default)]
pub struct History {
    samples: VecDeque<Sample>,
    last: Option<(i64, Readings)>,
}

static HISTORY: Mutex<History> = Mutex::new(History {
    samples: VecDeque::new(),
    last: None,
});

fn history() -> std::sync::MutexGuard<'static, History> {
    HISTORY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Parses the Prometheus text format into the readings the charts use: each series summed by
/// the one label a chart splits it on (`outcome`, `actor`, `le`), or in all.
pub fn readings(text: &str) -> Readings {
    let mut out = Readings::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let split_on = match name {
            "payroll_withdrawals_total"
            | "payroll_payouts_settled_total"
            | "payroll_webhook_deliveries_total" => "outcome",
            "payroll_actor_mailbox_depth" => "actor",
            "payroll_http_request_duration_seconds_bucket" => "le",
            "payroll_email_outbox_pending"
            | "payroll_database_up"
            | "payroll_http_requests_total" => "",
            _ => continue,
        };
        let label = if split_on.is_empty() {
            String::new()
        } else {
            label_value(labels, split_on).unwrap_or_default()
        };
        *out.entry((name.to_owned(), label)).or_default() += value;
    }
    out
}

/// The value of label `name` in `a="1",b="2"` (the recorder's own rendering: names are
/// identifiers, and the values these charts split on carry no quotes).
fn label_value(labels: &str, name: &str) -> Option<String> {
    let key = format!("{name}=\"");
    let mut from = 0;
    while let Some(at) = labels[from..].find(&key).map(|i| i + from) {
        if at == 0 || labels.as_bytes()[at - 1] == b',' {
            let start = at + key.len();
            let end = labels[start..].find('"')? + start;
            return Some(labels[start..end].to_owned());
        }
        from = at + key.len();
    }
    None
}

/// The figures of a sample from two readings `seconds` apart (counters as rates).
fn derive(before: &Readings, now: &Readings, seconds: f64) -> Vec<(u8, String, f64)> {
    let mut values = Vec::new();
    let rate = |key: &(String, String), per: f64| {
        let delta = now.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0);
        (delta.max(0.0) / seconds.max(0.001)) * per
    };
    for (key, _) in now.iter() {
        let (name, label) = (key.0.as_str(), key.1.clone());
        match name {
            "payroll_withdrawals_total" => values.push((0, label, rate(key, 1.0))),
            "payroll_payouts_settled_total" => values.push((1, label, rate(key, 60.0))),
            "payroll_webhook_deliveries_total" => values.push((2, label, rate(key, 60.0))),
            "payroll_email_outbox_pending" => values.push((3, "pending".into(), now[key])),
            "payroll_http_requests_total" => values.push((4, "requests".into(), rate(key, 1.0))),
            "payroll_actor_mailbox_depth" => values.push((6, label, now[key])),
            "payroll_database_up" => values.push((7, "up".into(), now[key])),
            _ => {}
        }
    }
    if let Some(p99) = p99_ms(before, now) {
        values.push((5, "p99".into(), p99));
    }
    values
}

/// The 99th percentile of the requests answered between two readings, in milliseconds, from
/// the latency histogram's cumulative buckets (the bound of the first bucket holding 99 %).
fn p99_ms(before: &Readings, now: &Readings) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = now
        .iter()
        .filter(|((name, _), _)| name == "payroll_http_request_duration_seconds_bucket")
        .filter_map(|(key, v)| {
            let bound = if key.1 == "+Inf" {
                f64::INFINITY
            } else {
                key.1.parse().ok()?
            };
            Some((bound, v - before.get(key).copied().unwrap_or(0.0)))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let (bound, _) = buckets.iter().find(|(_, count)| *count >= total * 0.99)?;
    Some(if bound.is_finite() {
        bound * 1000.0
    } else {
        60_000.0
    })
}

impl History {
    /// Takes one sample from the recorder's text at `at_ms`: the figures since the last one.
    pub fn push(&mut self, text: &str, at_ms: i64) {
        let now = readings(text);
        if let Some((before_ms, before)) = &self.last {
            let seconds = (at_ms - before_ms) as f64 / 1000.0;
            let values = derive(before, &now, seconds);
            if self.samples.len() == CAPACITY {
                self.samples.pop_front();
            }
            self.samples.push_back(Sample { at_ms, values });
        }
        self.last = Some((at_ms, now));
    }
}

/// Takes one sample of this process's figures.
pub fn record(text: &str, at_ms: i64) {
    history().push(text, at_ms);
}

/// Samples this process's figures every [`INTERVAL`], for as long as it runs.
pub async fn sample_every_interval(state: actix_web::web::Data<crate::state::AppState>) {
    let Some(handle) = crate::telemetry::metrics_handle() else {
        return;
    };
    loop {
        // No query of its own: a sample never holds a database connection (the email backlog,
        // kept in the database, is as the last `/metrics` scrape or `/status` view counted it).
        crate::routes::prometheus::refresh_in_process(&state);
        record(&handle.render(), chrono::Utc::now().timestamp_millis());
        actix_web::rt::time::sleep(INTERVAL).await;
    }
}

/// The samples, oldest first.
pub fn samples() -> Vec<Sample> {
    history().samples.iter().cloned().collect()
}

const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 90.0;
const LEFT: f64 = 44.0;
const TOP: f64 = 8.0;
const COLOURS: &[&str] = &[
    "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
];

/// Renders the charts of the last hour (`now_ms`: the right edge).
pub fn render(html: &mut String, samples: &[Sample], now_ms: i64) {
    html.push_str("<div class=\"charts\">");
    for (index, chart) in CHARTS.iter().enumerate() {
        let mut series: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
        for s in samples {
            for (c, name, v) in &s.values {
                if usize::from(*c) == index {
                    series.entry(name.as_str()).or_default().push((s.at_ms, *v));
                }
            }
        }
        let span_ms = (CAPACITY as i64) * INTERVAL.as_millis() as i64;
        let window = (now_ms - span_ms, now_ms, "−60 min");
        render_chart(html, chart, &series, window);
    }
    html.push_str("</div>");
}

/// One chart of `series` (name → (time, value) points) over `window` (start and end in Unix
/// ms, and the start's label; the end is "now"): axes, the top value, a line per series and
/// a legend with each one's current value.
pub fn render_chart(
    html: &mut String,
    chart: &Chart,
    series: &BTreeMap<&str, Vec<(i64, f64)>>,
    (start_ms, now_ms, start_label): (i64, i64, &str),
) {
    let top = series
        .values()
        .flatten()
        .map(|(_, v)| *v)
        .fold(0.0_f64, f64::max);
    let top = if top <= 0.0 { 1.0 } else { top };
    let span_ms = (now_ms - start_ms).max(1);
    let x =
        |at: i64| LEFT + WIDTH * (1.0 - ((now_ms - at) as f64 / span_ms as f64).clamp(0.0, 1.0));
    let y = |v: f64| TOP + HEIGHT * (1.0 - (v / top).clamp(0.0, 1.0));
    let _ = write!(
        html,
        "<figure class=\"chart\"><figcaption>{} <span class=\"muted\">({})</span></figcaption>\
         <svg role=\"img\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>",
        escape(chart.title),
        escape(chart.unit),
        escape(chart.title),
        w = LEFT + WIDTH + 8.0,
        h = TOP + HEIGHT + 22.0,
    );
    // Axes, the top value and the time marks.
    let _ = write!(
        html,
        "<g stroke=\"#999\" stroke-width=\"1\"><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\"/>\
         <line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\"/></g>\
         <g font-size=\"10\" fill=\"#555\"><text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{}</text>\
         <text x=\"{tx}\" y=\"{b}\" text-anchor=\"end\">0</text>\
         <text x=\"{LEFT}\" y=\"{m}\">{}</text><text x=\"{r}\" y=\"{m}\" text-anchor=\"end\">now</text></g>",
        number(top),
        escape(start_label),
        b = TOP + HEIGHT,
        r = LEFT + WIDTH,
        tx = LEFT - 4.0,
        ty = TOP + 8.0,
        m = TOP + HEIGHT + 14.0,
    );
    let mut legend = String::new();
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(at, v)| format!("{:.1},{:.1}", x(*at), y(*v)))
            .collect();
        let _ = write!(
            html,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
            path.join(" "),
            escape(name)
        );
        let current = points.last().map(|(_, v)| *v).unwrap_or(0.0);
        let _ = write!(
            legend,
            "<span class=\"key\"><svg width=\"8\" height=\"8\" aria-hidden=\"true\"><rect width=\"8\" height=\"8\" fill=\"{colour}\"/></svg> {}: {} {}</span> ",
            escape(name),
            number(current),
            escape(chart.unit)
        );
    }
    if series.is_empty() {
        legend.push_str("<span class=\"muted\">no data yet</span>");
    }
    let _ = write!(html, "</svg><div class=\"legend\">{legend}</div></figure>");
}

/// A value as a chart labels it: whole when it is whole or above 10, two decimals below.
fn number(v: f64) -> String {
    if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE payroll_withdrawals_total counter\n\
        payroll_withdrawals_total{outcome=\"accepted\"} 10\n\
        payroll_withdrawals_total{outcome=\"rejected\"} 1\n\
        payroll_actor_mailbox_depth{actor=\"run\"} 3\n\
        payroll_actor_mailbox_depth{actor=\"exchange\"} 1\n\
        payroll_http_requests_total{method=\"GET\",route=\"/a\",status=\"200\"} 5\n\
        payroll_http_requests_total{method=\"POST\",route=\"/b\",status=\"201\"} 5\n\
        payroll_http_request_duration_seconds_bucket{method=\"GET\",route=\"/a\",le=\"0.01\"} 5\n\
        payroll_http_request_duration_seconds_bucket{method=\"GET\",route=\"/a\",le=\"+Inf\"} 10\n\
        payroll_database_up 1\n\
        payroll_something_else 7\n";

    #[test]
    fn readings_sum_series_by_the_label_a_chart_splits_on() {
        let r = readings(TEXT);
        assert_eq!(
            r[&("payroll_withdrawals_total".into(), "accepted".into())],
            10.0
        );
        assert_eq!(
            r[&("payroll_http_requests_total".into(), String::new())],
            10.0
        );
        assert_eq!(
            r[&("payroll_actor_mailbox_depth".into(), "run".into())],
            3.0
        );
        assert!(!r.keys().any(|(n, _)| n == "payroll_something_else"));
    }

    #[test]
    fn rates_and_p99_come_from_two_readings() {
        let before = readings(
            "payroll_withdrawals_total{outcome=\"accepted\"} 10\n\
            payroll_http_request_duration_seconds_bucket{le=\"0.01\"} 0\n\
            payroll_http_request_duration_seconds_bucket{le=\"0.1\"} 0\n\
            payroll_http_request_duration_seconds_bucket{le=\"+Inf\"} 0\n",
        );
        let now = readings(
            "payroll_withdrawals_total{outcome=\"accepted\"} 70\n\
            payroll_http_request_duration_seconds_bucket{le=\"0.01\"} 98\n\
            payroll_http_request_duration_seconds_bucket{le=\"0.1\"} 100\n\
            payroll_http_request_duration_seconds_bucket{le=\"+Inf\"} 100\n",
        );
        let values = derive(&before, &now, 10.0);
        assert!(values.contains(&(0, "accepted".into(), 6.0)), "{values:?}");
        assert!(values.contains(&(5, "p99".into(), 100.0)), "{values:?}");
    }

    #[test]
    fn the_ring_keeps_an_hour() {
        let mut h = History::default();
        for i in 0..(CAPACITY as i64 + 10) {
            h.push(
                &format!(
                    "payroll_database_up 1\npayroll_withdrawals_total{{outcome=\"accepted\"}} {}\n",
                    i * 20
                ),
                i * 10_000,
            );
        }
        assert_eq!(h.samples.len(), CAPACITY);
        let last = h.samples.back().expect("a sample");
        assert!(
            last.values.contains(&(0, "accepted".into(), 2.0)),
            "{:?}",
            last.values
        );
        assert!(last.values.contains(&(7, "up".into(), 1.0)));
    }

    /// Heap and inline bytes of a full ring, with every series a busy process has: 4 withdrawal
    /// outcomes, 2 payout outcomes, 3 delivery outcomes, 8 actor kinds and the 5 single
    /// figures. Printed as a measurement; the bound only catches a runaway.
    #[test]
    fn a_full_ring_stays_small() {
        let mut text = String::from("payroll_database_up 1\npayroll_email_outbox_pending 3\n");
        for outcome in ["accepted", "rejected", "rate_limited", "ambiguous"] {
            text.push_str(&format!(
                "payroll_withdrawals_total{{outcome=\"{outcome}\"}} 1\n"
            ));
        }
        for outcome in ["completed", "failed"] {
            text.push_str(&format!(
                "payroll_payouts_settled_total{{outcome=\"{outcome}\"}} 1\n"
            ));
        }
        for outcome in ["delivered", "retrying", "failed"] {
            text.push_str(&format!(
                "payroll_webhook_deliveries_total{{outcome=\"{outcome}\"}} 1\n"
            ));
        }
        for actor in [
            "run",
            "run_manager",
            "exchange",
            "mailer",
            "webhook_dispatcher",
            "webhook_supervisor",
            "audit",
            "retention",
        ] {
            text.push_str(&format!(
                "payroll_actor_mailbox_depth{{actor=\"{actor}\"}} 1\n"
            ));
        }
        text.push_str("payroll_http_requests_total{route=\"/a\"} 1\n");
        text.push_str("payroll_http_request_duration_seconds_bucket{le=\"0.01\"} 1\n");
        text.push_str("payroll_http_request_duration_seconds_bucket{le=\"+Inf\"} 1\n");
        let mut h = History::default();
        for i in 0..=(CAPACITY as i64) {
            h.push(&text, i * 10_000);
        }
        let bytes: usize = h
            .samples
            .iter()
            .map(|s| {
                std::mem::size_of::<Sample>()
                    + s.values.capacity() * std::mem::size_of::<(u8, String, f64)>()
                    + s.values.iter().map(|(_, n, _)| n.capacity()).sum::<usize>()
            })
            .sum();
        eprintln!(
            "history ring: {} samples, {} series each, {bytes} bytes",
            h.samples.len(),
            h.samples[0].values.len()
        );
        assert_eq!(h.samples.len(), CAPACITY);
        assert!(bytes < 2 << 20, "{bytes} bytes");
    }

    #[test]
    fn charts_draw_a_line_per_series() {
        let samples: Vec<Sample> = (0..CAPACITY as i64 + 5)
            .map(|i| Sample {
                at_ms: i * 10_000,
                values: vec![
                    (0, "accepted".into(), i as f64),
                    (0, "rejected".into(), 1.0),
                ],
            })
            .collect();
        let mut html = String::new();
        render(&mut html, &samples, (CAPACITY as i64 + 4) * 10_000);
        assert_eq!(html.matches("<svg role=\"img\"").count(), CHARTS.len());
        assert_eq!(html.matches("<polyline class=\"series\"").count(), 2);
        assert!(html.contains("accepted: 364 /s"), "{html}");
        assert!(!html.contains("<script"));
        assert!(html.contains("no data yet"));
    }
}
