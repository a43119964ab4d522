//! A caller's own credential, as the gateway verified it: what a remote backend that acts as
//! the caller needs (`forwardCallerToken` / `auth: passthrough` sends it as is; `auth:
//! tokenExchange` exchanges it for a token of the remote's own). It is the one thing the
//! gateway may pass from a client towards a server, so it is a type of its own: never printed,
//! marked sensitive on the wire (HPACK-style indexing off, hidden from hyper's debug output),
//! and only a remote handle whose endpoint says so ever turns it into a header.
//!
//! Every credential names its owner (a digest of the principal's issuer and subject), so an
//! upstream session can refuse to carry a second principal's request: one opened with one
//! caller's token is that caller's alone.
//!
//! A caller without a bearer token of its own (an API key, an anonymous caller) still has a
//! credential: [`Credential::without_token`]. That tells a call on its behalf (which a
//! token-exchange backend must refuse) from the gateway's own requests (no credential at all).

use hyper::header::HeaderValue;
use sha2::{Digest, Sha256};

/// Who a credential belongs to: the SHA-256 of the principal's issuer and subject.
pub(crate) type Owner = [u8; 32];

/// A caller's credential: its bearer token as presented (if it has one), and whose it is.
#[derive(Clone)]
pub struct Credential {
    /// `Authorization: Bearer <token>` as the caller sent it; `None` for a caller with no
    /// bearer token of its own (an API key is a gateway secret, never a remote's).
    header: Option<HeaderValue>,
    owner: Owner,
    /// The token vault's principal key (`principal_key(issuer, subject)`).
    principal: std::sync::Arc<str>,
}

impl Credential {
    /// The bearer token a client presented, verified as `issuer`'s token for `subject`; `None`
    /// when it cannot be a header value.
    pub fn bearer(token: &str, issuer: &str, subject: &str) -> Option<Self> {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        value.set_sensitive(true);
        Some(Credential {
            header: Some(value),
            owner: owner(issuer, subject),
            principal: crate::outgoing_auth::principal_key(issuer, subject).into(),
        })
    }

    /// A caller that has no bearer token to act with (an API key's holder, an anonymous
    /// caller): a call on its behalf is still the caller's, never the gateway's own.
    pub fn without_token(issuer: &str, subject: &str) -> Self {
        Credential {
            header: None,
            owner: owner(issuer, subject),
            principal: crate::outgoing_auth::principal_key(issuer, subject).into(),
        }
    }

    /// Whether the caller presented a bearer token (a verified JWT).
    pub fn has_token(&self) -> bool {
        self.header.is_some()
    }

    /// The `Authorization` header value, if the caller has a token.
    pub(crate) fn header(&self) -> Option<&HeaderValue> {
        self.header.as_ref()
    }

    /// The bearer token itself (the subject of a token exchange).
    pub(crate) fn token(&self) -> Option<&str> {
        let value = self.header.as_ref()?.to_str().ok()?;
        value.strip_prefix("Bearer ").filter(|t| !t.is_empty())
    }

    /// Whose credential it is.
    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Whose credential it is, as the token vault keys it.
    pub fn principal(&self) -> &str {
        &self.principal
    }
}

fn owner(issuer: &str, subject: &str) -> Owner {
    let mut digest = Sha256::new();
    digest.update(b"switchboard-credential-owner\0");
    digest.update(issuer.as_bytes());
    digest.update([0]);
    digest.update(subject.as_bytes());
    digest.finalize().into()
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.header {
            Some(_) => f.write_str("Credential(<redacted>)"),
            None => f.write_str("Credential(<no token>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed_and_sensitive() {
        let c = Credential::bearer("s3cret", "iss", "alice").unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
        let header = c.header().unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), "Bearer s3cret");
        assert_eq!(c.token(), Some("s3cret"));
        assert!(Credential::bearer("bad\nvalue", "iss", "alice").is_none());
    }

    #[test]
    fn owners_are_issuer_and_subject() {
        let a = Credential::bearer("t1", "iss", "alice").unwrap();
        let a2 = Credential::bearer("t2", "iss", "alice").unwrap();
        let b = Credential::bearer("t1", "iss", "bob").unwrap();
        let key = Credential::without_token("api-key", "alice");
        assert_eq!(a.owner(), a2.owner());
        assert_ne!(a.owner(), b.owner());
        assert_ne!(a.owner(), key.owner());
        // The separator keeps ("a", "bc") and ("ab", "c") apart.
        assert_ne!(owner("a", "bc"), owner("ab", "c"));
        assert!(!key.has_token());
        assert_eq!(key.token(), None);
        assert_eq!(format!("{key:?}"), "Credential(<no token>)");
    }
}
