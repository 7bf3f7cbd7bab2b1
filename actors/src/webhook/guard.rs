//! The SSRF guard (CONTRACT §10): endpoint URLs must be `https://` (or `http://` when
//! `webhooks.allow_http`), and their host must not resolve to a loopback, private, link-local,
//! multicast, documentation or reserved address, nor to one that reaches IPv4 through a
//! gateway or tunnel (NAT64, 6to4, Teredo, IPv4-translated; unless
//! `webhooks.allow_private_networks`). It runs at registration and
//! again at every attempt: the delivery client resolves names through [`GuardedResolver`], so
//! the address connected to is the address checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use actix_tls::connect::Resolve;
use futures_util::future::LocalBoxFuture;
use url::{Host, Url};

/// What the guard allows, from `webhooks.*`.
#[derive(Debug, Clone, Copy)]
pub struct GuardPolicy {
    pub allow_http: bool,
    pub allow_private_networks: bool,
}

/// Why a URL or address is refused; the text names the switch that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why an address is not public, or `None` for a public one.
pub fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v6_kind(v6: Ipv6Addr) -> Option<&'static str> {
    // IPv4-mapped (::ffff:a.b.c.d) is the IPv4 address itself.
    if let Some(v4) = v6.to_ipv4_mapped() {
        return v4_kind(v4);
    }
    let segments = v6.segments();
    let first = segments[0];
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // Addresses that reach an IPv4 address through a gateway or a tunnel: refused whatever the
    // address inside, named by it when it is not public either.
    let translated = |v4: Ipv4Addr| Some(v4_kind(v4).unwrap_or("translated"));
    if v6.is_loopback() {
        Some("loopback")
    } else if v6.is_unspecified() {
        Some("unspecified")
    } else if v6.is_multicast() {
        Some("multicast")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private")
    } else if first & 0xffc0 == 0xfe80 || first & 0xffc0 == 0xfec0 {
        Some("link-local")
    } else if first == 0x64 && segments[1] == 0xff9b {
        // NAT64 (64:ff9b::/96, and the local-use 64:ff9b:1::/48).
        translated(embedded(segments[6], segments[7]))
    } else if first == 0x2002 {
        // 6to4 (2002::/16): the IPv4 address is in the second and third groups.
        translated(embedded(segments[1], segments[2]))
    } else if first == 0x2001 && segments[1] == 0 {
        // Teredo (2001::/32): the client's IPv4 address, inverted, is in the last two groups.
        translated(embedded(!segments[6], !segments[7]))
    } else if segments[..4].iter().all(|s| *s == 0) && segments[4] == 0xffff && segments[5] == 0 {
        // IPv4-translated (::ffff:0:a.b.c.d, SIIT).
        translated(embedded(segments[6], segments[7]))
    } else if segments[..6].iter().all(|s| *s == 0) {
        // IPv4-compatible (::a.b.c.d).
        translated(embedded(segments[6], segments[7]))
    } else if (first == 0x2001 && segments[1] == 0x0db8)
        || (first == 0x3fff && segments[1] < 0x1000)
    {
        // Documentation (2001:db8::/32, 3fff::/20).
        Some("documentation")
    } else if first == 0x2001 && segments[1] == 0x0002 && segments[2] == 0 {
        // Benchmarking (2001:2::/48).
        Some("reserved")
    } else if first == 0x0100 && segments[1..4].iter().all(|s| *s == 0) {
        // Discard-only (100::/64).
        Some("reserved")
    } else {
        None
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = v4.octets();
    if v4.is_loopback() {
        Some("loopback")
    } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("private")
    } else if v4.is_link_local() {
        Some("link-local")
    } else if v4.is_multicast() {
        Some("multicast")
    } else if v4.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113)
    {
        // TEST-NET-1, -2 and -3.
        Some("documentation")
    } else if v4.is_broadcast()
        || a >= 240
        || (a, b, c) == (192, 0, 0)
        || (a == 198 && (18..20).contains(&b))
    {
        // Reserved (240.0.0.0/4), IETF protocol assignments, benchmarking (198.18.0.0/15).
        Some("reserved")
    } else {
        None
    }
}

impl GuardPolicy {
    /// Refuses an address the policy does not allow.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        match non_public_kind(ip) {
            Some(kind) if !self.allow_private_networks => Err(Refused(format!(
                "the host is or resolves to a {kind} address; private networks are refused \
                 unless webhooks.allow_private_networks is true"
            ))),
            _ => Ok(()),
        }
    }

    /// Checks what can be checked without resolving: scheme, host, credentials, and an IP
    /// literal host. Returns the URL parsed.
    pub fn check_url(&self, raw: &str) -> Result<Url, Refused> {
        if raw.len() > 2048 {
            return Err(Refused("at most 2048 characters".into()));
        }
        let url = Url::parse(raw).map_err(|e| {
            Refused(format!(
                "not an absolute URL ({e}); give e.g. https://example.com/webhooks"
            ))
        })?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => {
                return Err(Refused(
                    "must use https:// (http:// is accepted only when webhooks.allow_http is true)"
                        .into(),
                ));
            }
            other => {
                return Err(Refused(format!(
                    "scheme `{other}` is not supported; use https://"
                )));
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused(
                "credentials in the URL are not accepted; receivers authenticate deliveries by \
                 their signature"
                    .into(),
            ));
        }
        match url.host() {
            None => return Err(Refused("the URL has no host".into())),
            Some(Host::Ipv4(v4)) => self.check_ip(IpAddr::V4(v4))?,
            Some(Host::Ipv6(v6)) => self.check_ip(IpAddr::V6(v6))?,
            Some(Host::Domain(_)) => {}
        }
        Ok(url)
    }

    /// Checks the URL and every address its host resolves to.
    pub async fn check_url_resolved(&self, raw: &str) -> Result<Url, Refused> {
        self.check_url_resolved_by(raw, &SystemLookup).await
    }

    /// [`Self::check_url_resolved`] with the names looked up by `names`.
    pub async fn check_url_resolved_by(
        &self,
        raw: &str,
        names: &impl NameLookup,
    ) -> Result<Url, Refused> {
        let url = self.check_url(raw)?;
        if let Some(Host::Domain(domain)) = url.host() {
            let port = url.port_or_known_default().unwrap_or(443);
            let addrs = resolve(names, domain, port).await?;
            for addr in addrs {
                self.check_ip(addr.ip())?;
            }
        }
        Ok(url)
    }
}

/// Looks host names up: the system's resolver in the service, a stub in tests.
pub trait NameLookup: 'static {
    fn lookup_host<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> LocalBoxFuture<'a, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl NameLookup for SystemLookup {
    fn lookup_host<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> LocalBoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

async fn resolve(
    names: &impl NameLookup,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Refused> {
    let addrs = names
        .lookup_host(host, port)
        .await
        .map_err(|e| Refused(format!("the host `{host}` does not resolve ({e})")))?;
    if addrs.is_empty() {
        return Err(Refused(format!("the host `{host}` has no address")));
    }
    Ok(addrs)
}

/// The delivery client's resolver: names resolving to a refused address fail to connect. Each
/// connection resolves anew, so a name that answers a public address at registration and a
/// private one later (DNS rebinding) is refused when it matters.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver<L = SystemLookup> {
    pub policy: GuardPolicy,
    pub names: L,
}

impl GuardedResolver {
    pub fn new(policy: GuardPolicy) -> Self {
        GuardedResolver {
            policy,
            names: SystemLookup,
        }
    }
}

impl<L: NameLookup> Resolve for GuardedResolver<L> {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> LocalBoxFuture<'a, Result<Vec<SocketAddr>, Box<dyn std::error::Error>>> {
        Box::pin(async move {
            // An IPv6 literal arrives with its brackets.
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            if let Ok(ip) = bare.parse::<IpAddr>() {
                self.policy.check_ip(ip)?;
                return Ok(vec![SocketAddr::new(ip, port)]);
            }
            let addrs = resolve(&self.names, host, port).await?;
            for addr in &addrs {
                self.policy.check_ip(addr.ip())?;
            }
            Ok(addrs)
        })
    }
}

/// `::1`-style literal hosts never reach the resolver; the dispatcher checks them itself.
pub fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        Host::Domain(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: GuardPolicy = GuardPolicy {
        allow_http: false,
        allow_private_networks: false,
    };

    #[test]
    fn non_public_addresses_are_named() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "private"),
            ("169.254.169.254", "link-local"),
            ("224.0.0.1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("255.255.255.255", "reserved"),
            ("240.0.0.1", "reserved"),
            ("198.18.0.1", "reserved"),
            ("64:ff9b::a00:5", "private"),
            ("64:ff9b::808:808", "translated"),
            ("2002:a00:1::1", "private"),
            ("2002:808:808::1", "translated"),
            ("::a00:1", "private"),
            ("::808:808", "translated"),
            ("fec0::1", "link-local"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "private"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:10.0.0.1", "private"),
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(ip), Some(kind), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "172.32.0.1"] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn urls_are_checked_before_resolving() {
        assert!(STRICT.check_url("https://example.com/hook").is_ok());
        let err = STRICT
            .check_url("http://example.com/hook")
            .expect_err("http");
        assert!(err.0.contains("webhooks.allow_http"), "{err}");
        let err = STRICT
            .check_url("https://127.0.0.1/hook")
            .expect_err("loopback");
        assert!(err.0.contains("webhooks.allow_private_networks"), "{err}");
        assert!(STRICT.check_url("https://[::1]/hook").is_err());
        assert!(STRICT.check_url("ftp://example.com").is_err());
        assert!(STRICT.check_url("https://u:p@example.com").is_err());
        assert!(STRICT.check_url("not a url").is_err());
        let open = GuardPolicy {
            allow_http: true,
            allow_private_networks: true,
        };
        assert!(open.check_url("http://127.0.0.1:9/x").is_ok());
    }

    #[actix_rt::test]
    async fn names_are_resolved_and_checked() {
        let err = STRICT
            .check_url_resolved("https://localhost/hook")
            .await
            .expect_err("localhost is loopback");
        assert!(err.0.contains("loopback"), "{err}");
        let err = STRICT
            .check_url_resolved("https://no-such-host.invalid/hook")
            .await
            .expect_err("does not resolve");
        assert!(err.0.contains("does not resolve"), "{err}");
        let err = GuardedResolver::new(STRICT)
            .lookup("localhost", 80)
            .await
            .expect_err("refused at connect time");
        assert!(err.to_string().contains("loopback"));
    }

    /// Names answered from a table, never by a resolver: no test connects anywhere.
    struct Stub(Vec<(&'static str, IpAddr)>);

    impl NameLookup for Stub {
        fn lookup_host<'a>(
            &'a self,
            host: &'a str,
            port: u16,
        ) -> LocalBoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
            let found: Vec<SocketAddr> = self
                .0
                .iter()
                .filter(|(name, _)| *name == host)
                .map(|(_, ip)| SocketAddr::new(*ip, port))
                .collect();
            Box::pin(async move { Ok(found) })
        }
    }

    /// One address of each range that is not public although it looks it, with its kind.
    const HIDDEN: &[(&str, &str)] = &[
        // IPv4-translated (::ffff:0:0:0/96) and IPv4-mapped (::ffff:0:0/96).
        ("::ffff:0:808:808", "translated"),
        ("::ffff:0:7f00:1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:192.0.2.1", "documentation"),
        // NAT64, with the IPv4 address inside checked.
        ("64:ff9b::808:808", "translated"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("64:ff9b:1::1", "unspecified"),
        // 6to4.
        ("2002:808:808::", "translated"),
        ("2002:7f00:1::", "loopback"),
        ("2002:c0a8:101::1", "private"),
        // Teredo: the client address inverted (7f00:1 as 80ff:fffe).
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "translated"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
        // Documentation.
        ("192.0.2.10", "documentation"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.200", "documentation"),
        ("2001:db8::1", "documentation"),
        ("2001:db8:ffff::1", "documentation"),
        ("3fff::1", "documentation"),
        ("3fff:fff:ffff::1", "documentation"),
        ("2001:2::1", "reserved"),
        // Benchmarking, reserved.
        ("198.18.0.1", "reserved"),
        ("198.19.255.254", "reserved"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.254", "reserved"),
        ("100::1", "reserved"),
    ];

    #[test]
    fn ranges_that_look_public_are_named() {
        for (ip, kind) in HIDDEN {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(ip), Some(*kind), "{ip}");
        }
        // Their neighbours are public.
        for ip in [
            "192.0.3.1",
            "198.51.101.1",
            "203.0.114.1",
            "198.20.0.1",
            "2001:db9::1",
            "2001:1::1",
            "2003::1",
            "3ffe::1",
            "3fff:1000::1",
            "2001:2:1::1",
            "64:ff9a::1",
        ] {
            let parsed: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(parsed), None, "{ip}");
        }
    }

    #[actix_rt::test]
    async fn each_range_is_refused_at_registration_and_at_connect() {
        let stub = Stub(
            HIDDEN
                .iter()
                .enumerate()
                .map(|(n, (ip, _))| {
                    let name: &'static str =
                        Box::leak(format!("h{n}.example.com").into_boxed_str());
                    (name, ip.parse().expect("ip"))
                })
                .chain([("public.example.com", "8.8.4.4".parse().expect("ip"))])
                .collect(),
        );
        let resolver = GuardedResolver {
            policy: STRICT,
            names: Stub(stub.0.clone()),
        };
        for (n, (ip, kind)) in HIDDEN.iter().enumerate() {
            let host = format!("h{n}.example.com");
            // At registration: the name's addresses, and the address as a literal.
            let err = STRICT
                .check_url_resolved_by(&format!("https://{host}/hook"), &stub)
                .await
                .expect_err(ip);
            assert!(err.0.contains(&format!("a {kind} address")), "{ip}: {err}");
            let literal = if ip.contains(':') {
                format!("https://[{ip}]/hook")
            } else {
                format!("https://{ip}/hook")
            };
            let err = STRICT.check_url(&literal).expect_err(ip);
            assert!(err.0.contains(&format!("a {kind} address")), "{ip}: {err}");
            // At connect: what the delivery client's resolver answers.
            let err = resolver.lookup(&host, 443).await.expect_err(ip);
            assert!(
                err.to_string().contains(&format!("a {kind} address")),
                "{ip}: {err}"
            );
            let bare = resolver.lookup(ip, 443).await.expect_err(ip);
            assert!(
                bare.to_string().contains(&format!("a {kind} address")),
                "{ip}: {bare}"
            );
        }
        // A public name passes both, and allow_private_networks lets the others through.
        STRICT
            .check_url_resolved_by("https://public.example.com/hook", &stub)
            .await
            .expect("public");
        let found = resolver
            .lookup("public.example.com", 443)
            .await
            .expect("public");
        assert_eq!(
            found,
            vec!["8.8.4.4:443".parse::<SocketAddr>().expect("addr")]
        );
        let open = GuardPolicy {
            allow_http: false,
            allow_private_networks: true,
        };
        open.check_url_resolved_by("https://h0.example.com/hook", &stub)
            .await
            .expect("allowed");
    }
}
