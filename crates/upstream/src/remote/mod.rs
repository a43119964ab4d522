//! A remote MCP server over Streamable HTTP (this file) or HTTP+SSE, and the adapter that puts
//! either behind [`crate::Upstream`] (`upstream`).
//!
//! - [`RemoteClient::call`] POSTs one request and resolves with exactly one answer, whether the
//!   remote replies with JSON or an SSE stream; every other message on that stream goes, in
//!   stream order and synchronously, to the [`RemoteSink`] (as stdout lines go to
//!   `InboundSink`).
//! - [`RemoteClient::listen`] opens the GET listen stream in a task the returned handle owns.
//! - The remote's `Mcp-Session-Id` is kept inside the client (never exposed); a 404 on a
//!   request that carried it is [`RemoteError::SessionLost`] and forgets it.
//! - Bounded: per message and per response stream, a deadline per call, a connect timeout;
//!   hyper-util's pool reuses connections. TLS is rustls with the ring provider, passed
//!   explicitly (no process-wide default), with the system's roots.

mod body;
mod callers;
mod designations;
mod endpoint;
mod error;
mod facts;
mod link;
mod listen;
mod shown;
mod sse_client;
mod stream;
mod upstream;
pub(crate) mod url;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use parking_lot::Mutex;

use switchboard_wire::{Message, MessageKind};

use body::EventStream;
use endpoint::Endpoint;
pub use endpoint::RemoteEndpoint;
pub(crate) use endpoint::{connector, connector_over, Client};
pub use error::RemoteError;
pub use listen::ListenHandle;
pub use shown::shown_url;
pub use sse_client::SseClient;
pub use upstream::{Mode, RemoteOwner, RemoteTransport, RemoteUpstream};

/// Headers that frame a request or describe its connection, and those the gateway sets on
/// every request it sends upstream: neither a configured header (of a remote or an OpenAPI
/// backend) nor an OpenAPI spec's header parameter may set them. One list for both kinds.
pub const RESERVED_HEADERS: [&str; 12] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "content-type",
    "accept",
];

const SESSION: &str = "mcp-session-id";
/// First delay before reopening a dropped listen stream; doubled up to the maximum.
const LISTEN_MIN_BACKOFF: Duration = Duration::from_millis(250);
const LISTEN_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Idle pooled connections kept per remote host.
pub(crate) const MAX_IDLE_CONNECTIONS: usize = 32;
/// Times one call's response stream is resumed after being cut.
const MAX_RESUMES: u32 = 3;
/// Longest `retry` a remote may ask the client to wait before reconnecting a stream.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
const VERSION: &str = "mcp-protocol-version";

/// Receives what a remote sends besides answers (notifications and server→client requests),
/// from request streams and the listen stream, in the order of each stream.
pub trait RemoteSink: Send + Sync + std::fmt::Debug + 'static {
    /// One message: its raw JSON and parsed envelope. Must not block.
    fn deliver(&self, line: &Bytes, msg: &Message<'_>);
    /// The listen stream ended (`reason` says why); a new one may be opened.
    fn listen_closed(&self, _reason: &RemoteError) {}
    /// The listen stream is about to be opened again, with the `Authorization` the session
    /// carries then: a session acting as its caller drops a token revoked meanwhile here.
    fn reopening(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Where the remote is and how much of it to accept.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The MCP endpoint, `http://` or `https://`.
    pub url: String,
    /// Sent on every request (outgoing credentials); never logged.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Largest JSON body or SSE event accepted.
    pub max_message_bytes: usize,
    /// Largest total one response stream may carry.
    pub max_stream_bytes: usize,
    /// Deadline of one call, from sending to its answer.
    pub call_timeout: Duration,
    /// Deadline of sending a notification or an answer (202 expected).
    pub send_timeout: Duration,
    /// Deadline of establishing a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// What the remote gets as `Authorization`, per call (see [`crate::outgoing_auth`]): the
    /// static headers alone unless configured; a caller's credential is never forwarded or
    /// exchanged otherwise.
    pub auth: crate::outgoing_auth::OutgoingAuth,
}

impl RemoteConfig {
    /// Defaults matching the stdio path's line bound (16 MiB).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: Vec::new(),
            max_message_bytes: 16 * 1024 * 1024,
            max_stream_bytes: 64 * 1024 * 1024,
            call_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            auth: crate::outgoing_auth::OutgoingAuth::Static,
        }
    }
}

/// One outgoing request.
#[derive(Debug)]
pub struct Outgoing<'a> {
    /// The JSON-RPC request, already keyed by the caller.
    pub line: Bytes,
    /// Its `id`, as raw JSON text (how the answer is recognised).
    pub id: &'a str,
    /// Per-request headers (Modern `Mcp-Method`, `Mcp-Name`, ...).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A Modern request: sent without the session, so a 404 means "method not found".
    pub stateless: bool,
}

/// The remote's answer: the raw message and where its `result`/`error` sits.
#[derive(Debug, Clone)]
pub struct RemoteResponse {
    line: Bytes,
    payload: Range<usize>,
    is_error: bool,
    status: u16,
}

impl RemoteResponse {
    /// The same answer as the transport-neutral type `core` awaits.
    pub(crate) fn into_backend(self) -> crate::BackendResponse {
        crate::BackendResponse::new(self.line, self.payload, self.is_error)
    }
    /// The whole JSON-RPC response as the remote sent it.
    pub fn line(&self) -> &Bytes {
        &self.line
    }
    /// Whether it is a JSON-RPC error.
    pub fn is_error(&self) -> bool {
        self.is_error
    }
    /// The raw JSON of the `result` or `error` member.
    pub fn payload(&self) -> &str {
        std::str::from_utf8(&self.line[self.payload.clone()]).unwrap_or("null")
    }
    /// The HTTP status it came with (Modern errors carry 400/404).
    pub fn status(&self) -> u16 {
        self.status
    }
}

/// A cloneable client for one remote endpoint (and at most one upstream session).
#[derive(Debug, Clone)]
pub struct RemoteClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: Arc<Endpoint>,
    session: Mutex<Option<HeaderValue>>,
    version: Mutex<Option<HeaderValue>>,
    /// The last event id seen on the listen stream, to resume it with `Last-Event-ID`.
    last_event: Mutex<Option<HeaderValue>>,
    /// The session's `Authorization` (its caller's, or one obtained for it or for the gateway:
    /// `outgoing_auth`), replacing the static one on everything this session sends. Only ever
    /// set on a session's client: a stateless client serves every principal, so its calls
    /// carry the credential per request.
    caller_auth: Mutex<Option<HeaderValue>>,
    sink: Arc<dyn RemoteSink>,
}

impl std::ops::Deref for Inner {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// The static headers, except those a caller's credential or a per-request header replaces
/// (one `Authorization`, never two), then those.
pub(crate) fn merge_headers<'a>(
    fixed: &'a [(HeaderName, HeaderValue)],
    caller: &'a [(HeaderName, HeaderValue)],
    extra: &'a [(HeaderName, HeaderValue)],
) -> impl Iterator<Item = &'a (HeaderName, HeaderValue)> {
    let replaced = move |name: &HeaderName| caller.iter().chain(extra).any(|(n, _)| n == name);
    fixed
        .iter()
        .filter(move |(name, _)| !replaced(name))
        .chain(caller)
        .chain(extra)
}

impl RemoteClient {
    /// A client for `config.url` on an endpoint of its own; unsolicited messages go to `sink`.
    /// Connects lazily.
    pub fn new(config: RemoteConfig, sink: Arc<dyn RemoteSink>) -> Result<Self, RemoteError> {
        Ok(RemoteEndpoint::new(config)?.client(sink))
    }

    /// The protocol version negotiated by `initialize`, sent as `MCP-Protocol-Version` on
    /// every later Legacy request.
    pub fn set_protocol_version(&self, version: &str) {
        *self.inner.version.lock() = HeaderValue::from_str(version).ok();
    }

    /// The caller's `Authorization` this session carries now (see `Inner::caller_auth`).
    pub(crate) fn caller_auth(&self) -> Option<HeaderValue> {
        self.inner.caller_auth.lock().clone()
    }

    /// Use `auth` as this session's `Authorization` from now on (see `Inner::caller_auth`).
    pub(crate) fn set_caller_auth(&self, auth: &HeaderValue) {
        *self.inner.caller_auth.lock() = Some(auth.clone());
    }

    /// Forgets the session owner's `Authorization` if it is still `seen` (one set since came
    /// from a later lookup): later requests go without one.
    pub(crate) fn clear_caller_auth_if(&self, seen: &HeaderValue) {
        let mut slot = self.inner.caller_auth.lock();
        if slot.as_ref() == Some(seen) {
            *slot = None;
        }
    }

    /// Whether an upstream session is established (its id stays private).
    pub fn has_session(&self) -> bool {
        self.inner.session.lock().is_some()
    }

    /// Send one request; resolves with its answer, or the reason there is none.
    pub async fn call(&self, out: Outgoing<'_>) -> Result<RemoteResponse, RemoteError> {
        self.call_noting(out, &mut None).await
    }

    /// [`Self::call`], noting the `WWW-Authenticate` of a 401 or 403 answer in `challenge`
    /// (what per-user OAuth discovers from).
    pub(crate) async fn call_noting(
        &self,
        out: Outgoing<'_>,
        challenge: &mut Option<String>,
    ) -> Result<RemoteResponse, RemoteError> {
        let deadline = self.inner.call_timeout;
        tokio::time::timeout(deadline, self.call_inner(out, challenge))
            .await
            .unwrap_or(Err(RemoteError::Timeout))
    }

    async fn call_inner(
        &self,
        out: Outgoing<'_>,
        challenge: &mut Option<String>,
    ) -> Result<RemoteResponse, RemoteError> {
        let (request, with_session) =
            self.request(Method::POST, out.line, out.stateless, &out.headers)?;
        let response = self.send_request(request).await?;
        let status = response.status();
        if matches!(status.as_u16(), 401 | 403) {
            *challenge = response
                .headers()
                .get(hyper::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
        }
        if !out.stateless {
            self.adopt_session(response.headers());
        }
        if let (StatusCode::NOT_FOUND, Some(sent)) = (status, &with_session) {
            return Err(self.session_lost(sent));
        }
        let content_type = content_type(response.headers());
        // The session this answer opened (an `initialize`'s), as the answer names it.
        let opened = response.headers().get(SESSION).cloned();
        let mut body = response.into_body();
        match content_type.as_str() {
            "application/json" => {
                let bytes = body::read_bounded(&mut body, self.inner.limits.message).await?;
                answer_from(bytes, out.id, status)
            }
            "text/event-stream" if status.is_success() => {
                let events = EventStream::new(body, self.inner.limits);
                // Only a session's stream can be resumed, and only in that session (the GET
                // names it): the one the POST was sent in, else (an `initialize`) the one its
                // answer opened, as the answer names it (another call may hold another).
                let session = (!out.stateless).then(|| with_session.or(opened)).flatten();
                self.answer_from_stream(events, (out.id, session), status)
                    .await
            }
            _ if !status.is_success() => Err(RemoteError::Status {
                status: status.as_u16(),
            }),
            _ => Err(RemoteError::NotJson {
                status: status.as_u16(),
                content_type,
            }),
        }
    }

    /// POST a notification, or an answer to the remote's own request (202 expected).
    pub async fn send(&self, line: Bytes) -> Result<(), RemoteError> {
        self.send_with(line, &[]).await
    }

    /// [`send`](Self::send) with per-request headers (an `Authorization` replaces the static
    /// one).
    pub async fn send_with(
        &self,
        line: Bytes,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<(), RemoteError> {
        let deadline = self.inner.send_timeout;
        tokio::time::timeout(deadline, async {
            let (request, with_session) = self.request(Method::POST, line, false, extra)?;
            let response = self.send_request(request).await?;
            let status = response.status();
            if let (StatusCode::NOT_FOUND, Some(sent)) = (status, &with_session) {
                return Err(self.session_lost(sent));
            }
            if status.is_success() {
                return Ok(());
            }
            Err(RemoteError::Status {
                status: status.as_u16(),
            })
        })
        .await
        .unwrap_or(Err(RemoteError::Timeout))
    }

    /// End the upstream session (DELETE), forgetting it whatever the remote answers.
    pub async fn end_session(&self) -> Result<(), RemoteError> {
        if !self.has_session() {
            return Ok(());
        }
        let (request, _) = self.request(Method::DELETE, Bytes::new(), false, &[])?;
        self.inner.session.lock().take();
        let sent = tokio::time::timeout(self.inner.call_timeout, self.send_request(request));
        match sent.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RemoteError::Timeout),
        }
    }

    fn request(
        &self,
        method: Method,
        body: Bytes,
        stateless: bool,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<(Request<Full<Bytes>>, Option<HeaderValue>), RemoteError> {
        let accept = if method == Method::GET {
            "text/event-stream"
        } else {
            "application/json, text/event-stream"
        };
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(self.inner.uri.clone())
            .header(ACCEPT, accept);
        if method == Method::POST {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        let caller = self.inner.caller_auth.lock().clone();
        let caller = caller.map(|v| (hyper::header::AUTHORIZATION, v));
        for (name, value) in merge_headers(&self.inner.headers, caller.as_slice(), extra) {
            builder = builder.header(name, value);
        }
        let session = if stateless {
            None
        } else {
            self.inner.session.lock().clone()
        };
        if let Some(session) = &session {
            builder = builder.header(SESSION, session);
            if let Some(version) = self.inner.version.lock().clone() {
                builder = builder.header(VERSION, version);
            }
        }
        builder
            .body(Full::new(body))
            .map(|r| (r, session))
            .map_err(|e| RemoteError::Malformed(e.to_string()))
    }

    async fn send_request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, RemoteError> {
        self.inner
            .client
            .request(request)
            .await
            .map_err(|e| RemoteError::Transport(error_chain(&e)))
    }

    /// The first session id the remote hands out is kept (the `initialize` answer's).
    fn adopt_session(&self, headers: &hyper::HeaderMap) {
        let Some(id) = headers.get(SESSION) else {
            return;
        };
        let mut session = self.inner.session.lock();
        if session.is_none() {
            // The upstream session id is the gateway's secret: kept out of debug output.
            let mut id = id.clone();
            id.set_sensitive(true);
            *session = Some(id);
        }
    }

    /// Forget `sent` — only if it is still the current session: a late 404 for an old
    /// session must not throw away the one a concurrent re-initialize just established.
    fn session_lost(&self, sent: &HeaderValue) -> RemoteError {
        let mut session = self.inner.session.lock();
        if session.as_ref() == Some(sent) {
            *session = None;
            self.inner.version.lock().take();
            self.inner.last_event.lock().take();
        }
        RemoteError::SessionLost
    }
}

/// The media type, lowercased, without parameters.
fn content_type(headers: &hyper::HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A JSON body must be the answer to `id` (whatever the HTTP status: Modern errors are 4xx).
fn answer_from(bytes: Bytes, id: &str, status: StatusCode) -> Result<RemoteResponse, RemoteError> {
    let msg = Message::parse(&bytes).map_err(|_| {
        if status.is_success() {
            RemoteError::Malformed("body is not a JSON-RPC message".into())
        } else {
            RemoteError::Status {
                status: status.as_u16(),
            }
        }
    })?;
    let ours =
        msg.kind == MessageKind::Response && msg.id.as_ref().is_some_and(|m| m.as_json() == id);
    if !ours {
        return Err(RemoteError::Malformed(
            "JSON body is not the answer to this request".into(),
        ));
    }
    response_of(&bytes, &msg, status).ok_or_else(|| RemoteError::Malformed("empty answer".into()))
}

fn response_of(line: &Bytes, msg: &Message<'_>, status: StatusCode) -> Option<RemoteResponse> {
    let (payload, is_error) = match (msg.result, msg.error) {
        (Some(r), _) => (r, false),
        (None, Some(e)) => (e, true),
        (None, None) => return None,
    };
    let start = (payload.get().as_ptr() as usize).checked_sub(line.as_ptr() as usize)?;
    Some(RemoteResponse {
        line: line.clone(),
        payload: start..start + payload.get().len(),
        is_error,
        status: status.as_u16(),
    })
}

#[cfg(test)]
mod tests;
