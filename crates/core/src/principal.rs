//! Who is calling: the authenticated [`Principal`] every request carries, and what makes two
//! callers the same owner. `http` authenticates; everything in core that keeps or checks an
//! owner compares principals through this type.

use serde_json::Value;

/// An authenticated caller: who issued its credential, and whom it names. Two principals are
/// the same owner exactly when both are equal (the credential itself takes no part: a caller
/// that refreshed its token is the same caller).
#[derive(Debug, Clone)]
pub struct Principal {
    /// Token issuer (`iss`), `api-key` for static keys, `anonymous` without authentication.
    pub issuer: String,
    /// Subject (`sub`), the key's name, or `anonymous`.
    pub subject: String,
    /// Verified JWT claims, for policies (`context.claims`). Empty for other credentials.
    pub claims: serde_json::Map<String, Value>,
    /// The caller's credential, for a remote backend that acts as the caller (passthrough,
    /// token exchange): its verified JWT as presented, or, for an API key's holder (a gateway
    /// secret, never a remote's) and anonymous callers, one without a token (such a backend
    /// refuses to act for them). `None` only in the gateway's own bookkeeping copies.
    pub credential: Option<switchboard_upstream::Credential>,
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.issuer == other.issuer && self.subject == other.subject && self.claims == other.claims
    }
}

impl Eq for Principal {}

impl Principal {
    /// The principal of every unauthenticated caller.
    pub fn anonymous() -> Self {
        Principal {
            issuer: "anonymous".to_owned(),
            subject: "anonymous".to_owned(),
            claims: serde_json::Map::new(),
            credential: Some(switchboard_upstream::Credential::without_token(
                "anonymous",
                "anonymous",
            )),
        }
    }

    /// Whether this is the principal of unauthenticated callers, whom nothing tells apart.
    pub fn is_anonymous(&self) -> bool {
        is_anonymous(&self.issuer, &self.subject)
    }

    /// Whether `self` and `other` are the same owner (issuer and subject).
    pub fn same_owner(&self, other: &Principal) -> bool {
        self.issuer == other.issuer && self.subject == other.subject
    }

    /// Whether the caller's token has expired (its `exp` claim; a NumericDate may have a
    /// fraction, RFC 7519, which the token's validation accepts). A credential without one
    /// (an API key, anonymous) never expires. What the gateway does as the caller after the
    /// request arrived (a watched listen's polls) stops then.
    pub(crate) fn expired(&self) -> bool {
        let exp = self.claims.get("exp").and_then(|exp| {
            exp.as_u64().or_else(|| {
                exp.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
        });
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        exp.is_some_and(|exp| now >= exp)
    }

    pub(crate) fn key(&self) -> String {
        format!("{}\u{0}{}", self.issuer, self.subject)
    }
}

/// Whether (`issuer`, `subject`) is the anonymous principal's (the reserved issuer: no
/// token's can be it).
pub(crate) fn is_anonymous(issuer: &str, subject: &str) -> bool {
    issuer == "anonymous" && subject == "anonymous"
}
