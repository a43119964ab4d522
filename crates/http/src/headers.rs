//! Request header checks for the Streamable HTTP transport.

use axum::http::{header, HeaderMap};

use switchboard_wire::version;

use crate::error::HttpError;

/// `Mcp-Session-Id` (header names are case-insensitive).
pub(crate) const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub(crate) const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// Refuses a request that repeats a header the gateway reads: `Content-Type`, `Last-Event-ID`
/// and every `Mcp-*` header (`Mcp-Session-Id`, `MCP-Protocol-Version`, `Mcp-Method`,
/// `Mcp-Name`, `Mcp-Param-*`). With two values the gateway would act on one while a proxy in
/// front of it, or whatever reads the request next, may act on the other. Checked before
/// anything else reads them; `Authorization` has its own rule in `auth`.
pub(crate) fn refuse_duplicates(headers: &HeaderMap) -> Result<(), HttpError> {
    if !any_repeated(headers) {
        return Ok(());
    }
    for name in headers.keys() {
        let read = name == header::CONTENT_TYPE
            || name.as_str().starts_with("mcp-")
            || name.as_str() == "last-event-id";
        if read && headers.get_all(name).iter().nth(1).is_some() {
            return Err(HttpError::DuplicateHeader(name.as_str().to_owned()));
        }
    }
    Ok(())
}

/// Whether any header name occurs more than once: `len` counts values, `keys_len` names, so
/// this is O(1) and lets the common request (no header repeated) skip a hash lookup per
/// header that the duplicate checks would otherwise make.
pub(crate) fn any_repeated(headers: &HeaderMap) -> bool {
    headers.len() != headers.keys_len()
}

/// How the client wants a request's answer delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    Json,
    Sse,
}

/// Checks that the client accepts both JSON and SSE (the spec's MUST) and picks the format:
/// JSON unless the client ranks `text/event-stream` strictly higher, since a single JSON answer
/// is cheaper for both sides.
pub(crate) fn delivery(headers: &HeaderMap) -> Result<Delivery, HttpError> {
    let mut json_q = 0.0f32;
    let mut sse_q = 0.0f32;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let (json, sse) = match media.as_str() {
                "application/json" => (true, false),
                "text/event-stream" => (false, true),
                "*/*" => (true, true),
                "application/*" => (true, false),
                "text/*" => (false, true),
                _ => (false, false),
            };
            if json {
                json_q = json_q.max(q);
            }
            if sse {
                sse_q = sse_q.max(q);
            }
        }
    }
    match (json_q > 0.0, sse_q > 0.0) {
        (true, true) if sse_q > json_q => Ok(Delivery::Sse),
        (true, true) => Ok(Delivery::Json),
        _ => Err(HttpError::NotAcceptable),
    }
}

/// The listen stream (GET) needs `text/event-stream` (or a wildcard) in `Accept`.
pub(crate) fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|r| {
            r.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .any(|m| m == "text/event-stream" || m == "text/*" || m == "*/*")
}

/// The body must be declared JSON.
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), HttpError> {
    let ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if ok {
        Ok(())
    } else {
        Err(HttpError::UnsupportedMediaType)
    }
}

/// `MCP-Protocol-Version`, when present, must name a revision this endpoint serves.
pub(crate) fn check_protocol_version(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(value) = headers.get(PROTOCOL_VERSION) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    if version::is_legacy(text) {
        Ok(())
    } else {
        Err(HttpError::UnsupportedProtocolVersion(
            String::from_utf8_lossy(value.as_bytes()).into_owned(),
        ))
    }
}

/// The raw `Mcp-Session-Id`, if sent. A value that is not visible ASCII can name no session;
/// it is returned as-is and will simply not be found.
pub(crate) fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SESSION_ID)
        .map(|v| v.to_str().unwrap_or("\u{0}invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(v: &str) -> Result<Delivery, HttpError> {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        delivery(&h)
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(
            accept("application/json, text/event-stream").unwrap(),
            Delivery::Json
        );
        assert_eq!(
            accept("text/event-stream, application/json;q=0.5").unwrap(),
            Delivery::Sse
        );
        assert_eq!(accept("*/*").unwrap(), Delivery::Json);
        assert!(accept("application/json").is_err());
        assert!(accept("text/event-stream").is_err());
        assert!(accept("application/json, text/event-stream;q=0").is_err());
        assert!(delivery(&HeaderMap::new()).is_err());
    }

    #[test]
    fn repeated_headers_that_are_read_are_refused() {
        let mut h = HeaderMap::new();
        h.append(header::ACCEPT, HeaderValue::from_static("application/json"));
        h.append(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        h.append("x-other", HeaderValue::from_static("1"));
        h.append("x-other", HeaderValue::from_static("2"));
        h.insert(SESSION_ID, HeaderValue::from_static("a"));
        assert!(
            refuse_duplicates(&h).is_ok(),
            "Accept may repeat; unread ones too"
        );
        for name in [
            "content-type",
            SESSION_ID,
            PROTOCOL_VERSION,
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "last-event-id",
        ] {
            let mut d = h.clone();
            d.append(name, HeaderValue::from_static("x"));
            d.append(name, HeaderValue::from_static("x"));
            match refuse_duplicates(&d) {
                Err(HttpError::DuplicateHeader(n)) => assert_eq!(n, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn protocol_version_header() {
        let mut h = HeaderMap::new();
        assert!(check_protocol_version(&h).is_ok());
        h.insert(PROTOCOL_VERSION, HeaderValue::from_static("2025-06-18"));
        assert!(check_protocol_version(&h).is_ok());
        h.insert(PROTOCOL_VERSION, HeaderValue::from_static("2099-01-01"));
        assert!(check_protocol_version(&h).is_err());
    }
}
