//! The configured URL of a remote, as the HTTP client gets it: absolute `http(s)` with a host,
//! and without user-info. User-info (`user:password@host`) is never sent (hyper-util sends the
//! host in `Host` and the path as the request target), but the client library logs its
//! connection pool's key, the authority with its user-info, at debug: so the client never
//! sees it.

use hyper::http::uri::{Authority, Parts};
use hyper::Uri;
use tracing::warn;

use super::RemoteError;

/// Why a URL is refused. Never the URL itself: it is the expanded one, which may carry a
/// secret (`${TOKEN}` in a query); the caller names the URL as configured.
pub(crate) const NOT_HTTP: &str = "not an absolute http(s) URL with a host";

/// `url` checked and with any user-info removed.
pub(crate) fn parse(url: &str) -> Result<Uri, RemoteError> {
    parse_noting(url).map(|(uri, _)| uri)
}

/// [`parse`], and whether user-info was removed.
pub(crate) fn parse_noting(url: &str) -> Result<(Uri, bool), RemoteError> {
    let invalid = || RemoteError::InvalidUrl(NOT_HTTP.into());
    let uri: Uri = url.parse().map_err(|_| invalid())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(invalid());
    }
    let Some(host) = uri
        .authority()
        .and_then(|a| a.as_str().rsplit_once('@'))
        .map(|(_, host)| host.to_owned())
    else {
        return Ok((uri, false));
    };
    let mut parts = Parts::from(uri);
    parts.authority = Some(Authority::try_from(host).map_err(|_| invalid())?);
    let uri = Uri::from_parts(parts).map_err(|_| invalid())?;
    Ok((uri, true))
}

/// Says once per endpoint that a URL's user-info is ignored (it never was sent).
pub(crate) fn warn_user_info_ignored() {
    warn!(
        "the remote URL's user-info (user:password@) is ignored: it is not sent; configure \
         an Authorization header instead"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_is_removed_and_the_rest_kept() {
        let uri = parse("https://u:p%40ss@Example.com:8443/mcp?x=1").unwrap();
        assert_eq!(uri.to_string(), "https://Example.com:8443/mcp?x=1");
        assert!(!format!("{uri:?}").contains("p%40ss"));
        let (plain, had) = parse_noting("http://127.0.0.1:9/mcp").unwrap();
        assert_eq!(plain.to_string(), "http://127.0.0.1:9/mcp");
        assert!(!had);
        assert!(parse_noting("http://u@h/mcp").unwrap().1);
    }

    #[test]
    fn only_absolute_http_urls_with_a_host_are_accepted() {
        for bad in ["ftp://h/sse", "/sse", "not a url", "http://u:p@/mcp"] {
            assert!(
                matches!(parse(bad), Err(RemoteError::InvalidUrl(_))),
                "{bad}"
            );
        }
    }
}
