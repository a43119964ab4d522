//! DNS-rebinding protection: `Host` and `Origin` allow-lists.
//!
//! A web page on evil.example can resolve its own name to 127.0.0.1 and make the browser talk
//! to a local gateway; the browser then sends `Host: evil.example` and `Origin:
//! http://evil.example`. A gateway bound to loopback therefore accepts only loopback hosts and
//! origins unless told otherwise. Violations get 403 and a JSON-RPC error without id.

use axum::extract::Request;
use axum::http::{header, HeaderMap};

use crate::error::HttpError;
use crate::AppState;

/// Which `Host` and `Origin` values are accepted.
#[derive(Debug, Clone, Default)]
pub struct OriginPolicy {
    /// Accepted host names (without port, lowercase). `None` accepts any.
    pub hosts: Option<Vec<String>>,
    /// Accepted origins (`scheme://host[:port]`, lowercase) or bare host names, which accept
    /// that host on any scheme and port. `None` accepts any; requests without `Origin` (non-
    /// browser clients) are always accepted.
    pub origins: Option<Vec<String>>,
}

impl OriginPolicy {
    /// Loopback only: the safe default for a gateway bound to 127.0.0.1 / ::1 / localhost.
    pub fn loopback() -> Self {
        let names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ];
        OriginPolicy {
            hosts: Some(names.clone()),
            origins: Some(names),
        }
    }

    /// No restriction (an operator bound a public address and fronts it with their own proxy).
    pub fn any() -> Self {
        OriginPolicy::default()
    }

    fn check(&self, headers: &HeaderMap) -> Result<(), HttpError> {
        // One value each, or the check could approve one value while a proxy or the backend
        // acts on another (RFC 9112 §3.2 makes a repeated Host a 400 anyway). Authorization
        // too: which credential the caller meant must not depend on who reads first.
        let repeated = crate::headers::any_repeated(headers);
        for name in [header::HOST, header::ORIGIN, header::AUTHORIZATION] {
            if repeated && headers.get_all(&name).iter().nth(1).is_some() {
                return Err(HttpError::DuplicateHeader(name.as_str().to_owned()));
            }
        }
        if let Some(hosts) = &self.hosts {
            let host = headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(strip_port(host)))
            {
                return Err(HttpError::Forbidden("Forbidden: Host not allowed"));
            }
        }
        // A browser's request without `Origin` (a no-cors GET: an `<img>` or `<script>` of
        // another page opening `/sse`, even one on another port of this host) still says
        // where it comes from: only the gateway's own pages and the user's own navigation
        // pass. A browser client's CORS requests carry `Origin`, judged below.
        if self.origins.is_some()
            && headers.get(header::ORIGIN).is_none()
            && (headers.get(SEC_FETCH_SITE))
                .is_some_and(|v| !matches!(v.as_bytes(), b"same-origin" | b"none"))
        {
            return Err(HttpError::Forbidden("Forbidden: cross-site request"));
        }
        if let (Some(origins), Some(origin)) = (&self.origins, headers.get(header::ORIGIN)) {
            let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
            let host = origin
                .split_once("://")
                .map_or("", |(_, rest)| strip_port(rest));
            let ok = origins
                .iter()
                .any(|o| *o == origin || o.eq_ignore_ascii_case(host));
            if !ok {
                return Err(HttpError::Forbidden("Forbidden: Origin not allowed"));
            }
        }
        Ok(())
    }
}

/// What a browser says of where its request comes from (Fetch Metadata).
const SEC_FETCH_SITE: header::HeaderName = header::HeaderName::from_static("sec-fetch-site");

/// `host[:port]` → `host`, keeping IPv6 brackets.
fn strip_port(authority: &str) -> &str {
    let authority = authority.split('/').next().unwrap_or(authority);
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// The admission step applying the state's [`OriginPolicy`] before any MCP handling.
pub(crate) fn admit(state: &AppState, request: &Request) -> Result<(), HttpError> {
    state.config.origin.check(request.headers())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    }

    #[test]
    fn loopback_policy() {
        let p = OriginPolicy::loopback();
        for (host, origin) in [
            ("127.0.0.1:8080", None),
            ("localhost", Some("http://localhost:3000")),
            ("[::1]:9", Some("https://127.0.0.1")),
            ("LOCALHOST:1", Some("http://[::1]:5")),
        ] {
            assert!(p.check(&headers(host, origin)).is_ok(), "{host} {origin:?}");
        }
        for (host, origin) in [
            ("evil.example.com", None),
            ("127.0.0.1:8080", Some("http://evil.example.com")),
            ("127.0.0.1.evil.com", None),
            ("localhost", Some("http://localhost.evil.com")),
            ("localhost", Some("null")),
        ] {
            assert!(
                p.check(&headers(host, origin)).is_err(),
                "{host} {origin:?}"
            );
        }
        assert!(OriginPolicy::any()
            .check(&headers("evil.example.com", Some("http://x")))
            .is_ok());
    }

    /// Another page opening `/sse` or `/mcp` without `Origin` (a no-cors GET) is refused by
    /// what the browser says of it (review LOW: it opened sessions on a loopback gateway); a
    /// request of the gateway's own origin, the user's own navigation, or no browser, is not.
    #[test]
    fn a_cross_site_request_without_origin_is_refused() {
        let with = |site: Option<&str>| {
            let mut h = headers("127.0.0.1:8080", None);
            if let Some(site) = site {
                h.insert("sec-fetch-site", HeaderValue::from_str(site).unwrap());
            }
            h
        };
        let p = OriginPolicy::loopback();
        // Same-site: a page on another port of this host (review LOW of bb1820f).
        for refused in ["cross-site", "same-site"] {
            assert!(p.check(&with(Some(refused))).is_err(), "{refused}");
        }
        for fine in [None, Some("same-origin"), Some("none")] {
            assert!(p.check(&with(fine)).is_ok(), "{fine:?}");
        }
        assert!(OriginPolicy::any().check(&with(Some("cross-site"))).is_ok());
    }

    /// A repeated Host, Origin or Authorization is refused whatever the values and their
    /// order: otherwise the allowed first value would vouch for an evil second one.
    #[test]
    fn repeated_host_origin_or_authorization_is_refused() {
        for policy in [OriginPolicy::loopback(), OriginPolicy::any()] {
            for name in [header::HOST, header::ORIGIN, header::AUTHORIZATION] {
                for pair in [
                    ["localhost", "evil.example.com"],
                    ["evil.example.com", "localhost"],
                ] {
                    let mut h = headers("localhost", None);
                    h.remove(&name);
                    for v in pair {
                        let v = if name == header::ORIGIN {
                            format!("http://{v}")
                        } else {
                            v.into()
                        };
                        h.append(&name, HeaderValue::from_str(&v).unwrap());
                    }
                    let refused = policy.check(&h);
                    assert!(
                        matches!(&refused, Err(HttpError::DuplicateHeader(n)) if n == name.as_str()),
                        "{name} {pair:?}: {refused:?}"
                    );
                }
            }
        }
    }
}
