//! One tracing subscriber for the process: `log.format` pretty or JSON, filtered by
//! `log.level` (or `RUST_LOG` when set), written to stderr.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

pub fn init(settings: &LogSettings) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(&settings.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match settings.format().unwrap_or(LogFormat::Pretty) {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
    // A second initialisation (tests) keeps the first subscriber.
    drop(result);
}
