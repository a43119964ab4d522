//! The HTTP client the gateway's own outbound requests use (the JWKS fetch, the hop to
//! another replica): hyper-util's pooled client over rustls with the ring provider, passed
//! explicitly (no process-wide default), and the system's root certificates.

use std::sync::Arc;

use tracing::warn;

/// An http/https client sending bodies of type `B`.
pub(crate) type Client<B> = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    B,
>;

/// A client for `http://` and `https://` URLs (see the module docs).
pub(crate) fn client<B>(connect_timeout: std::time::Duration) -> Client<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    // A peer that vanished (a replica's host gone, a black-holed route) is found within
    // about 30 s even while an answer may legitimately take long (a hop waits up to
    // `--max-request-time`): TCP keepalive probes, not a shorter deadline.
    http.set_keepalive(Some(std::time::Duration::from_secs(15)));
    http.set_keepalive_interval(Some(std::time::Duration::from_secs(5)));
    http.set_keepalive_retries(Some(3));
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder =
        match builder.with_provider_and_native_roots(rustls::crypto::ring::default_provider()) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "no system root certificates: https URLs will fail");
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                    rustls::ClientConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_safe_default_protocol_versions()
                    .unwrap_or_else(|_| unreachable_versions())
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
                )
            }
        };
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector)
}

/// ring supports rustls' default protocol versions; this is never reached.
fn unreachable_versions() -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier> {
    rustls::ClientConfig::builder_with_protocol_versions(rustls::DEFAULT_VERSIONS)
}
