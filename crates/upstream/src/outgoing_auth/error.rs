//! Why the gateway has no credential to send upstream. Every variant's text is fixed words,
//! plus at most the token service's RFC 6749 `error` code (checked to be one): never a token,
//! a client secret, the token service's URL or body, or anything else it wrote. The text
//! reaches clients, logs and the audit log.

/// Why an outgoing credential could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutgoingAuthError {
    /// The backend acts as the caller through token exchange, and this caller has no bearer
    /// token to exchange (an API key's holder, an anonymous caller). Refused: the call is
    /// never sent with the gateway's identity, nor without one.
    #[error("this backend acts as the caller through token exchange, and the caller has no bearer token to exchange (API keys and anonymous callers have none): authenticate with a token from the configured issuer")]
    NoSubjectToken,
    /// The token service refused the request with this RFC 6749 error code
    /// (`invalid_grant`, `invalid_client`, `invalid_target`, ...).
    #[error("the token service refused to issue a token for this backend: {code}")]
    Refused {
        /// The `error` member of its answer, if it is a well-formed code; else `invalid_response`.
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
    /// The configuration cannot work (an unusable token endpoint URL, client id or secret).
    #[error("outgoing auth misconfigured: {0}")]
    Config(&'static str),
}

impl OutgoingAuthError {
    /// The token service's error code, as an error to report: kept only when it is an RFC 6749
    /// `error` value that cannot carry anything else (ASCII letters, digits, `_`, `-`, `.`, at
    /// most 64 of them). Anything else is reported as `invalid_response`.
    pub(crate) fn refused(code: Option<&str>) -> Self {
        let code = code
            .filter(|c| {
                !c.is_empty()
                    && c.len() <= 64
                    && c.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            })
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
}
