//! Sending one delivery: the guarded client (no redirects, names resolved through the SSRF
//! guard, the attempt timeout) and one signed attempt.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use payroll_entities::{DeliveryStatus, time};

use super::{
    guard::{GuardPolicy, GuardedResolver, NameLookup, SystemLookup, literal_ip},
    settings::WebhookSettings,
    signing::signature_header,
    transitions::{self, DeliveryOp, DeliveryState, Transition},
};

/// Bytes of a receiver's answer read (and dropped) so the connection can be reused.
const ANSWER_LIMIT: usize = 64 * 1024;

/// The delivery client: no redirects, the attempt timeout, names resolved through the guard,
/// TLS by rustls with the webpki roots.
pub fn build_client(settings: &WebhookSettings) -> awc::Client {
    build_client_with(settings, SystemLookup)
}

/// [`build_client`] resolving names with `names`.
pub fn build_client_with(settings: &WebhookSettings, names: impl NameLookup) -> awc::Client {
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    let tcp =
        actix_tls::connect::Connector::new(actix_tls::connect::Resolver::custom(GuardedResolver {
            policy: settings.policy(),
            names,
        }))
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

#[cfg(test)]
mod tests {
    use std::{
        cell::RefCell,
        collections::VecDeque,
        io::{Read, Write},
        net::{IpAddr, SocketAddr, TcpListener},
        rc::Rc,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use futures_util::future::LocalBoxFuture;

    use super::*;

    /// A resolver stub answering its addresses in turn, as a rebinding name server would.
    #[derive(Clone)]
    struct Rebinding(Rc<RefCell<VecDeque<IpAddr>>>);

    impl NameLookup for Rebinding {
        fn lookup_host<'a>(
            &'a self,
            _host: &'a str,
            port: u16,
        ) -> LocalBoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
            let next = self.0.borrow_mut().pop_front();
            Box::pin(async move {
                next.map(|ip| vec![SocketAddr::new(ip, port)])
                    .ok_or_else(|| std::io::Error::other("no more answers"))
            })
        }
    }

    /// A loopback HTTP server answering 200 to every connection; counts the connections.
    fn counting_server() -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 8192];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        (port, hits)
    }

    fn settings(allow_private_networks: bool) -> WebhookSettings {
        WebhookSettings {
            retry_schedule_ms: vec![],
            timeout_ms: 5000,
            max_in_flight_per_endpoint: 1,
            secret_rotation_grace_seconds: 0,
            allow_http: true,
            allow_private_networks,
            max_endpoints: 100,
        }
    }

    async fn deliver(settings: &WebhookSettings, names: Rebinding, port: u16) -> Outcome {
        let client = build_client_with(settings, names);
        let target = Target {
            url: format!("http://hooks.example.test:{port}/hook").into(),
            keys: Arc::new(vec![b"0123456789abcdef0123456789abcdef".to_vec()]),
        };
        let claimed = Claimed {
            delivery_id: "dlv_1".into(),
            event_id: "evt_1".into(),
            attempt: 1,
            retries_used: 0,
            manual: false,
            body: b"{}".to_vec(),
        };
        attempt(
            client,
            target,
            settings.policy(),
            Duration::from_secs(5),
            claimed,
        )
        .await
    }

    #[actix_rt::test]
    async fn a_name_that_rebinds_to_a_private_address_is_refused_at_connect_time() {
        let (port, hits) = counting_server();
        let public: IpAddr = "93.184.216.34".parse().expect("ip");
        let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
        let names = Rebinding(Rc::new(RefCell::new(VecDeque::from([public, loopback]))));
        let strict = settings(false);
        let url = format!("http://hooks.example.test:{port}/hook");
        // At registration the name answers a public address: the URL is accepted.
        strict
            .policy()
            .check_url_resolved_by(&url, &names)
            .await
            .expect("public at registration");
        // At delivery it answers loopback: the connection is never made.
        let outcome = deliver(&strict, names, port).await;
        assert!(!outcome.succeeded());
        let error = outcome.error.expect("an error");
        assert!(error.contains("loopback"), "{error}");
        assert_eq!(hits.load(Ordering::SeqCst), 0);

        // The same answers with private networks allowed reach the server: the stub is what
        // the client connects by.
        let names = Rebinding(Rc::new(RefCell::new(VecDeque::from([loopback]))));
        let outcome = deliver(&settings(true), names, port).await;
        assert_eq!(outcome.response_status, Some(200), "{:?}", outcome.error);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[actix_rt::test]
    async fn every_answer_of_a_name_is_checked() {
        let (port, hits) = counting_server();
        let names = Rebinding(Rc::new(RefCell::new(VecDeque::new())));
        names
            .0
            .borrow_mut()
            .push_back("::ffff:127.0.0.1".parse().expect("ip"));
        let outcome = deliver(&settings(false), names, port).await;
        let error = outcome.error.expect("an error");
        assert!(error.contains("loopback"), "{error}");
        assert_eq!(hits.load(Ordering::SeqCst), 0);
    }
}
