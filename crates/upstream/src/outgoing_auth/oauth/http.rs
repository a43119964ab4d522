//! The OAuth client's HTTP: GETs of metadata documents and POSTs to the registration and
//! token endpoints, on the remote module's connection pool, bounded in time and size. Every
//! URL must be `https`, or plain `http` to a loopback host (as a token endpoint must be:
//! codes, verifiers and secrets cross it). What a server wrote is never put in an error.
//!
//! The URLs come from the backend's answers (its 401's `resource_metadata`, its metadata's
//! `authorization_servers`, the authorization server's endpoints), so a hostile backend
//! chooses them. A backend that is not itself on this host or a private network cannot send
//! the gateway to one: loopback, private, link-local, shared-address and unique-local
//! addresses written as IP literals, and `localhost`, are refused for it; so is a host name
//! that resolves only to such addresses ([`Resolve`]: the addresses connected to are the
//! ones checked, so a name that rebinds between two lookups gains nothing).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request};
use serde_json::Value;
use tracing::debug;

use crate::outgoing_auth::{check_token_endpoint, OutgoingAuthError};

/// Largest document or answer read.
const MAX_BODY: usize = 256 * 1024;

/// The pool and the deadline of one request.
#[derive(Clone)]
pub(crate) struct Http {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector<Resolve>>,
        Full<Bytes>,
    >,
    timeout: Duration,
    /// The backend is itself on this host or a private network: its OAuth endpoints may be.
    local_backend: bool,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An answer: its status and its body as JSON (`None`: not JSON).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) json: Option<Value>,
}

impl Http {
    /// The client for the OAuth endpoints of the backend at `server_url`.
    pub(crate) fn new(timeout: Duration, server_url: &str) -> Self {
        let local_backend = crate::remote::url::parse_noting(server_url)
            .ok()
            .and_then(|(u, _)| u.host().map(local_host))
            .unwrap_or(false);
        let resolve = Resolve {
            allow_local: local_backend,
        };
        let http = hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(resolve);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .build(crate::remote::connector_over(http, timeout));
        Http {
            client,
            timeout,
            local_backend,
        }
    }

    /// Whether a request may go to `uri` for this backend (see the module docs).
    fn may_reach(&self, uri: &hyper::Uri) -> bool {
        self.local_backend || !uri.host().is_some_and(local_host)
    }

    /// The JSON document at `url`; `None` when there is none (any 4xx, or not JSON).
    pub(crate) async fn get_json(&self, url: &str) -> Result<Option<Value>, OutgoingAuthError> {
        let answer = self.send(Method::GET, url, None, None).await?;
        match answer.status {
            200..=299 => Ok(answer.json.filter(Value::is_object)),
            400..=499 => Ok(None),
            status => Err(OutgoingAuthError::Status { status }),
        }
    }

    /// POSTs `body` (`content_type`) to `url`, with `authorization` if given.
    pub(crate) async fn post(
        &self,
        url: &str,
        content_type: &'static str,
        body: String,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, OutgoingAuthError> {
        self.send(Method::POST, url, Some((content_type, body)), authorization)
            .await
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<(&'static str, String)>,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, OutgoingAuthError> {
        let uri = check_token_endpoint(url).map_err(|_| {
            OutgoingAuthError::Discovery(
                "an OAuth endpoint is not an https URL (or http to a loopback host)",
            )
        })?;
        if !self.may_reach(&uri) {
            return Err(OutgoingAuthError::Discovery(
                "an OAuth endpoint of a public server points at this host or a private network; refused",
            ));
        }
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(ACCEPT, "application/json");
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let (content_type, body) = body.unwrap_or(("", String::new()));
        if !content_type.is_empty() {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| OutgoingAuthError::Discovery("an OAuth endpoint URL is not usable"))?;
        let once = async {
            let response = self.client.request(request).await.map_err(|e| {
                debug!(error = %e, "OAuth endpoint unreachable");
                OutgoingAuthError::Unreachable
            })?;
            let status = response.status().as_u16();
            let bytes = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|_| OutgoingAuthError::Malformed("body unreadable or too large"))?
                .to_bytes();
            // As written (`plain`): a hostile server's strings behind serde_json's RawValue
            // key would be parsed again, each with a fresh nesting limit.
            Ok::<_, OutgoingAuthError>(Answer {
                status,
                json: switchboard_wire::plain::parse(&bytes).ok(),
            })
        };
        tokio::time::timeout(self.timeout, once)
            .await
            .map_err(|_| OutgoingAuthError::Timeout)?
    }
}

/// The system's resolver, keeping for a backend that is not itself on this host or a private
/// network (`allow_local` false) only the addresses [`local_host`] does not refuse: none
/// left is a failed lookup, and nothing is connected to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolve {
    allow_local: bool,
}

type Resolved = std::vec::IntoIter<std::net::SocketAddr>;

impl tower_service::Service<hyper_util::client::legacy::connect::dns::Name> for Resolve {
    type Response = Resolved;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Resolved, std::io::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        let allow_local = self.allow_local;
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let kept: Vec<_> = found
                .filter(|a| allow_local || !local_host(&a.ip().to_string()))
                .collect();
            if kept.is_empty() {
                return Err(std::io::Error::other(
                    "the name resolves only to this host or a private network",
                ));
            }
            Ok(kept.into_iter())
        })
    }
}

/// Whether `host` (as a URI spells it) is `localhost` or an IP literal of this host or a
/// private or reserved network: loopback, RFC 1918, link-local, CGNAT (100.64/10), "this
/// network" (0/8), benchmarking (198.18/15), IETF protocol assignments (192.0.0/24),
/// multicast and reserved (224/3), IPv6 unique-local (fc00::/7), link-local (fe80::/10),
/// site-local (fec0::/10), multicast (ff00::/8) and local-use NAT64 (64:ff9b:1::/48);
/// an IPv4 address inside an IPv6 one (mapped, compatible, NAT64 64:ff9b::/96, 6to4
/// 2002::/16) counts as that IPv4 address.
pub(crate) fn local_host(host: &str) -> bool {
    use std::net::IpAddr;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => local_v4(v4),
        Ok(IpAddr::V6(v6)) => match embedded_v4(v6) {
            Some(v4) => local_v4(v4),
            None => {
                let first = v6.segments()[0];
                let s = v6.segments();
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80
                    || (first & 0xffc0) == 0xfec0
                    // Local-use NAT64 (RFC 8215): a network's own translator, whose prefix
                    // (a /48 to /64) places the IPv4 address elsewhere: all of it refused.
                    || (s[0], s[1], s[2]) == (0x64, 0xff9b, 1)
            }
        },
        Err(_) => {
            let name = bare.trim_end_matches('.');
            name.eq_ignore_ascii_case("localhost")
                || name.to_ascii_lowercase().ends_with(".localhost")
        }
    }
}

fn local_v4(v4: std::net::Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_broadcast()
        || a == 0
        || a >= 224
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && c == 0)
}

/// The IPv4 address an IPv6 one carries, where a host or a translator reaches it: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4
/// (`2002:aabb:ccdd::`). `::` and `::1` are IPv6's own.
fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hosts_are_loopback_private_and_link_local_literals() {
        for host in [
            "localhost",
            "LOCALHOST.",
            "a.localhost",
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "[::1]",
            "[fd00::1]",
            "[fe80::1]",
            "[::ffff:10.0.0.1]",
            // Reserved IPv4 ranges, and IPv4 addresses inside IPv6 ones that a host or a
            // translator delivers to (review: these reached this host or its network).
            "0.1.2.3",
            "198.18.0.1",
            "192.0.0.8",
            "224.0.0.1",
            "255.255.255.254",
            "[::10.0.0.5]",
            "[64:ff9b::10.0.0.5]",
            "[64:ff9b::a9fe:a9fe]",
            "[2002:7f00:1::]",
            "[2002:c0a8:101::1]",
            "[64:ff9b:1::a9fe:a9fe]",
            "[64:ff9b:1:0:a:0:100:0]",
            "[fec0::1]",
            "[ff02::1]",
        ] {
            assert!(local_host(host), "{host}");
        }
        for host in [
            "example.com",
            "8.8.8.8",
            "[2001:db8::1]",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "[64:ff9b::8.8.8.8]",
            "[2002:808:808::]",
        ] {
            assert!(!local_host(host), "{host}");
        }
    }

    #[test]
    fn a_public_backend_cannot_send_the_gateway_to_this_host_or_a_private_network() {
        let public = Http::new(Duration::from_secs(1), "https://mcp.example.com/mcp");
        let local = Http::new(Duration::from_secs(1), "http://127.0.0.1:9/mcp");
        let private_as: hyper::Uri = "https://10.0.0.5/token".parse().unwrap();
        let metadata: hyper::Uri = "https://169.254.169.254/latest".parse().unwrap();
        let loopback: hyper::Uri = "http://127.0.0.1:8080/x".parse().unwrap();
        let elsewhere: hyper::Uri = "https://auth.example.com/token".parse().unwrap();
        for uri in [&private_as, &metadata, &loopback] {
            assert!(!public.may_reach(uri), "{uri}");
            assert!(local.may_reach(uri), "{uri}");
        }
        assert!(public.may_reach(&elsewhere));
    }

    /// A name the system resolves to this host (`localhost`, by its hosts file) is no
    /// address at all for a public backend's OAuth requests; for a backend on this host it
    /// is. Before, only IP literals and the name `localhost` itself were refused (review).
    #[tokio::test]
    async fn a_name_resolving_to_this_host_resolves_to_nothing_for_a_public_backend() {
        use tower_service::Service as _;
        let name = |n: &str| n.parse::<hyper_util::client::legacy::connect::dns::Name>();
        let mut public = Resolve { allow_local: false };
        let refused = public.call(name("localhost").unwrap()).await;
        assert!(refused.is_err(), "{refused:?}");
        let mut local = Resolve { allow_local: true };
        let found: Vec<_> = local
            .call(name("localhost").unwrap())
            .await
            .unwrap()
            .collect();
        assert!(found.iter().all(|a| a.ip().is_loopback()) && !found.is_empty());
    }

    #[tokio::test]
    async fn a_refused_endpoint_is_never_contacted() {
        let canary = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/x", canary.local_addr().unwrap());
        let public = Http::new(Duration::from_secs(2), "https://mcp.example.com/mcp");
        // Refused before any connection: a request that reached the canary (which never
        // answers) would have ended in a timeout instead.
        let got = public.get_json(&url).await;
        assert!(
            matches!(got, Err(OutgoingAuthError::Discovery(_))),
            "{got:?}"
        );
        let local = Http::new(Duration::from_millis(300), "http://127.0.0.1:9/mcp");
        let reached = local.get_json(&url).await;
        assert!(
            matches!(reached, Err(OutgoingAuthError::Timeout)),
            "{reached:?}"
        );
        drop(canary);
    }

    /// A document is read as written: serde_json's own `Value` parsed the string behind
    /// `$serde_json::private::RawValue` again, with a fresh nesting limit each time (a hostile
    /// server's 3 KB of strings in strings overflowed a debug build's stack).
    #[tokio::test]
    async fn a_document_is_read_as_written() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/x", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 2048];
            let _ = sock.read(&mut buf).await;
            let body = r#"{"a":{"$serde_json::private::RawValue":"{\"b\":1}"}}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(reply.as_bytes()).await;
        });
        let local = Http::new(Duration::from_secs(5), "http://127.0.0.1:9/mcp");
        let doc = local.get_json(&url).await.unwrap().expect("a document");
        assert_eq!(
            doc["a"]["$serde_json::private::RawValue"], "{\"b\":1}",
            "{doc}"
        );
    }
}
