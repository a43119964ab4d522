//! Core errors. `http` maps each variant to a status and a JSON-RPC error in one place.

use switchboard_upstream::UpstreamError;

/// Why the core could not produce a backend answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// Unknown, expired or deleted session id.
    #[error("session not found")]
    SessionNotFound,
    /// The session table is full.
    #[error("too many sessions (limit {0})")]
    TooManySessions(usize),
    /// The caller already holds as many sessions as one principal may.
    #[error("too many sessions for this principal (limit {0}); end one (DELETE) first")]
    TooManyPrincipalSessions(usize),
    /// The backend did not answer within the request deadline.
    #[error("request timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The backend is gone or refused the write.
    #[error(transparent)]
    Backend(#[from] UpstreamError),
    /// A client posted a JSON-RPC response, but no backend request is outstanding for it (in
    /// shared mode none ever is): it can only be an attempt to answer someone else's work.
    #[error("unexpected JSON-RPC response from client")]
    UnexpectedResponse,
    /// The request was cancelled before its answer arrived (by the client's
    /// `notifications/cancelled`, or because its session ended).
    #[error("request cancelled")]
    Cancelled,
    /// The method only makes sense inside a session (subscriptions, log level).
    #[error("{0} requires an Mcp-Session-Id")]
    SessionRequired(&'static str),
    /// The gateway itself validated a parameter and refused it.
    #[error("invalid params: {0}")]
    InvalidParams(&'static str),
    /// A Modern `tools/call`'s `Mcp-Param-*` headers do not mirror its arguments, or its
    /// arguments cannot be read to check them (a number past a double): the error to answer.
    #[error("{}", .0.message)]
    ParamHeaders(switchboard_wire::ErrorObject),
    /// An HTTP+SSE session already runs as many requests as it may.
    #[error("too many requests in flight on this session (limit {0})")]
    SessionBusy(usize),
    /// An HTTP+SSE session's stream has not taken the answers it was sent (past the bytes
    /// given): no more requests until it reads them.
    #[error("the session's stream has not read its answers (over {0} bytes); read them first")]
    AnswersUnread(usize),
    /// The method cannot be served for this backend through the gateway.
    #[error("method not available through the gateway for this backend: {0}")]
    Unsupported(String),
    /// The session store (`--session-store`) did not answer: the session cannot be opened,
    /// or found, here now; the client retries.
    #[error("{0}")]
    Store(String),
    /// The session, or what a request continues, lives in another replica's process: the
    /// HTTP layer forwards the request there (`http::hop`). Never shown to a client: where
    /// no hop is possible it is answered as [`Gone`] says.
    #[error("served by another replica")]
    ServedElsewhere {
        /// The replica serving it, as registered.
        at: ReplicaAt,
        /// What was lost if that address refuses connections (its process is gone).
        gone: Gone,
    },
    /// A listen stream's `Last-Event-ID` names events another replica numbered and keeps:
    /// resumed there, or afresh here when it cannot be reached.
    #[error("stream resumable at another replica")]
    StreamElsewhere(ReplicaAt),
    /// The authorization policy does not allow this operation (kind-only message: the same
    /// for a forbidden target and a missing one).
    #[error("{0}")]
    Forbidden(&'static str),
    /// The caller's (or the tool's) rate limit is exhausted; retry after this many seconds.
    #[error("rate limit exceeded")]
    RateLimited(u64),
    /// Per-session mode: a request on a session whose own backend is not ready yet (its
    /// `initialize` has not been answered, or failed).
    #[error("the session is not initialized: send initialize first")]
    NotInitialized,
    /// Per-session mode: a second `initialize` on an HTTP+SSE session that already has (or
    /// is starting) its own backend.
    #[error("the session is already initialized")]
    AlreadyInitialized,
    /// The caller holds its whole share of the MRTR bridge's dedicated processes (running or
    /// parked calls); retry after this many seconds, or finish one of those calls first.
    #[error("too many Modern calls of this caller are running on dedicated backend processes or waiting for client input (limit {limit}); answer or finish one first")]
    BridgeShareExhausted {
        /// The per-principal share (`--mrtr-per-principal`).
        limit: usize,
        /// When the caller's earliest such call will have ended at the latest.
        retry_after: u64,
    },
    /// The caller holds its whole share of the sealed relay's used-`requestState` table
    /// (tokens it has redeemed that have not expired yet); retry after this many seconds.
    #[error("too many relayed requestStates of this caller are still remembered (limit {limit}); retry later")]
    RelayShareExhausted {
        /// The per-principal share of the table.
        limit: usize,
        /// When the caller's earliest remembered token expires.
        retry_after: u64,
    },
    /// Every dedicated MRTR process (or parking place) is in use, across all callers.
    #[error("every dedicated backend process for Modern calls that may need client input is in use (limit {0}); retry later")]
    BridgeFull(usize),
    /// The caller holds as many `subscriptions/listen` streams open as it may.
    #[error("this caller holds as many listen streams open as it may (limit {0})")]
    TooManyListens(usize),
    /// The session holds as many resource subscriptions as it may.
    #[error("this session holds as many resource subscriptions as it may (limit {0})")]
    TooManySubscriptions(usize),
    /// Every warm Modern partition is in use (per-session mode).
    #[error("too many warm backend processes for Modern callers (limit {0}); retry later")]
    TooManyPartitions(usize),
    /// The caller already holds its share of the warm Modern partitions (per-session mode).
    #[error("this caller holds as many warm backend processes as it may (limit {0}); retry later")]
    PartitionShare(usize),
    /// A route named a backend the gateway does not front (a bug: routes come from the set).
    #[error("no backend named {0}")]
    UnknownBackend(crate::BackendId),

    /// Aggregating: no backend serves this name (unknown, filtered or dropped by the naming
    /// strategy: all three are refused alike).
    #[error("unknown {0}: {1}")]
    UnknownName(&'static str, String),

    /// Aggregating: the tool's definition is not approved (`trust`); the call never reaches
    /// its backend.
    #[error("tool {backend}/{tool} is quarantined: its definition changed since it was pinned, or it is new and not yet approved; an operator must review and approve it")]
    Quarantined {
        backend: crate::BackendId,
        tool: String,
    },

    /// Aggregating: a backend failed the request; the message names it.
    #[error("backend {0}: {1}")]
    OfBackend(crate::BackendId, UpstreamError),

    /// The backend's circuit breaker is open: refused at once, without reaching it.
    #[error("backend \"{backend}\" is unavailable (circuit open after {failures} failures; retrying in {retry_in}s)")]
    Unavailable {
        backend: crate::BackendId,
        /// The failures that opened the breaker.
        failures: u32,
        /// Seconds until a call may try the backend again (at least 1).
        retry_in: u64,
        /// Refused inside the aggregating gateway (one backend of several: HTTP 200).
        aggregated: bool,
    },

    /// Aggregating: a backend did not answer within the request deadline.
    #[error("backend {0}: request timed out after {1:?}")]
    TimeoutOf(crate::BackendId, std::time::Duration),

    /// Aggregating: a merged list could not be built.
    #[error("{0}")]
    Aggregation(String),
    /// Aggregating: the merged lists a request routes by were missing when it was routed (a
    /// reload cleared them after its admission); built again and routed once more before
    /// this reaches a client (`LocalAnswers::relisted`).
    #[error("the merged lists are not built yet")]
    ListsNotBuilt,
    /// Aggregating: what a request was judged by (the merged lists its policy decision or
    /// its guardrails were chosen from, or the guardrails themselves) changed before it was
    /// routed, so the route would reach something it was not judged for. Nothing was sent;
    /// the caller retries, and is judged again under what is in force then.
    #[error(
        "the lists or guardrails the request was checked by changed before it was routed; retry"
    )]
    ChangedMeanwhile,
    /// The gateway needs to ask the client for input the client did not declare in its
    /// `initialize` (`elicitation`, `sampling`, `roots`): -32021 with `requiredCapabilities`.
    #[error("Client does not support the {0} capability required for this request")]
    MissingClientCapability(&'static str),
    /// The session already has as many gateway requests to its client outstanding as it may.
    #[error("too many requests to the client outstanding on this session (limit {0})")]
    TooManyClientAsks(usize),
    /// The gateway had to ask the client, but no stream of its session could carry it.
    #[error("the client has no open stream to receive a request for input")]
    NoClientStream,
    /// The backend's answer to the gateway's own `initialize` was unusable.
    #[error("backend initialize failed: {0}")]
    BackendInit(String),
}

/// What lived in a replica that turns out to be gone (its address refuses connections): what
/// the request that was to be served there is answered instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The session's own upstreams (its home, `session_store::home`): the session ends
    /// everywhere, and the request is a 404. Named only after the session's owner check.
    Session(String),
    /// A Modern retry's `requestState` (a parked call, a relayed token's single use): the
    /// call starts again. Nothing else ends: whatever session the request names is not the
    /// other replica's to lose.
    RequestState,
    /// The gateway question a client's response answers: refused like any unexpected one.
    Question,
    /// The HTTP+SSE stream that is the session: a 404, as for an unknown session.
    Stream,
    /// The task a task method names (its handle names the replica that minted it): gone
    /// with that replica's backends, so the unknown-task answer, as the request's era gives
    /// it (`modern`: an HTTP error status; Legacy: 200 with the JSON-RPC error, as a live
    /// replica answers a handle that names nothing).
    Task { modern: bool },
}

/// Another replica, as the store holds its registration: its name and the registration's
/// value (its address, signed under the replicas' shared secret). Opening it is the hop's
/// business (`http::hop`): core never trusts the address itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAt {
    /// The replica's name (16 hex digits).
    pub replica: String,
    /// What it registered.
    pub registration: String,
}

/// A client's name as quoted back in an error: bounded.
pub(crate) fn clip(name: &str) -> String {
    name.chars().take(128).collect()
}

/// A client's URI as quoted back in an error, also as its `data.uri` (SEP-2164), which a
/// client may compare with what it asked for: bounded more loosely than a name, so that any
/// URI a client would really use comes back whole.
pub(crate) fn clip_uri(uri: &str) -> String {
    uri.chars().take(2048).collect()
}

/// What kind of backend failure a [`CoreError`] is ([`CoreError::backend_fault`]): core
/// classifies the transport's errors, so `http` maps a kind to its answer without naming them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendFault {
    /// A remote server did not answer within its deadline.
    RemoteTimeout,
    /// The backend refused the work for now: a remote's "busy", or its queue full.
    Overloaded,
    /// The backend cannot act for this caller: no token of its own to present, or a request
    /// for someone else's upstream session.
    NotPermitted,
    /// A remote server failed; what a client may be told of it (no text the remote wrote).
    Remote(String),
    /// The backend is gone, refused the write, or did not start.
    Unavailable,
}

impl CoreError {
    /// The consent a failure asks for, if it is a backend's need for the caller's
    /// authorization (per-user OAuth), of the one backend or of one of several.
    pub fn consent(&self) -> Option<&switchboard_upstream::outgoing_auth::oauth::Consent> {
        use switchboard_upstream::outgoing_auth::OutgoingAuthError as Auth;
        use switchboard_upstream::remote::RemoteError as Remote;
        match self {
            CoreError::Backend(UpstreamError::Remote(Remote::OutgoingAuth(
                Auth::ConsentRequired(c),
            )))
            | CoreError::OfBackend(
                _,
                UpstreamError::Remote(Remote::OutgoingAuth(Auth::ConsentRequired(c))),
            ) => Some(c),
            _ => None,
        }
    }

    /// The kind of backend failure this is; `None` for a failure that is not the backend's.
    pub fn backend_fault(&self) -> Option<BackendFault> {
        use switchboard_upstream::outgoing_auth::OutgoingAuthError as Auth;
        use switchboard_upstream::remote::RemoteError as Remote;
        let upstream = match self {
            CoreError::Backend(u) => u,
            CoreError::BackendInit(_) => return Some(BackendFault::Unavailable),
            _ => return None,
        };
        Some(match upstream {
            UpstreamError::Remote(Remote::Timeout) => BackendFault::RemoteTimeout,
            UpstreamError::Remote(Remote::Refused(_)) | UpstreamError::Overloaded => {
                BackendFault::Overloaded
            }
            UpstreamError::Remote(Remote::OutgoingAuth(
                Auth::NoSubjectToken | Auth::ForeignSession,
            )) => BackendFault::NotPermitted,
            UpstreamError::Remote(_) => BackendFault::Remote(upstream.client_text()),
            _ => BackendFault::Unavailable,
        })
    }
}
