//! Why a call to a remote MCP server produced no answer.

/// Failures of the remote (Streamable HTTP) upstream. Each says what the remote did, so the
/// gateway can map it (`SessionLost` → re-initialize; the rest → 502/504).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The configured URL is not an absolute http(s) URL.
    #[error("invalid remote URL: {0}")]
    InvalidUrl(String),
    /// Connecting or talking to the remote failed below HTTP (refused, reset, TLS).
    #[error("remote unreachable: {0}")]
    Transport(String),
    /// No complete answer within the configured deadline.
    #[error("remote did not answer in time")]
    Timeout,
    /// The remote answered 404 for the upstream session: it restarted or expired it. The
    /// session is forgotten; the caller must initialize a new one.
    #[error("remote lost the session")]
    SessionLost,
    /// The upstream session ended (an HTTP+SSE stream closed) while the call was in flight:
    /// unlike [`RemoteError::SessionLost`], the remote may have run it.
    #[error("remote session ended with the call in flight")]
    SessionEndedInFlight,
    /// An HTTP error status without a JSON-RPC answer in the body. The body itself is never
    /// kept: a remote may quote what it was sent (`401 denied auth=<the header>`), and this
    /// error's text reaches logs, the audit log and startup errors.
    #[error("remote answered HTTP {status}")]
    Status {
        /// The HTTP status code.
        status: u16,
    },
    /// A success status whose body is neither JSON nor an event stream (an HTML login page, a
    /// proxy's error page).
    #[error("remote answered {content_type:?} (HTTP {status}), not JSON or SSE")]
    NotJson {
        /// The HTTP status code.
        status: u16,
        /// The `Content-Type` it sent (empty if none).
        content_type: String,
    },
    /// A message or the whole response stream is over its bound.
    #[error("remote response exceeds the {limit}-byte bound")]
    TooLarge {
        /// The bound that was crossed.
        limit: usize,
    },
    /// The body is not the JSON-RPC the request called for.
    #[error("malformed remote response: {0}")]
    Malformed(String),
    /// The response stream ended before the request's answer.
    #[error("remote closed the stream before answering")]
    NoAnswer,
    /// The call was not sent: too many calls already await an answer on this session, or
    /// one with the same id does (HTTP+SSE client).
    #[error("call refused before sending: {0}")]
    Refused(&'static str),
    /// No credential to send could be had (the caller has no token to exchange, the token
    /// service refused or failed): the call was not sent.
    #[error(transparent)]
    OutgoingAuth(#[from] crate::outgoing_auth::OutgoingAuthError),
}
