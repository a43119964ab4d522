//! A caller's own credential, for a remote backend configured to receive it
//! (`forwardCallerToken`). It is the one thing the gateway may pass from a client to a server,
//! so it is a type of its own: never printed, marked sensitive on the wire (HPACK-style
//! indexing off, hidden from hyper's debug output), and only a remote handle whose endpoint
//! says so ever turns it into a header.

use hyper::header::HeaderValue;

/// `Authorization: Bearer <token>` as the caller sent it.
#[derive(Clone)]
pub struct Credential(HeaderValue);

impl Credential {
    /// The bearer token a client presented; `None` when it cannot be a header value.
    pub fn bearer(token: &str) -> Option<Self> {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        value.set_sensitive(true);
        Some(Credential(value))
    }

    /// The `Authorization` header value.
    pub(crate) fn header(&self) -> &HeaderValue {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed_and_sensitive() {
        let c = Credential::bearer("s3cret").unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(c.header().is_sensitive());
        assert_eq!(c.header().to_str().unwrap(), "Bearer s3cret");
        assert!(Credential::bearer("bad\nvalue").is_none());
    }
}
