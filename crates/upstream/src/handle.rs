//! The one handle `core` holds for a backend, whatever carries it: a stdio process or a remote
//! MCP server. Its API is the whole contract: send a request under a key and get exactly one
//! answer ([`Upstream::call`]); send a line that expects none; receive the backend's own
//! messages through an [`InboundSink`]; stop it through its [`UpstreamOwner`].

use bytes::Bytes;

use switchboard_wire::Message;

use crate::openapi::OpenApiUpstream;
use crate::remote::{RemoteOwner, RemoteUpstream};
use crate::replicated::Replicated;
use crate::stdio::{StdioHandle, StdioProcess};
use crate::{Credential, PendingCall, UpstreamError};

/// Receives the backend's unsolicited messages (notifications and backend→client requests).
///
/// Called synchronously by the transport's reader, in the backend's order, before the next
/// message is read: a progress notification written before a response is therefore handed on
/// before that response resolves its call, so a client sees them in the backend's order.
/// Implementations must not block (use `try_send`), or they stall the backend's whole stream.
pub trait InboundSink: Send + Sync + std::fmt::Debug + 'static {
    /// One unsolicited message: its raw JSON and parsed envelope, and a handle to answer the
    /// backend with.
    fn deliver(&self, line: &Bytes, msg: &Message<'_>, backend: &Upstream);

    /// The backend is gone for good (a process ended; a remote lost or ended the upstream
    /// session), after every pending call has failed: whoever depends on it alone can act now
    /// rather than at its next request. Called at most once; must not block.
    fn closed(&self, _reason: &str) {}
}

/// Hands one message to `sink`, containing a panic there: a bug in routing one message
/// must not take the backend's reader, and with it every pending call, down. The message is
/// dropped and the reader goes on.
pub(crate) fn deliver_contained(
    sink: &dyn InboundSink,
    line: &Bytes,
    msg: &Message<'_>,
    backend: &Upstream,
) {
    let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sink.deliver(line, msg, backend);
    }));
    if delivered.is_err() {
        tracing::error!("routing a backend message panicked (a bug); the message was dropped");
    }
}

/// A cloneable handle to one backend.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A local process speaking newline-delimited JSON-RPC on stdio.
    Stdio(StdioHandle),
    /// A remote server over Streamable HTTP or HTTP+SSE (one upstream session, or none).
    Remote(RemoteUpstream),
    /// A REST API described by an OpenAPI document, answered in process (no session, no
    /// messages of its own).
    OpenApi(OpenApiUpstream),
    /// N processes of one stdio command (`replicas: N`), pinned to one of them or choosing
    /// one per call.
    Replicated(Replicated),
}

impl Upstream {
    /// Sends one request whose JSON-RPC id is the string `key`, and returns the future of its
    /// one answer. Dropping the future withdraws the call.
    pub async fn call(&self, key: &str, line: Vec<u8>) -> Result<PendingCall, UpstreamError> {
        self.call_as(key, line, None).await
    }

    /// [`call`](Self::call) on behalf of a caller whose `credential` a remote configured to
    /// receive it (`forward_caller_token`) gets instead of its static `Authorization`; every
    /// other backend ignores it. An upstream session remembers the latest one for what it
    /// sends on its own (listen stream, notifications, its end).
    pub async fn call_as(
        &self,
        key: &str,
        line: Vec<u8>,
        credential: Option<&Credential>,
    ) -> Result<PendingCall, UpstreamError> {
        match self {
            Upstream::Stdio(h) => h.call(key, line).await,
            Upstream::Remote(r) => r.call(key, line, credential),
            Upstream::OpenApi(o) => Ok(o.call(key, line)),
            Upstream::Replicated(r) => r.call(key, line).await,
        }
    }

    /// Sends one line that expects no answer (a notification, or an answer to the backend's
    /// own request).
    pub async fn send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        match self {
            Upstream::Stdio(h) => h.send_line(line).await,
            Upstream::Remote(r) => r.send_line(Bytes::from(line)).await,
            // Notifications (`initialized`, `cancelled`: dropping the call aborts it) need
            // nothing from a server without state.
            Upstream::OpenApi(_) => Ok(()),
            Upstream::Replicated(r) => r.send_line(line).await,
        }
    }

    /// Like [`send_line`](Self::send_line) but never waits (drop paths, the dispatcher).
    pub fn try_send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        match self {
            Upstream::Stdio(h) => h.try_send_line(line),
            Upstream::Remote(r) => r.try_send_line(Bytes::from(line)),
            Upstream::OpenApi(_) => Ok(()),
            Upstream::Replicated(r) => r.try_send_line(line),
        }
    }

    /// Calls awaiting an answer (for leak tests and metrics).
    pub fn pending_len(&self) -> usize {
        match self {
            Upstream::Stdio(h) => h.pending_len(),
            Upstream::Remote(r) => r.pending_len(),
            Upstream::OpenApi(o) => o.pending_len(),
            Upstream::Replicated(r) => r.pending_len(),
        }
    }

    /// Whether the backend is gone for good (process ended, upstream session lost).
    pub fn is_closed(&self) -> bool {
        match self {
            Upstream::Stdio(h) => h.is_closed(),
            Upstream::Remote(r) => r.is_closed(),
            Upstream::OpenApi(_) => false,
            Upstream::Replicated(r) => r.is_closed(),
        }
    }

    /// Whether the backend can be reached now: a running process; a remote whose last
    /// exchange did not fail below HTTP (for `/healthz`).
    pub fn is_reachable(&self) -> bool {
        match self {
            Upstream::Stdio(h) => !h.is_closed(),
            Upstream::Remote(r) => r.is_reachable(),
            Upstream::OpenApi(o) => o.is_reachable(),
            Upstream::Replicated(r) => !r.is_closed(),
        }
    }

    /// How many processes serve this backend: a replicated backend's replicas, else 1.
    pub fn replicas(&self) -> usize {
        match self {
            Upstream::Replicated(r) => r.len(),
            _ => 1,
        }
    }

    /// The transport, as `/status` names it: `stdio`, `streamable-http`, `sse` or `openapi`.
    pub fn transport(&self) -> &'static str {
        match self {
            Upstream::Stdio(_) | Upstream::Replicated(_) => "stdio",
            Upstream::Remote(r) => match r.transport() {
                crate::remote::RemoteTransport::Streamable => "streamable-http",
                crate::remote::RemoteTransport::Sse => "sse",
            },
            Upstream::OpenApi(_) => "openapi",
        }
    }

    /// The process id, for a local process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Upstream::Stdio(h) => h.pid(),
            Upstream::Replicated(r) => r.pid(),
            Upstream::Remote(_) | Upstream::OpenApi(_) => None,
        }
    }

    /// The stdio handle, for what only a process has (restart into the same slot).
    pub fn as_stdio(&self) -> Option<&StdioHandle> {
        match self {
            Upstream::Stdio(h) => Some(h),
            Upstream::Remote(_) | Upstream::OpenApi(_) | Upstream::Replicated(_) => None,
        }
    }

    /// The handle a request (`method`, `params`) takes. A replicated backend's: pinned to the
    /// replica that serves the URI for `resources/subscribe`/`unsubscribe` (so both reach the
    /// process whose `resources/updated` comes back), else to the least busy one, so a
    /// cancellation on the returned handle reaches the process that has the call. Any other
    /// backend's: itself.
    pub fn for_request(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Upstream {
        let Upstream::Replicated(r) = self else {
            return self.clone();
        };
        let pinned = match method {
            switchboard_wire::method::SUBSCRIBE | switchboard_wire::method::UNSUBSCRIBE => {
                match uri_of(params) {
                    Some(uri) => r.for_uri(&uri),
                    None => r.least_busy(),
                }
            }
            _ => r.least_busy(),
        };
        Upstream::Replicated(pinned)
    }

    /// Where a message about the call under `key` (its cancellation) goes: a replicated
    /// backend's replica that holds the call (`None` when none does: nothing to cancel),
    /// any other backend itself.
    pub fn for_key(&self, key: &str) -> Option<Upstream> {
        match self {
            Upstream::Replicated(r) => r.for_key(key).map(Upstream::Replicated),
            other => Some(other.clone()),
        }
    }

    /// The replicated set behind this handle, if it is one.
    pub fn as_replicated(&self) -> Option<&Replicated> {
        match self {
            Upstream::Replicated(r) => Some(r),
            _ => None,
        }
    }
}

/// `params.uri`, when it is a string.
fn uri_of(params: Option<&serde_json::value::RawValue>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Uri {
        uri: Option<String>,
    }
    let parsed: Uri = serde_json::from_str(params?.get()).ok()?;
    parsed.uri
}

/// The owner of one backend: the only thing that stops it. Dropping it stops it at once (kills
/// a process; abandons a remote session without waiting for the remote).
#[derive(Debug)]
pub enum UpstreamOwner {
    /// A local process.
    Process(StdioProcess),
    /// A remote upstream session.
    Remote(RemoteOwner),
}

impl UpstreamOwner {
    /// The polite, immediate request to stop, for an owner whose [`shutdown`] may have to wait
    /// its turn: closes a process's stdin; a remote session needs nothing. Idempotent.
    ///
    /// [`shutdown`]: Self::shutdown
    pub fn request_stop(&self) {
        match self {
            UpstreamOwner::Process(p) => p.close_stdin(),
            UpstreamOwner::Remote(_) => {}
        }
    }

    /// Stops the backend: a process gets `grace` to exit after stdin closes, then is killed; a
    /// remote session is ended (DELETE), bounded by `grace`.
    pub async fn shutdown(self, grace: std::time::Duration) {
        match self {
            UpstreamOwner::Process(p) => p.shutdown(grace).await,
            UpstreamOwner::Remote(r) => r.shutdown(grace).await,
        }
    }
}

/// Starts a stdio backend behind the neutral handle (see [`crate::spawn`]).
pub fn spawn_stdio(
    config: &crate::StdioConfig,
    sink: std::sync::Arc<dyn InboundSink>,
) -> Result<(Upstream, UpstreamOwner), UpstreamError> {
    let (handle, process) = crate::spawn(config, sink)?;
    Ok((Upstream::Stdio(handle), UpstreamOwner::Process(process)))
}
