//! What the REST providers share on the wire: one `awc` client per request with one overall
//! deadline (connect, head and body alike, CONTRACT §7), the answer read whole up to a size, a
//! per-endpoint request limiter, and the lock that survives a panic elsewhere.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use awc::http::Method;

use super::rate_limit::gcra_take;

/// Largest answer read from an exchange.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// One HTTP answer from an exchange.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// `Retry-After`, in milliseconds, where the exchange sent one in seconds.
    pub retry_after_ms: Option<u64>,
    pub body: Vec<u8>,
}

/// The exchange's base URL, with the deadline of each call and the TLS roots.
pub struct Wire {
    base_url: String,
    timeout: Duration,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Wire {
    pub fn new(base_url: &str, timeout_ms: u64) -> Wire {
        Wire {
            base_url: base_url.trim_end_matches('/').to_owned(),
            timeout: Duration::from_millis(timeout_ms.max(1)),
            tls: crate::tls::client_config().map(Arc::new),
        }
    }

    /// A request to `path_and_query` under the base URL. awc clients cannot be shared across
    /// threads, and an exchange is called a few times a second at most, so each request
    /// makes its own.
    pub fn request(&self, method: Method, path_and_query: &str) -> awc::ClientRequest {
        let mut connector = awc::Connector::new().timeout(self.timeout);
        if let Some(tls) = &self.tls {
            connector = connector.rustls_0_23(tls.clone());
        }
        awc::Client::builder()
            .connector(connector)
            .disable_redirects()
            .timeout(self.timeout)
            .add_default_header(("user-agent", concat!("payroll/", env!("CARGO_PKG_VERSION"))))
            .finish()
            .request(method, format!("{}{path_and_query}", self.base_url))
    }

    /// Sends `request` (with `body` and its content type, if any) and reads the whole answer;
    /// `Err` when no whole answer came within the deadline (timeout, reset, refused).
    pub async fn send(
        &self,
        request: awc::ClientRequest,
        body: Option<(&'static str, String)>,
    ) -> Result<Answer, String> {
        let call = async move {
            let sent = match body {
                Some((content_type, body)) => {
                    request
                        .insert_header(("Content-Type", content_type))
                        .send_body(body)
                        .await
                }
                None => request.send().await,
            };
            let mut response = sent.map_err(|e| e.to_string())?;
            let retry_after_ms = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|seconds| seconds.saturating_mul(1000));
            let body = response
                .body()
                .limit(MAX_ANSWER_BYTES)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Answer {
                status: response.status().as_u16(),
                retry_after_ms,
                body: body.to_vec(),
            })
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "no whole answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }
}

/// One limiter per endpoint: a bucket of 1 refilled `per_second` times a second, so no window
/// of one second ever holds more than `per_second` requests. Kept in this process (the GCRA's
/// theoretical arrival time, in microseconds since `start`): these are the exchange's limits
/// per key, and one instance calls these endpoints far below them except for withdrawals,
/// which the shared withdrawal limit paces.
pub struct EndpointLimiter {
    start: Instant,
    per_second: u32,
    tat_us: Mutex<i64>,
}

impl EndpointLimiter {
    pub fn new(per_second: u32) -> EndpointLimiter {
        EndpointLimiter {
            start: Instant::now(),
            per_second: per_second.max(1),
            tat_us: Mutex::new(0),
        }
    }

    pub async fn acquire(&self) {
        let per_second = i64::from(self.per_second);
        let interval_us = (1_000_000 + per_second - 1) / per_second;
        loop {
            let wait = {
                let mut tat = lock(&self.tat_us);
                let now_us = i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX);
                let take = gcra_take(*tat, now_us, interval_us, 1, 1);
                *tat = take.tat_us;
                if take.granted == 1 {
                    return;
                }
                Duration::from_micros(u64::try_from(take.wait_us).unwrap_or(0))
                    .max(Duration::from_millis(1))
            };
            actix_rt::time::sleep(wait).await;
        }
    }
}

/// The value behind a mutex, also after a panic while it was held (nothing here is left half
/// written by one).
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
