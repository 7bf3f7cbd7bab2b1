//! The client side of the `payroll` command: every API operation from a terminal or a script,
//! with the same API key and the same JSON. Output is the API's envelope unchanged when stdout
//! is not a terminal (or with `-f json`), a table on a terminal (`-f table`), CSV for lists.
//! Exit codes: 0 success, 1 the API answered an error, 2 usage, 3 server unreachable, 4 `--wait`
//! timed out.

use std::{
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use awc::http::Method;
use serde_json::Value;

use super::render::{render_csv, render_table};

/// The most of an answer the CLI and `payroll mcp` hold (CONTRACT §13): a page of 200 is far
/// smaller. A run's payouts as CSV (one answer, as long as the run) are written out by the CLI
/// as they arrive instead ([`Call::streamed`]).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// How an invocation ended.
#[derive(Debug)]
pub enum Failure {
    /// The API answered an error; its body has been printed.
    Api,
    Usage(String),
    Unreachable(String),
    /// The server answered, but with something no answer of the API is (larger than
    /// [`MAX_ANSWER_BYTES`]); retrying would not mend it.
    BadAnswer(String),
    WaitTimedOut,
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Api => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) | Failure::BadAnswer(_) => 3,
            Failure::WaitTimedOut => 4,
        }
    }
}

/// `base_url`, `api_key` and `ca_cert` of a profile in `~/.config/payroll/config.toml`:
///
/// ```toml
/// [default]
/// base_url = "http://127.0.0.1:8080"
/// api_key = "mpk_live_…"
///
/// [profiles.production]
/// base_url = "https://payroll.internal"
/// api_key = "mpk_live_…"
/// ca_cert = "/etc/payroll/internal-ca.pem"
/// ```
/// Flags and environment variables win over the profile.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct Profile {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// A PEM file of CA certificates trusted beside the public roots (https:// only).
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ProfileFile {
    default: Option<Profile>,
    #[serde(default)]
    profiles: std::collections::HashMap<String, Profile>,
}

/// The profile `name` (or `default`) from the user's config file, if there is one.
pub fn load_profile(name: Option<&str>) -> Result<Profile, Failure> {
    let Some(home) = std::env::var_os("HOME") else {
        return Ok(Profile::default());
    };
    let path = std::path::Path::new(&home).join(".config/payroll/config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(_) if name.is_none() => return Ok(Profile::default()),
        Err(e) => return Err(Failure::Usage(format!("{}: {e}", path.display()))),
    };
    let file: ProfileFile = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize())
        .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
    match name {
        None => Ok(file.default.unwrap_or_default()),
        Some(name) => file
            .profiles
            .get(name)
            .cloned()
            .ok_or_else(|| Failure::Usage(format!("no profile `{name}` in {}", path.display()))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Table,
    Csv,
}

/// One API request.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<(Vec<u8>, &'static str)>,
    /// A CSV answer goes to stdout as it arrives, never held whole (a run's payouts).
    pub streamed: bool,
}

impl Call {
    pub fn get(path: impl Into<String>) -> Call {
        Call {
            method: Method::GET,
            path: path.into(),
            query: Vec::new(),
            body: None,
            streamed: false,
        }
    }

    pub fn post(path: impl Into<String>) -> Call {
        Call {
            method: Method::POST,
            path: path.into(),
            query: Vec::new(),
            body: None,
            streamed: false,
        }
    }

    pub fn with_method(mut self, method: Method) -> Call {
        self.method = method;
        self
    }

    /// Adds `name=value` when the value is given.
    pub fn param(mut self, name: &str, value: Option<impl ToString>) -> Call {
        if let Some(value) = value {
            self.query.push((name.to_owned(), value.to_string()));
        }
        self
    }

    pub fn json(mut self, body: Value) -> Call {
        self.body = Some((body.to_string().into_bytes(), "application/json"));
        self
    }

    /// A CSV answer is written to stdout as it arrives instead of being read whole (and so
    /// is not bound by [`MAX_ANSWER_BYTES`]).
    pub fn streamed(mut self) -> Call {
        self.streamed = true;
        self
    }

    pub fn raw(mut self, body: Vec<u8>, content_type: &'static str) -> Call {
        self.body = Some((body, content_type));
        self
    }

    fn is_write(&self) -> bool {
        matches!(self.method, Method::POST | Method::PATCH | Method::DELETE)
    }
}

/// What the API answered.
pub struct Answer {
    pub status: u16,
    pub bytes: Vec<u8>,
    pub content_type: String,
    /// Written to stdout already, as it arrived (`bytes` is empty).
    pub streamed: bool,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
}

pub struct Client {
    http: awc::Client,
    /// Without a trailing slash.
    pub base_url: String,
    api_key: String,
    pub format: Format,
    idempotency_key: Option<String>,
}

/// The TLS settings of an https:// base URL: the public webpki roots, plus the certificates of
/// `ca_cert` (a PEM file) when given.
fn tls_config(ca_cert: Option<&Path>) -> Result<rustls::ClientConfig, Failure> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = ca_cert {
        let shown = path.display();
        let pem =
            std::fs::read(path).map_err(|e| Failure::Usage(format!("--ca-cert {shown}: {e}")))?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| Failure::Usage(format!("--ca-cert {shown}: {e}")))?;
            roots.add(cert).map_err(|e| {
                Failure::Usage(format!(
                    "--ca-cert {shown}: not a usable CA certificate: {e}"
                ))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(Failure::Usage(format!(
                "--ca-cert {shown}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
            )));
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Failure::Usage(format!("TLS is unavailable: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The TLS error under a failed request, if that is why it failed.
fn tls_error(err: &awc::error::SendRequestError) -> Option<&rustls::Error> {
    use awc::error::{ConnectError, SendRequestError};
    match err {
        SendRequestError::Connect(ConnectError::Io(io)) => {
            io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
        }
        _ => None,
    }
}

impl Client {
    /// A client of `base_url` (`http://` or `https://`); `ca_cert` is a PEM file of CA
    /// certificates trusted beside the public roots for an https:// server.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        format: Option<Format>,
        idempotency_key: Option<String>,
        ca_cert: Option<&Path>,
    ) -> Result<Client, Failure> {
        let api_key = api_key.filter(|k| !k.trim().is_empty()).ok_or_else(|| {
            Failure::Usage("no API key: set PAYROLL_API_KEY or pass --api-key".into())
        })?;
        let base_url = base_url.trim_end_matches('/').to_owned();
        let https = base_url.starts_with("https://");
        if !https && !base_url.starts_with("http://") {
            return Err(Failure::Usage(format!(
                "--base-url {base_url}: not an http:// or https:// URL"
            )));
        }
        if let Some(key) = &idempotency_key
            && uuid::Uuid::try_parse(key).map(|u| u.get_version_num()) != Ok(4)
        {
            return Err(Failure::Usage("--idempotency-key must be a UUID v4".into()));
        }
        let format = format.unwrap_or(if std::io::stdout().is_terminal() {
            Format::Table
        } else {
            Format::Json
        });
        let builder = awc::Client::builder().timeout(Duration::from_secs(120));
        let http = if https {
            let tls = tls_config(ca_cert)?;
            builder
                .connector(awc::Connector::new().rustls_0_23(Arc::new(tls)))
                .finish()
        } else {
            builder.finish()
        };
        Ok(Client {
            http,
            base_url,
            api_key,
            format,
            idempotency_key,
        })
    }

    /// Sends a call. A write carries this invocation's Idempotency-Key, the same on the
    /// retries that follow a connection error or a 5xx (three at most, with backoff).
    pub async fn send(&self, call: &Call) -> Result<Answer, Failure> {
        let key = call.is_write().then(|| {
            self.idempotency_key
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
        });
        self.send_with_key(call, key).await
    }

    /// Sends a call with this Idempotency-Key (none for a read), kept on its retries.
    pub async fn send_with_key(&self, call: &Call, key: Option<String>) -> Result<Answer, Failure> {
        let mut url = format!("{}/api/v1{}", self.base_url, call.path);
        if !call.query.is_empty() {
            let query: Vec<String> = call
                .query
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            url = format!("{url}?{}", query.join("&"));
        }
        let mut last_error = String::new();
        for attempt in 0..4u32 {
            if attempt > 0 {
                actix_web::rt::time::sleep(Duration::from_millis(500 << (attempt - 1))).await;
            }
            let mut request = self
                .http
                .request(call.method.clone(), &url)
                .insert_header(("Authorization", format!("Bearer {}", self.api_key)))
                .insert_header((
                    "User-Agent",
                    concat!("payroll-cli/", env!("CARGO_PKG_VERSION")),
                ));
            if let Some(key) = &key {
                request = request.insert_header(("Idempotency-Key", key.clone()));
            }
            let sent = match &call.body {
                Some((bytes, content_type)) => {
                    request
                        .insert_header(("Content-Type", *content_type))
                        .send_body(bytes.clone())
                        .await
                }
                None => request.send().await,
            };
            let mut response = match sent {
                Ok(response) => response,
                Err(err) => {
                    if let Some(tls) = tls_error(&err) {
                        // A refused certificate is refused again: no retries.
                        return Err(Failure::Unreachable(format!(
                            "{}: TLS handshake failed: {tls}; if a private CA signed the \
                             server's certificate, pass --ca-cert FILE (or set PAYROLL_CA_CERT)",
                            self.base_url
                        )));
                    }
                    last_error = err.to_string();
                    continue;
                }
            };
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if call.streamed
                && response.status().is_success()
                && content_type.starts_with("text/csv")
            {
                return self.stream_out(&mut response, content_type).await;
            }
            let bytes = match response.body().limit(MAX_ANSWER_BYTES).await {
                Ok(bytes) => bytes.to_vec(),
                // Not something a retry mends: a server (or something posing as one) that
                // answers more than any answer of the API holds is not read further.
                Err(awc::error::PayloadError::Overflow) => {
                    return Err(Failure::BadAnswer(format!(
                        "{}: the answer is larger than {} MiB; nothing more of it was read",
                        self.base_url,
                        MAX_ANSWER_BYTES >> 20
                    )));
                }
                Err(err) => {
                    last_error = err.to_string();
                    continue;
                }
            };
            let status = response.status().as_u16();
            if status >= 500 && attempt < 3 {
                last_error = format!("HTTP {status}");
                continue;
            }
            return Ok(Answer {
                status,
                bytes,
                content_type,
                streamed: false,
            });
        }
        Err(Failure::Unreachable(format!(
            "{}: {last_error}",
            self.base_url
        )))
    }

    /// Writes a successful answer's body to stdout as it arrives. Not retried: what was
    /// written cannot be taken back, so a body that breaks off is reported as cut.
    async fn stream_out<S>(
        &self,
        response: &mut awc::ClientResponse<S>,
        content_type: String,
    ) -> Result<Answer, Failure>
    where
        S: futures_util::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>>
            + Unpin,
    {
        use futures_util::StreamExt;
        let status = response.status().as_u16();
        let mut written = 0usize;
        while let Some(chunk) = response.next().await {
            let chunk = chunk.map_err(|e| {
                Failure::Unreachable(format!(
                    "{}: the answer broke off after {written} bytes ({e}); the output is incomplete",
                    self.base_url
                ))
            })?;
            std::io::stdout()
                .write_all(&chunk)
                .map_err(|e| Failure::Usage(format!("cannot write the output: {e}")))?;
            written += chunk.len();
        }
        Ok(Answer {
            status,
            bytes: Vec::new(),
            content_type,
            streamed: true,
        })
    }

    /// Sends a call and prints its answer; an error answer is printed and fails with `Api`.
    pub async fn run(&self, call: &Call) -> Result<Answer, Failure> {
        let answer = self.send(call).await?;
        self.print(&answer)?;
        if answer.status >= 400 {
            return Err(Failure::Api);
        }
        Ok(answer)
    }

    pub fn print(&self, answer: &Answer) -> Result<(), Failure> {
        if answer.streamed {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        let written = if answer.status >= 400 {
            match self.format {
                Format::Json => out
                    .write_all(&answer.bytes)
                    .and_then(|_| out.write_all(b"\n")),
                _ => {
                    let body = answer.json();
                    let error = &body["error"];
                    eprintln!(
                        "error: {} ({}): {}",
                        error["code"].as_str().unwrap_or("UNKNOWN"),
                        answer.status,
                        error["message"].as_str().unwrap_or_default()
                    );
                    for e in error["details"]["validation_errors"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        eprintln!(
                            "  {}: {}",
                            e["field"].as_str().unwrap_or(""),
                            e["message"].as_str().unwrap_or("")
                        );
                    }
                    if let Some(hint) = error["recovery_hint"].as_str() {
                        eprintln!("hint: {hint}");
                    }
                    Ok(())
                }
            }
        } else if answer.content_type.starts_with("text/csv")
            || !answer.content_type.contains("json")
        {
            out.write_all(&answer.bytes)
        } else {
            match self.format {
                Format::Json => out
                    .write_all(&answer.bytes)
                    .and_then(|_| out.write_all(b"\n")),
                Format::Table => out.write_all(render_table(&answer.json()["data"]).as_bytes()),
                Format::Csv => out.write_all(render_csv(&answer.json()["data"]).as_bytes()),
            }
        };
        written.map_err(|e| Failure::Usage(format!("cannot write the output: {e}")))
    }

    /// Polls sync (a fresh Idempotency-Key each time) until every payout of the run is
    /// terminal, then prints the run.
    pub async fn wait_for_run(
        &self,
        run_id: &str,
        timeout: u64,
        interval: f64,
    ) -> Result<(), Failure> {
        let deadline = Instant::now() + Duration::from_secs(timeout);
        let progress = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} payouts terminal  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let sync = Call::post(format!("/payroll-runs/{run_id}/sync"));
        loop {
            let answer = self
                .send_with_key(&sync, Some(uuid::Uuid::new_v4().to_string()))
                .await?;
            if answer.status >= 400 {
                self.print(&answer)?;
                return Err(Failure::Api);
            }
            let run = &answer.json()["data"];
            let s = &run["payout_summary"];
            let count = |k: &str| s[k].as_u64().unwrap_or(0);
            let terminal = count("completed") + count("failed") + count("cancelled");
            let total = terminal + count("pending") + count("processing");
            if let Some(bar) = &progress {
                bar.set_length(total);
                bar.set_position(terminal);
                bar.set_message(run["status"].as_str().unwrap_or("").to_owned());
            }
            let moving = run["status"] == "PAYING_OUT" || count("processing") > 0;
            if !moving {
                if let Some(bar) = &progress {
                    bar.finish_and_clear();
                }
                return self.print(&answer);
            }
            if Instant::now() >= deadline {
                if let Some(bar) = &progress {
                    bar.abandon();
                }
                eprintln!("payroll: run {run_id} still has payouts in flight after {timeout} s");
                return Err(Failure::WaitTimedOut);
            }
            actix_web::rt::time::sleep(Duration::from_secs_f64(interval.max(0.1))).await;
        }
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters (query values, path segments).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("a b&c"), "a%20b%26c");
    }

    /// No HTTP/2 connection is ever made (deny.toml's h2 exception rests on it): an
    /// `https://` base URL offers http/1.1 alone in ALPN.
    #[test]
    fn alpn_offers_http1_alone() {
        let config = tls_config(None).expect("TLS");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
