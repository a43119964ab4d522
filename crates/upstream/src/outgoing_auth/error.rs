//! Why the gateway has no credential to send upstream. Every variant's text is fixed words,
//! plus at most the token service's `error` code (one of the registered ones): never a token,
//! a client secret, the token service's URL or body, or anything else it wrote. The text
//! reaches clients, logs and the audit log.

/// Why an outgoing credential could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutgoingAuthError {
    /// The backend acts as the caller (token exchange, passthrough), and this caller has no
    /// bearer token of its own (an API key's holder, an anonymous caller). Refused: the call is
    /// never sent with the gateway's identity, nor without one.
    #[error("this backend acts as the caller (token exchange or passthrough), and the caller has no bearer token of its own to act with (API keys and anonymous callers have none): authenticate with a token from the configured issuer")]
    NoSubjectToken,
    /// The token service refused the request with this registered error code
    /// (`invalid_grant`, `invalid_client`, `invalid_target`, ...).
    #[error("the token service refused to issue a token for this backend: {code}")]
    Refused {
        /// The `error` member of its answer, if it is a registered code; else `invalid_response`.
        code: String,
    },
    /// The token service answered with an HTTP error status and no RFC 6749 error.
    #[error("the token service answered HTTP {status}")]
    Status {
        /// The HTTP status.
        status: u16,
    },
    /// The token service's answer is not a usable token response (what is wrong, in fixed
    /// words).
    #[error("the token service sent an unusable token response: {0}")]
    Malformed(&'static str),
    /// The token service could not be reached (details are logged at debug, without the URL's
    /// query).
    #[error("the token service is unreachable")]
    Unreachable,
    /// The token service did not answer in time.
    #[error("the token service did not answer in time")]
    Timeout,
    /// An upstream session opened for one caller was asked to carry another's request.
    #[error("an upstream session carries the requests of the caller it was opened for only")]
    ForeignSession,
    /// The backend needs the user's consent (per-user OAuth): the user must open the
    /// authorization URL. The text names the backend only: the URL goes to the user through
    /// the error mapping, never into a log line.
    #[error("backend {} needs your authorization: open the authorization URL this error carries, then retry", .0.backend)]
    ConsentRequired(Box<super::oauth::Consent>),
    /// The backend keeps asking for more scope (403 `insufficient_scope`) after the bounded
    /// number of re-authorizations.
    #[error("the backend still refuses for insufficient scope after repeated authorization; not asking again")]
    StepUpLimit,
    /// Discovering or using the backend's authorization server failed (fixed words).
    #[error("authorization discovery failed: {0}")]
    Discovery(&'static str),
    /// The authorization server refused the dynamic client registration (its error code,
    /// when a plain one).
    #[error("the authorization server refused to register the gateway as a client: {0}")]
    RegistrationRefused(String),
    /// The configuration cannot work (an unusable token endpoint URL, client id or secret).
    #[error("outgoing auth misconfigured: {0}")]
    Config(&'static str),
}

/// The error codes a token endpoint may answer with: RFC 6749 §5.2, and `invalid_target`
/// (RFC 8693 §2.2.2, RFC 8707 §2). Only these are passed on.
const REGISTERED: [&str; 7] = [
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "unauthorized_client",
    "unsupported_grant_type",
    "invalid_scope",
    "invalid_target",
];

impl OutgoingAuthError {
    /// The token service's error code, as an error to report: kept only when it is one of the
    /// registered codes, which carry nothing of the service's choosing (a well-formed but
    /// unregistered code could still spell a user name, a tenant, a fragment of what it was
    /// sent). Anything else is reported as `invalid_response`.
    pub(crate) fn refused(code: Option<&str>) -> Self {
        let code = code
            .and_then(|c| REGISTERED.iter().find(|r| **r == c))
            .copied()
            .unwrap_or("invalid_response");
        OutgoingAuthError::Refused {
            code: code.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_code_is_kept() {
        let code = |e: OutgoingAuthError| match e {
            OutgoingAuthError::Refused { code } => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(OutgoingAuthError::refused(Some("invalid_grant"))),
            "invalid_grant"
        );
        for bad in [
            None,
            Some(""),
            Some("secret=hunter2"),
            Some("a b"),
            Some("line\nbreak"),
            Some(&"x".repeat(65)),
        ] {
            assert_eq!(code(OutgoingAuthError::refused(bad)), "invalid_response");
        }
    }

    #[test]
    fn only_a_registered_code_is_kept() {
        let code = |c: &str| match OutgoingAuthError::refused(Some(c)) {
            OutgoingAuthError::Refused { code } => code,
            other => panic!("{other:?}"),
        };
        for registered in [
            "invalid_request",
            "invalid_client",
            "invalid_grant",
            "unauthorized_client",
            "unsupported_grant_type",
            "invalid_scope",
            "invalid_target",
        ] {
            assert_eq!(code(registered), registered);
        }
        // Well-formed but unregistered: a channel for anything the service cares to write
        // (a user name, a tenant, a fragment of what it was sent).
        for unregistered in [
            "alice",
            "tenant-acme.internal",
            "Invalid_Grant",
            "eyJhbGciOiJSUzI1NiJ9",
            "server_error",
        ] {
            assert_eq!(code(unregistered), "invalid_response", "{unregistered}");
        }
    }
}
