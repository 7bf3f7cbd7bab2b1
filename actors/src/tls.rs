//! TLS for outgoing connections (webhooks and the exchange): rustls with the webpki roots.

use std::sync::Arc;

/// rustls with the webpki roots, for webhooks and the exchange.
pub fn client_config() -> Option<rustls::ClientConfig> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tracing::error!(error = %e, "TLS for webhooks is unavailable"))
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(config)
}

#[cfg(test)]
mod tests {
    /// No HTTP/2 connection is ever made (deny.toml's h2 exception rests on it): the TLS of
    /// webhooks and the exchange offers http/1.1 alone in ALPN.
    #[test]
    fn alpn_offers_http1_alone() {
        let config = super::client_config().expect("TLS");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
