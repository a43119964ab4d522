//! Where an HTTP+SSE server says to POST: the data of its `endpoint` event, resolved against
//! the SSE URL (RFC 3986 §5.2) and refused unless it is the same origin (scheme, host, port).
//! We send the configured credential headers on every POST, so a server must not be able to
//! point them at another host. The endpoint carries the server's session id: it is never put
//! into an error or a log line.

use hyper::Uri;

use super::RemoteError;

/// The configured SSE URL: absolute `http(s)` with a host, user-info removed.
pub(super) fn parse_base(url: &str) -> Result<Uri, RemoteError> {
    crate::remote::url::parse(url)
}

fn refused(why: &str) -> RemoteError {
    RemoteError::Malformed(format!("the endpoint event {why}"))
}

/// The POST URL named by `reference` (the endpoint event's data), relative to `base`.
pub(super) fn resolve(base: &Uri, reference: &str) -> Result<Uri, RemoteError> {
    let reference = reference.trim();
    // A fragment is never sent to a server.
    let reference = reference.split('#').next().unwrap_or_default();
    if reference.is_empty() {
        return Err(refused("is empty"));
    }
    let scheme = base.scheme_str().unwrap_or("http");
    let target = if has_scheme(reference) {
        reference.to_owned()
    } else if reference.starts_with("//") {
        format!("{scheme}:{reference}")
    } else {
        let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
        let (path, query) = match reference.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (reference, None),
        };
        let path = if path.is_empty() {
            base.path().to_owned()
        } else if path.starts_with('/') {
            path.to_owned()
        } else {
            merge(base.path(), path)
        };
        let query = query.map(|q| format!("?{q}")).unwrap_or_default();
        format!(
            "{scheme}://{authority}{}{query}",
            remove_dot_segments(&path)
        )
    };
    let uri: Uri = target.parse().map_err(|_| refused("is not a valid URL"))?;
    if !same_origin(base, &uri) {
        return Err(refused(
            "names another origin than the SSE URL; refused so that our request headers \
             never go to another server",
        ));
    }
    Ok(uri)
}

/// Whether `s` starts with `scheme ":"` (RFC 3986 §3.1), i.e. is an absolute URI.
fn has_scheme(s: &str) -> bool {
    let Some((scheme, _)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `base`'s directory followed by the relative path `path` (RFC 3986 §5.2.3).
fn merge(base: &str, path: &str) -> String {
    let dir = base.rfind('/').map_or("/", |i| &base[..=i]);
    format!("{dir}{path}")
}

/// RFC 3986 §5.2.4 for a path that starts with `/`: `.` and `..` segments removed, never
/// climbing above the root.
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    out.pop();
                }
                // A trailing dot segment still names a directory: keep the final slash.
                if i == last {
                    out.push("");
                }
            }
            other => out.push(other),
        }
    }
    format!("/{}", out.join("/"))
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Same scheme, host and (effective) port, and no userinfo hiding in the authority.
fn same_origin(base: &Uri, target: &Uri) -> bool {
    let (Some(bs), Some(ts)) = (base.scheme_str(), target.scheme_str()) else {
        return false;
    };
    let (Some(bh), Some(th)) = (base.host(), target.host()) else {
        return false;
    };
    if target.authority().is_some_and(|a| a.as_str().contains('@')) {
        return false;
    }
    let (bs, ts) = (bs.to_ascii_lowercase(), ts.to_ascii_lowercase());
    let port = |uri: &Uri, scheme: &str| uri.port_u16().or_else(|| default_port(scheme));
    bs == ts && bh.eq_ignore_ascii_case(th) && port(base, &bs) == port(target, &ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Uri {
        parse_base("http://127.0.0.1:8080/mcp/sse").unwrap()
    }

    fn ok(reference: &str) -> String {
        resolve(&base(), reference).unwrap().to_string()
    }

    #[test]
    fn relative_references_resolve_against_the_sse_url() {
        let cases = [
            (
                "/messages?sessionId=abc",
                "http://127.0.0.1:8080/messages?sessionId=abc",
            ),
            (
                "messages?session_id=1",
                "http://127.0.0.1:8080/mcp/messages?session_id=1",
            ),
            ("../messages", "http://127.0.0.1:8080/messages"),
            ("./a/../b/.", "http://127.0.0.1:8080/mcp/b/"),
            ("/../../x", "http://127.0.0.1:8080/x"),
            ("?s=1", "http://127.0.0.1:8080/mcp/sse?s=1"),
            ("  /m#frag \n", "http://127.0.0.1:8080/m"),
            ("//127.0.0.1:8080/m", "http://127.0.0.1:8080/m"),
            ("HTTP://127.0.0.1:8080/m", "http://127.0.0.1:8080/m"),
        ];
        for (reference, want) in cases {
            assert_eq!(ok(reference), want, "{reference}");
        }
    }

    #[test]
    fn the_default_port_is_the_same_origin() {
        let base = parse_base("https://Example.com/sse").unwrap();
        let uri = resolve(&base, "https://example.COM:443/messages").unwrap();
        assert_eq!(uri.path(), "/messages");
    }

    #[test]
    fn another_origin_is_refused() {
        for hostile in [
            "http://evil.example/messages",
            "http://127.0.0.1:8081/messages",
            "https://127.0.0.1:8080/messages",
            "//evil.example/messages",
            "http://user@127.0.0.1:8080/messages",
            "http://127.0.0.1:8080@evil.example/messages",
            "file:///etc/passwd",
            "#only-a-fragment",
            "",
            "/with space",
        ] {
            let err = resolve(&base(), hostile).unwrap_err();
            assert!(
                matches!(err, RemoteError::Malformed(_)),
                "{hostile}: {err:?}"
            );
        }
    }

    #[test]
    fn only_http_sse_urls_are_accepted() {
        for bad in ["ftp://h/sse", "/sse", "not a url"] {
            assert!(matches!(parse_base(bad), Err(RemoteError::InvalidUrl(_))));
        }
    }
}
