//! One remote endpoint ([`RemoteEndpoint`]): its URL, outgoing headers, bounds and the
//! connection pool every upstream session on it shares; and the TLS connector every outgoing
//! HTTP client of the gateway is built on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use parking_lot::Mutex;
use tracing::warn;

use super::body::Limits;
use super::MAX_IDLE_CONNECTIONS;
use super::{upstream, url, Inner, RemoteClient, RemoteConfig, RemoteError, RemoteSink};

pub(crate) type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One remote endpoint: its URL, outgoing headers, bounds and connection pool, shared by every
/// upstream session opened on it (building the TLS roots once, not per session).
#[derive(Debug, Clone)]
pub struct RemoteEndpoint {
    inner: Arc<Endpoint>,
}

#[derive(Debug)]
pub(super) struct Endpoint {
    /// As configured (an HTTP+SSE session connects from it).
    pub(super) config: RemoteConfig,
    pub(super) transport: upstream::RemoteTransport,
    /// Cleared when an exchange of any session fails below HTTP, set by any answer: the
    /// remote's health as last seen (for `/healthz`).
    pub(super) reachable: Arc<std::sync::atomic::AtomicBool>,
    pub(super) client: Client,
    pub(super) uri: Uri,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) limits: Limits,
    pub(super) call_timeout: Duration,
    pub(super) send_timeout: Duration,
}

impl RemoteEndpoint {
    /// Checks `config.url` and builds the connection pool. Connects lazily.
    pub fn new(config: RemoteConfig) -> Result<Self, RemoteError> {
        let (uri, had_user_info) = url::parse_noting(&config.url)?;
        if had_user_info {
            url::warn_user_info_ignored();
        }
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                // Idle sockets are fds: a burst must not leave one per call behind.
                .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
                .build(connector(config.connect_timeout));
        Ok(Self {
            inner: Arc::new(Endpoint {
                config: config.clone(),
                transport: upstream::RemoteTransport::Streamable,
                reachable: Arc::new(std::sync::atomic::AtomicBool::new(true)),
                client,
                uri,
                headers: config.headers,
                limits: Limits {
                    message: config.max_message_bytes,
                    stream: config.max_stream_bytes,
                },
                call_timeout: config.call_timeout,
                send_timeout: config.send_timeout,
            }),
        })
    }

    /// The same endpoint, reached over `transport`.
    pub fn with_transport(self, transport: upstream::RemoteTransport) -> Self {
        let endpoint = Endpoint {
            config: self.inner.config.clone(),
            transport,
            reachable: self.inner.reachable.clone(),
            client: self.inner.client.clone(),
            uri: self.inner.uri.clone(),
            headers: self.inner.headers.clone(),
            limits: self.inner.limits,
            call_timeout: self.inner.call_timeout,
            send_timeout: self.inner.send_timeout,
        };
        Self {
            inner: Arc::new(endpoint),
        }
    }

    /// The shared reachability flag (see `Endpoint::reachable`).
    pub(crate) fn reachability(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.inner.reachable.clone()
    }

    /// The configuration it was built from.
    pub(crate) fn config(&self) -> &RemoteConfig {
        &self.inner.config
    }

    /// How requests to it authenticate.
    pub fn auth(&self) -> &crate::outgoing_auth::OutgoingAuth {
        &self.inner.config.auth
    }

    /// The transport this endpoint is reached over.
    pub fn transport(&self) -> upstream::RemoteTransport {
        self.inner.transport
    }

    /// The URL without credentials or query (which may carry secrets), for messages.
    pub fn url(&self) -> String {
        let uri = &self.inner.uri;
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}://{host}{port}{}",
            uri.scheme_str().unwrap_or("http"),
            uri.path()
        )
    }

    /// A client on this endpoint whose unsolicited messages go to `sink`.
    pub fn client(&self, sink: Arc<dyn RemoteSink>) -> RemoteClient {
        RemoteClient {
            inner: Arc::new(Inner {
                endpoint: self.inner.clone(),
                session: Mutex::new(None),
                version: Mutex::new(None),
                last_event: Mutex::new(None),
                caller_auth: Mutex::new(None),
                sink,
            }),
        }
    }
}

pub(crate) fn connector(connect_timeout: Duration) -> hyper_rustls::HttpsConnector<HttpConnector> {
    connector_over(HttpConnector::new(), connect_timeout)
}

/// [`connector`] over `http` (a connector with a resolver of its own).
pub(crate) fn connector_over<R>(
    mut http: HttpConnector<R>,
    connect_timeout: Duration,
) -> hyper_rustls::HttpsConnector<HttpConnector<R>> {
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let provider = || rustls::crypto::ring::default_provider();
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider())
    {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "no system root certificates: https remotes will fail");
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
                .with_protocol_versions(rustls::DEFAULT_VERSIONS)
                .unwrap_or_else(|_| rustls::ClientConfig::builder_with_protocol_versions(&[]))
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    builder.https_or_http().enable_http1().wrap_connector(http)
}
