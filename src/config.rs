//! Typed configuration (CONTRACT §13): compiled-in defaults, then `config/{PAYROLL_ENV}.toml`,
//! then `--config FILE`, then `PAYROLL__SECTION__KEY` environment variables. Validated once at
//! start; secrets never appear in `Debug` output.

use std::path::{Path, PathBuf};

use config::{Config, Environment, File, FileFormat};
pub use payroll_actors::settings::{
    EmailSettings, ExchangeSettings, OkxSettings, RunsSettings, SandboxSettings, SmtpSettings,
    TestRunSettings,
};
pub use payroll_actors::webhook::settings::WebhookSettings;
use serde::Deserialize;

const DEFAULTS: &str = include_str!("../config/default.toml");

mod agents;
mod exchange;
mod secrets;
pub use agents::{AgentSessionSettings, ApprovalSettings, EmployeeSettings};
pub use secrets::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub data: DataSettings,
    pub database: DatabaseSettings,
    pub log: LogSettings,
    pub auth: AuthSettings,
    pub idempotency: IdempotencySettings,
    pub api: ApiSettings,
    pub audit: AuditSettings,
    pub runs: RunsSettings,
    pub exchange: ExchangeSettings,
    pub webhooks: WebhookSettings,
    pub email: EmailSettings,
    pub test_run: TestRunSettings,
    pub employees: EmployeeSettings,
    pub approvals: ApprovalSettings,
    pub agent_sessions: AgentSessionSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    /// `GET /status` without an API key.
    pub status_page_public: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSettings {
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// May carry a password, so it is a secret; empty means the embedded SQLite file.
    pub url: Secret,
    pub max_connections: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// `pretty` or `json`; see [`LogSettings::format`].
    pub format: String,
    pub level: String,
}

impl LogSettings {
    pub fn format(&self) -> Option<LogFormat> {
        match self.format.as_str() {
            "pretty" => Some(LogFormat::Pretty),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    pub bootstrap_key: bool,
    pub rotation_grace_seconds: u64,
    pub key_pepper: Secret,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencySettings {
    pub retention_seconds: u64,
    pub lock_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSettings {
    pub rate_limit_per_second: u32,
    pub rate_limit_burst: u32,
    pub max_body_bytes: usize,
    pub max_import_bytes: usize,
    pub max_import_rows: usize,
    /// A request's whole body must arrive within this long of its head (else 408).
    pub body_read_timeout_ms: u64,
    /// Imports this instance runs at once; another meanwhile → 429 with `Retry-After`.
    pub max_concurrent_imports: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    pub flush_interval_ms: u64,
    /// Longer paths are stored cut, with `path_truncated: true`.
    pub path_max_chars: usize,
    /// Refusals without a usable key stored per peer address and second; beyond, counted only.
    pub unauthenticated_per_second: u32,
}

/// A configuration problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(String);

impl Settings {
    /// Loads the layered configuration. `config_file` is `--config FILE`.
    pub fn load(config_file: Option<&Path>) -> Result<Settings, ConfigError> {
        let mut builder = Config::builder().add_source(File::from_str(DEFAULTS, FileFormat::Toml));
        if let Ok(env) = std::env::var("PAYROLL_ENV")
            && !env.is_empty()
        {
            builder = builder.add_source(File::with_name(&format!("config/{env}")).required(false));
        }
        if let Some(path) = config_file {
            if !path.exists() {
                return Err(ConfigError(format!(
                    "--config {}: no such file",
                    path.display()
                )));
            }
            builder = builder.add_source(File::from(path).required(true));
        }
        // Secrets in a file would end up in backups and version control.
        let files = builder
            .clone()
            .build()
            .map_err(|e| ConfigError(e.to_string()))?;
        secrets::refuse_in_files(&files).map_err(ConfigError)?;
        builder = builder.add_source(
            Environment::with_prefix("PAYROLL")
                .prefix_separator("__")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("exchange.sandbox.fail_addresses")
                .with_list_parse_key("webhooks.retry_schedule_ms")
                .try_parsing(true),
        );
        let settings: Settings = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Each setting in force that makes the service less safe, as the line a WARN says at start
    /// (CONTRACT §13).
    pub fn unsafe_settings(&self) -> Vec<&'static str> {
        let mut unsafe_ones = Vec::new();
        if self.webhooks.allow_http {
            unsafe_ones
                .push("webhooks.allow_http = true: webhook deliveries may go over plain HTTP");
        }
        if self.webhooks.allow_private_networks {
            unsafe_ones.push(
                "webhooks.allow_private_networks = true: webhooks may reach loopback and private addresses",
            );
        }
        if self.exchange.allow_insecure_http {
            unsafe_ones.push(
                "exchange.allow_insecure_http = true: exchange credentials may go over plain HTTP",
            );
        }
        if self.server.status_page_public {
            unsafe_ones.push(
                "server.status_page_public = true: /status is served to anyone who reaches the server",
            );
        }
        let smtp = &self.email.smtp;
        if self.email.transport == "smtp"
            && smtp.tls == "none"
            && (smtp.username.is_some() || smtp.password.is_some())
        {
            unsafe_ones.push(
                "email.smtp.allow_plaintext_auth = true: SMTP credentials go over the network in clear",
            );
        }
        unsafe_ones
    }

    /// The defaults alone, for tests and tools that adjust fields in code.
    pub fn defaults() -> Result<Settings, ConfigError> {
        let settings: Settings = Config::builder()
            .add_source(File::from_str(DEFAULTS, FileFormat::Toml))
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError(format!("{key}: {why}")));
        if self.database.max_connections == 0 {
            return bad("database.max_connections", "must be at least 1");
        }
        let url = self.database.url.expose();
        let known_scheme = ["sqlite:", "postgres://", "postgresql://"]
            .iter()
            .any(|scheme| url.starts_with(scheme));
        if !url.is_empty() && !known_scheme {
            return bad(
                "database.url",
                "must start with sqlite:, postgres:// or postgresql://",
            );
        }
        if self.log.format().is_none() {
            return bad("log.format", "must be \"pretty\" or \"json\"");
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return bad("log.level", "not a level or tracing filter (try \"info\")");
        }
        if self.api.rate_limit_per_second == 0 {
            return bad("api.rate_limit_per_second", "must be at least 1");
        }
        if self.api.rate_limit_burst == 0 {
            return bad("api.rate_limit_burst", "must be at least 1");
        }
        if self.api.max_body_bytes < 1024 {
            return bad("api.max_body_bytes", "must be at least 1024");
        }
        if self.api.max_import_bytes < self.api.max_body_bytes {
            return bad(
                "api.max_import_bytes",
                "must be at least api.max_body_bytes",
            );
        }
        if self.api.max_import_rows == 0 {
            return bad("api.max_import_rows", "must be at least 1");
        }
        if self.api.body_read_timeout_ms == 0 {
            return bad("api.body_read_timeout_ms", "must be at least 1");
        }
        if self.api.max_concurrent_imports == 0 {
            return bad("api.max_concurrent_imports", "must be at least 1");
        }
        if !(1..=8760).contains(&self.approvals.ttl_hours) {
            return bad("approvals.ttl_hours", "must be 1 to 8760 (a year)");
        }
        if !(1..=8760).contains(&self.agent_sessions.max_hours) {
            return bad("agent_sessions.max_hours", "must be 1 to 8760 (a year)");
        }
        if self.employees.wallet_change_hold_hours > 8760 {
            return bad(
                "employees.wallet_change_hold_hours",
                "must be 0 (no hold) to 8760 (a year)",
            );
        }
        if self.audit.path_max_chars < 16 {
            return bad("audit.path_max_chars", "must be at least 16");
        }
        if self.audit.unauthenticated_per_second == 0 {
            return bad("audit.unauthenticated_per_second", "must be at least 1");
        }
        if self.audit.flush_interval_ms == 0 {
            return bad("audit.flush_interval_ms", "must be at least 1");
        }
        if self.idempotency.retention_seconds == 0 {
            return bad("idempotency.retention_seconds", "must be at least 1");
        }
        if self.idempotency.lock_timeout_ms == 0 {
            return bad("idempotency.lock_timeout_ms", "must be at least 1");
        }
        if self.webhooks.timeout_ms == 0 {
            return bad("webhooks.timeout_ms", "must be at least 1");
        }
        if self.webhooks.max_in_flight_per_endpoint == 0 {
            return bad("webhooks.max_in_flight_per_endpoint", "must be at least 1");
        }
        if self.webhooks.max_endpoints == 0 {
            return bad("webhooks.max_endpoints", "must be at least 1");
        }
        if self.webhooks.max_in_flight_per_endpoint > 1024 {
            return bad(
                "webhooks.max_in_flight_per_endpoint",
                "must be at most 1024",
            );
        }
        if self.webhooks.retry_schedule_ms.len() > 20 {
            return bad("webhooks.retry_schedule_ms", "at most 20 retries");
        }
        if let Some(delay) = self
            .webhooks
            .retry_schedule_ms
            .iter()
            .find(|d| **d > 7 * 86_400_000)
        {
            return bad(
                "webhooks.retry_schedule_ms",
                &format!("{delay} is over 7 days; give each retry's delay in milliseconds"),
            );
        }
        if self.test_run.amount_usd_cents < 1 {
            return bad("test_run.amount_usd_cents", "must be at least 1");
        }
        const DAY_MS: u64 = 86_400_000;
        const YEAR_S: u64 = 366 * 86_400;
        for (key, value, max) in [
            (
                "idempotency.retention_seconds",
                self.idempotency.retention_seconds,
                10 * YEAR_S,
            ),
            (
                "idempotency.lock_timeout_ms",
                self.idempotency.lock_timeout_ms,
                DAY_MS,
            ),
            (
                "auth.rotation_grace_seconds",
                self.auth.rotation_grace_seconds,
                YEAR_S,
            ),
            (
                "audit.flush_interval_ms",
                self.audit.flush_interval_ms,
                DAY_MS,
            ),
            (
                "runs.funds_watch_interval_ms",
                self.runs.funds_watch_interval_ms,
                DAY_MS,
            ),
            ("runs.poll_interval_ms", self.runs.poll_interval_ms, DAY_MS),
            ("webhooks.timeout_ms", self.webhooks.timeout_ms, 300_000),
            (
                "webhooks.secret_rotation_grace_seconds",
                self.webhooks.secret_rotation_grace_seconds,
                30 * 86_400,
            ),
            (
                "runs.idle_actor_timeout_ms",
                self.runs.idle_actor_timeout_ms,
                DAY_MS,
            ),
            ("runs.lease_ttl_ms", self.runs.lease_ttl_ms, DAY_MS),
            (
                "exchange.reconcile_grace_ms",
                self.exchange.reconcile_grace_ms,
                DAY_MS,
            ),
            (
                "exchange.stuck_after_ms",
                self.exchange.stuck_after_ms,
                30 * DAY_MS,
            ),
            (
                "exchange.unreachable_fail_ms",
                self.exchange.unreachable_fail_ms,
                30 * DAY_MS,
            ),
            (
                "exchange.resend_grace_without_dedupe_ms",
                self.exchange.resend_grace_without_dedupe_ms,
                DAY_MS,
            ),
            (
                "exchange.send_deadline_ms",
                self.exchange.send_deadline_ms,
                DAY_MS,
            ),
            (
                "exchange.sandbox.completion_delay_ms",
                self.exchange.sandbox.completion_delay_ms,
                DAY_MS,
            ),
            (
                "exchange.sandbox.transfer_delay_ms",
                self.exchange.sandbox.transfer_delay_ms,
                DAY_MS,
            ),
        ] {
            if value > max {
                return Err(ConfigError(format!("{key}: at most {max}")));
            }
        }
        if self.runs.lease_ttl_ms < 300 {
            return bad(
                "runs.lease_ttl_ms",
                "at least 300 ms: a lease is renewed three times per lease",
            );
        }
        if self.runs.poll_interval_ms == 0 || self.runs.funds_watch_interval_ms == 0 {
            return bad("runs.poll_interval_ms", "intervals must be at least 1 ms");
        }
        exchange::validate(&self.exchange)
            .map_err(|(key, why)| ConfigError(format!("{key}: {why}")))?;
        if self.exchange.burst == 0 {
            return bad("exchange.burst", "must be at least 1");
        }
        if self.exchange.in_flight_window == 0 {
            return bad("exchange.in_flight_window", "must be at least 1");
        }
        if self.exchange.send_deadline_ms == 0 {
            return bad("exchange.send_deadline_ms", "must be at least 1");
        }
        if self.exchange.max_sends == 0 || self.exchange.max_sends > 100 {
            return bad("exchange.max_sends", "must be from 1 to 100");
        }
        if self.exchange.max_sends_without_dedupe == 0
            || self.exchange.max_sends_without_dedupe > 100
        {
            return bad("exchange.max_sends_without_dedupe", "must be from 1 to 100");
        }
        if self.exchange.reconcile_batch == 0 || self.exchange.reconcile_batch > 100_000 {
            return bad("exchange.reconcile_batch", "must be from 1 to 100000");
        }
        let sandbox = &self.exchange.sandbox;
        for (key, value) in [
            (
                "exchange.sandbox.treasury_initial_usd_cents",
                sandbox.treasury_initial_usd_cents,
            ),
            (
                "exchange.sandbox.exchange_initial_usd_cents",
                sandbox.exchange_initial_usd_cents,
            ),
            (
                "exchange.sandbox.withdrawal_fee_usd_cents",
                sandbox.withdrawal_fee_usd_cents,
            ),
        ] {
            if value < 0 {
                return bad(key, "must be 0 or more");
            }
        }
        if !matches!(self.email.transport.as_str(), "file" | "smtp") {
            return bad("email.transport", "must be \"file\" or \"smtp\"");
        }
        if !matches!(self.email.smtp.tls.as_str(), "none" | "starttls" | "tls") {
            return bad(
                "email.smtp.tls",
                "must be \"none\", \"starttls\" or \"tls\"",
            );
        }
        if self.email.max_attempts == 0 {
            return bad("email.max_attempts", "must be at least 1");
        }
        let smtp = &self.email.smtp;
        if self.email.transport == "smtp"
            && smtp.tls == "none"
            && (smtp.username.is_some() || smtp.password.is_some())
            && !smtp.allow_plaintext_auth
        {
            return bad(
                "email.smtp.allow_plaintext_auth",
                "SMTP credentials with email.smtp.tls = \"none\" would go over the network in clear; \
                 use \"starttls\" or \"tls\", or set email.smtp.allow_plaintext_auth = true",
            );
        }
        if self.email.company_name.trim().is_empty() {
            return bad("email.company_name", "must not be empty");
        }
        if self.email.from.parse::<lettre::message::Mailbox>().is_err() {
            return bad(
                "email.from",
                "not a mailbox such as `Payroll <payroll@example.com>`",
            );
        }
        Ok(())
    }

    /// The database URL in force: the configured one, or the embedded SQLite file.
    pub fn database_url(&self) -> String {
        let url = self.database.url.expose();
        if url.is_empty() {
            format!(
                "sqlite://{}?mode=rwc",
                self.data.dir.join("payroll.db").display()
            )
        } else {
            url.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_load_and_validate() {
        let s = Settings::defaults().expect("defaults are valid");
        assert_eq!(s.server.port, 8080);
        assert_eq!(s.database_url(), "sqlite://data/payroll.db?mode=rwc");
        assert_eq!(s.api.rate_limit_burst, 200);
        assert!(!s.server.status_page_public);
    }

    #[test]
    fn smtp_credentials_never_go_in_clear_unless_allowed() {
        let mut s = Settings::defaults().expect("defaults are valid");
        s.email.transport = "smtp".into();
        s.email.smtp.username = Some("mailer".into());
        s.email.smtp.password = Some("secret".into());
        let err = s.validate().expect_err("credentials in clear").to_string();
        assert!(err.contains("email.smtp.allow_plaintext_auth"), "{err}");
        s.email.smtp.tls = "starttls".into();
        s.validate().expect("over TLS");
        s.email.smtp.tls = "none".into();
        s.email.smtp.allow_plaintext_auth = true;
        s.validate().expect("allowed");
    }

    #[test]
    fn okx_needs_its_credentials_and_a_sound_chain_map() {
        let mut s = Settings::defaults().expect("defaults are valid");
        s.exchange.provider = "okx".into();
        let err = s.validate().expect_err("no credentials").to_string();
        assert!(err.contains("exchange.okx.api_key"), "{err}");
        assert!(err.contains("PAYROLL__EXCHANGE__OKX__API_KEY"), "{err}");
        s.exchange.okx.api_key = "k".into();
        s.exchange.okx.secret_key = "s".into();
        s.exchange.okx.passphrase = "p".into();
        s.validate().expect("valid");
        s.exchange
            .okx
            .chains
            .insert("dogecoin".into(), "DOGE".into());
        let err = s.validate().expect_err("bad network").to_string();
        assert!(err.contains("exchange.okx.chains"), "{err}");
        s.exchange.okx.chains.remove("dogecoin");
        s.exchange.okx.base_url = "ftp://okx".into();
        let err = s.validate().expect_err("bad url").to_string();
        assert!(err.contains("exchange.okx.base_url"), "{err}");
        s.exchange.okx.base_url = "https://www.okx.com".into();
        s.exchange.okx.deposit_network = "TRON".into();
        let err = s.validate().expect_err("bad deposit network").to_string();
        assert!(err.contains("exchange.okx.deposit_network"), "{err}");
    }

    #[test]
    fn okx_credentials_are_refused_in_a_config_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("okx.toml");
        std::fs::write(&path, "[exchange.okx]\nsecret_key = \"abc\"\n").expect("write");
        let err = Settings::load(Some(&path))
            .expect_err("refused")
            .to_string();
        assert!(err.contains("exchange.okx.secret_key"), "{err}");
        assert!(err.contains("PAYROLL__EXCHANGE__OKX__SECRET_KEY"), "{err}");
        assert!(!err.contains("abc"), "{err}");
    }

    #[test]
    fn every_secret_is_refused_in_a_config_file() {
        let dir = tempfile::tempdir().expect("dir");
        for (text, key) in [
            ("[auth]\nkey_pepper = \"p3pp3r\"\n", "auth.key_pepper"),
            (
                "[email.smtp]\npassword = \"p3pp3r\"\n",
                "email.smtp.password",
            ),
            (
                "[database]\nurl = \"postgres://payroll:p3pp3r@db/payroll\"\n",
                "database.url",
            ),
        ] {
            let path = dir.path().join("secret.toml");
            std::fs::write(&path, text).expect("write");
            let err = Settings::load(Some(&path))
                .expect_err("refused")
                .to_string();
            assert!(err.contains(key), "{err}");
            assert!(!err.contains("p3pp3r"), "{err}");
        }
        // A database URL without a password may be in a file.
        let path = dir.path().join("fine.toml");
        std::fs::write(
            &path,
            "[database]\nurl = \"postgres://payroll@db/payroll\"\n",
        )
        .expect("write");
        Settings::load(Some(&path)).expect("no secret in it");
    }

    #[test]
    fn okx_goes_over_https_unless_told_and_unsafe_settings_are_named() {
        let mut s = Settings::defaults().expect("defaults are valid");
        assert!(s.unsafe_settings().is_empty());
        s.exchange.provider = "okx".into();
        s.exchange.okx.api_key = "k".into();
        s.exchange.okx.secret_key = "s".into();
        s.exchange.okx.passphrase = "p".into();
        s.exchange.okx.base_url = "http://okx.example".into();
        let err = s.validate().expect_err("plain HTTP").to_string();
        assert!(err.contains("exchange.allow_insecure_http"), "{err}");
        s.exchange.allow_insecure_http = true;
        s.validate().expect("allowed for tests");
        s.webhooks.allow_http = true;
        s.webhooks.allow_private_networks = true;
        s.server.status_page_public = true;
        s.email.transport = "smtp".into();
        s.email.smtp.username = Some("u".into());
        s.email.smtp.allow_plaintext_auth = true;
        assert_eq!(s.unsafe_settings().len(), 5, "{:?}", s.unsafe_settings());
    }

    #[test]
    fn secrets_are_not_debug_printed() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "\"[redacted]\"");
    }
}
