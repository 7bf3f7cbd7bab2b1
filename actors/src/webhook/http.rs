//! Sending one delivery: the guarded client (no redirects, names resolved through the SSRF
//! guard, the attempt timeout) and one signed attempt.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use payroll_entities::{DeliveryStatus, time};

use super::{
    guard::{GuardPolicy, GuardedResolver, literal_ip},
    settings::WebhookSettings,
    signing::signature_header,
    transitions::{self, DeliveryOp, DeliveryState, Transition},
};

/// Bytes of a receiver's answer read (and dropped) so the connection can be reused.
const ANSWER_LIMIT: usize = 64 * 1024;

/// The delivery client: no redirects, the attempt timeout, names resolved through the guard,
/// TLS by rustls with the webpki roots.
pub fn build_client(settings: &WebhookSettings) -> awc::Client {
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    let tcp = actix_tls::connect::Connector::new(actix_tls::connect::Resolver::custom(
        GuardedResolver(settings.policy()),
    ))
    .service();
    let mut connector = awc::Connector::new()
        .connector(tcp)
        .timeout(timeout)
        .limit(4096);
    if let Some(tls) = crate::tls::client_config() {
        connector = connector.rustls_0_23(Arc::new(tls));
    }
    awc::Client::builder()
        .connector(connector)
        .disable_redirects()
        .timeout(timeout)
        .add_default_header((
            "user-agent",
            concat!("payroll-webhooks/", env!("CARGO_PKG_VERSION")),
        ))
        .finish()
}

/// One claimed delivery, ready to send.
pub struct Claimed {
    pub delivery_id: String,
    pub event_id: String,
    /// The number of this attempt (1-based).
    pub attempt: i32,
    pub retries_used: i32,
    pub manual: bool,
    pub body: Vec<u8>,
}

/// What an attempt came to.
pub struct Outcome {
    pub delivery_id: String,
    pub attempt: i32,
    pub retries_used: i32,
    pub manual: bool,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub response_status: Option<u16>,
    pub error: Option<String>,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
            && self
                .response_status
                .is_some_and(|s| (200..300).contains(&s))
    }

    /// What this outcome does to its delivery.
    pub fn op(&self) -> DeliveryOp {
        if self.succeeded() {
            DeliveryOp::Succeed
        } else {
            DeliveryOp::Fail {
                gone: self.response_status == Some(410),
            }
        }
    }

    /// Where this outcome takes its (still PENDING) delivery; `jitter` stretches a retry's
    /// delay.
    pub fn transition(&self, schedule: &[u64], jitter: f64) -> Transition {
        let delivery = DeliveryState {
            status: DeliveryStatus::Pending,
            retries_used: self.retries_used,
            manual: self.manual,
        };
        transitions::apply(delivery, self.op(), schedule, jitter).unwrap_or(Transition::Failed {
            disables_endpoint: false,
        })
    }

    /// Whether recording this outcome disables the endpoint: a 410, or the last retry of a
    /// scheduled delivery failing.
    pub fn disables(&self, schedule: &[u64]) -> bool {
        matches!(
            self.transition(schedule, 0.0),
            Transition::Failed {
                disables_endpoint: true
            }
        )
    }
}

/// The endpoint as the dispatcher sends to it.
#[derive(Clone)]
pub struct Target {
    pub url: Arc<str>,
    pub keys: Arc<Vec<Vec<u8>>>,
}

/// One attempt: guard, sign, POST, read the answer, all within the timeout.
pub async fn attempt(
    client: awc::Client,
    target: Target,
    policy: GuardPolicy,
    timeout: Duration,
    claimed: Claimed,
) -> Outcome {
    let started_at = time::now();
    let clock = Instant::now();
    let (response_status, error) = send(&client, &target, policy, timeout, &claimed).await;
    Outcome {
        delivery_id: claimed.delivery_id,
        attempt: claimed.attempt,
        retries_used: claimed.retries_used,
        manual: claimed.manual,
        started_at,
        duration_ms: i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX),
        response_status,
        error,
    }
}

async fn send(
    client: &awc::Client,
    target: &Target,
    policy: GuardPolicy,
    timeout: Duration,
    claimed: &Claimed,
) -> (Option<u16>, Option<String>) {
    let url = match policy.check_url(&target.url) {
        Ok(url) => url,
        Err(refused) => return (None, Some(format!("refused: {refused}"))),
    };
    if let Some(ip) = literal_ip(&url)
        && let Err(refused) = policy.check_ip(ip)
    {
        return (None, Some(format!("refused: {refused}")));
    }
    let timestamp = time::now().timestamp();
    let signature = signature_header(&target.keys, &claimed.event_id, timestamp, &claimed.body);
    let request = client
        .post(url.as_str())
        .insert_header(("content-type", "application/json"))
        .insert_header(("webhook-id", claimed.event_id.as_str()))
        .insert_header(("webhook-timestamp", timestamp.to_string()))
        .insert_header(("webhook-signature", signature.as_str()))
        .insert_header(("x-webhook-signature", signature.as_str()));
    let body = claimed.body.clone();
    let exchange = async move {
        let mut response = request.send_body(body).await.map_err(|e| match e {
            awc::error::SendRequestError::Timeout => timed_out(timeout),
            other => other.to_string(),
        })?;
        let status = response.status().as_u16();
        // The answer's body is read only so the connection can be reused.
        let _ = response.body().limit(ANSWER_LIMIT).await;
        Ok::<u16, String>(status)
    };
    match actix_rt::time::timeout(timeout, exchange).await {
        Err(_) => (None, Some(timed_out(timeout))),
        Ok(Err(e)) => (None, Some(e)),
        Ok(Ok(status)) if (200..300).contains(&status) => (Some(status), None),
        Ok(Ok(status)) if (300..400).contains(&status) => (
            Some(status),
            Some(format!("HTTP {status}: redirects are not followed")),
        ),
        Ok(Ok(status)) => (Some(status), Some(format!("HTTP {status}"))),
    }
}

fn timed_out(timeout: Duration) -> String {
    format!("no answer within {} ms", timeout.as_millis())
}
