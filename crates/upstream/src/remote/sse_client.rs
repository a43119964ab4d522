//! A remote MCP server over HTTP+SSE (protocol 2024-11-05): the client half of a future
//! `Upstream` backend. **Not wired into `core` yet.**
//!
//! The transport: one GET stream whose first event, `endpoint`, names where to POST (resolved
//! and held to the SSE URL's origin in `endpoint`); POSTs are only acknowledged, and every
//! answer and every server message arrives on that one stream. The stream *is* the session:
//! when it ends, for any reason, every pending call fails with [`RemoteError::SessionLost`] at
//! once and the sink hears `listen_closed` exactly once.
//!
//! - Answers are matched by exact id through a bounded pending table; anything else on the
//!   stream goes to the [`RemoteSink`] synchronously, in stream order (so a notification a
//!   call caused is delivered before that call resolves).
//! - The reader task is owned by the client: aborted by [`SseClient::close`] or when the last
//!   clone is dropped (which ends the server's session too).
//! - Bounded: each event by `max_message_bytes`, pending calls by [`MAX_PENDING`], each call
//!   by `call_timeout`, opening by `connect_timeout`.

mod endpoint;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use switchboard_wire::sse_decode::SseEvent;
use switchboard_wire::{Message, MessageKind};

use super::body::{self, EventStream, Limits};
use super::{
    connector, content_type, error_chain, response_of, Client, Outgoing, RemoteConfig, RemoteError,
    RemoteResponse, RemoteSink,
};

/// Calls awaiting an answer on one session at once. More are refused, not queued: a remote
/// that stops answering must not make us hold unbounded state.
pub(super) const MAX_PENDING: usize = 1024;

type Answer = Result<RemoteResponse, RemoteError>;

/// A cloneable client for one HTTP+SSE session of a remote server.
#[derive(Debug, Clone)]
pub struct SseClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    /// Where to POST: the endpoint event's URL, same-origin with the SSE URL.
    endpoint: Uri,
    /// Outgoing credentials; never logged.
    headers: Vec<(HeaderName, HeaderValue)>,
    message_limit: usize,
    call_timeout: Duration,
    session: Arc<Session>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the reader drops the GET body: the connection closes, and with it the
        // server's session.
        self.reader.abort();
        self.session.end(&"the client was dropped");
    }
}

/// What the reader task and the callers share. It holds no handle on the task, so the task
/// never keeps the client alive.
#[derive(Debug)]
struct Session {
    table: Mutex<Table>,
    sink: Arc<dyn RemoteSink>,
    /// Whether a non-JSON-RPC event was already logged at warn (later ones go to debug).
    warned: AtomicBool,
}

#[derive(Debug, Default)]
struct Table {
    /// Set once, when the stream ends; no call is registered after it.
    closed: bool,
    /// Raw JSON id → (registration token, where the answer goes).
    calls: HashMap<String, (u64, oneshot::Sender<Answer>)>,
    next_token: u64,
}

impl Session {
    fn new(sink: Arc<dyn RemoteSink>) -> Self {
        Self {
            table: Mutex::new(Table::default()),
            sink,
            warned: AtomicBool::new(false),
        }
    }

    /// Register a call under `id`; the receiver gets its answer, or `SessionLost`.
    fn register(&self, id: &str) -> Result<(u64, oneshot::Receiver<Answer>), RemoteError> {
        let mut table = self.table.lock();
        if table.closed {
            return Err(RemoteError::SessionLost);
        }
        if table.calls.len() >= MAX_PENDING {
            return Err(RemoteError::Refused(
                "too many calls pending on this session",
            ));
        }
        if table.calls.contains_key(id) {
            return Err(RemoteError::Refused(
                "a call with this id is already pending",
            ));
        }
        table.next_token += 1;
        let token = table.next_token;
        let (tx, rx) = oneshot::channel();
        table.calls.insert(id.to_owned(), (token, tx));
        Ok((token, rx))
    }

    /// Withdraw a call, unless its id now names a later registration.
    fn withdraw(&self, id: &str, token: u64) {
        let mut table = self.table.lock();
        if table.calls.get(id).is_some_and(|(t, _)| *t == token) {
            table.calls.remove(id);
        }
    }

    /// The stream ended: fail every pending call and tell the sink, exactly once.
    fn end(&self, why: &dyn std::fmt::Display) {
        let calls = {
            let mut table = self.table.lock();
            if table.closed {
                return;
            }
            table.closed = true;
            std::mem::take(&mut table.calls)
        };
        debug!(reason = %why, pending = calls.len(), "HTTP+SSE session ended");
        for (_, (_, tx)) in calls {
            let _ = tx.send(Err(RemoteError::SessionEndedInFlight));
        }
        self.sink.listen_closed(&RemoteError::SessionLost);
    }

    fn on_event(&self, event: SseEvent) {
        match event.event.as_str() {
            "" | "message" if !event.data.is_empty() => self.route(Bytes::from(event.data)),
            // The POST URL is fixed once: a later endpoint event could not be trusted more.
            "endpoint" => debug!("a second endpoint event on an HTTP+SSE stream; ignored"),
            _ => debug!("an HTTP+SSE event of another type; ignored"),
        }
    }

    /// One message: the answer of a pending call resolves it; a request or notification goes
    /// to the sink; a response nobody awaits is dropped.
    fn route(&self, line: Bytes) {
        let msg = match Message::parse(&line) {
            Ok(msg) => msg,
            Err(e) => return self.unread(e),
        };
        if msg.kind != MessageKind::Response {
            self.sink.deliver(&line, &msg);
            return;
        }
        let waiter = msg
            .id
            .as_ref()
            .and_then(|id| self.table.lock().calls.remove(id.as_json()));
        let Some((_, tx)) = waiter else {
            debug!("remote response for no pending call; dropped");
            return;
        };
        let answer = response_of(&line, &msg, StatusCode::OK)
            .ok_or_else(|| RemoteError::Malformed("answer has neither result nor error".into()));
        let _ = tx.send(answer);
    }

    /// A message that could not be read: one with a call's id (a malformed answer, or one
    /// holding a key the gateway does not read) fails that call now; anything else is skipped.
    fn unread(&self, e: switchboard_wire::ParseError) {
        let waiter = (e.id.as_ref()).and_then(|id| self.table.lock().calls.remove(id.as_json()));
        if let Some((_, tx)) = waiter {
            warn!("remote answered with a message that is not read; the call gets an error");
            let _ = tx.send(Err(RemoteError::Malformed(
                "the answer could not be read".into(),
            )));
            return;
        }
        if self.warned.swap(true, Ordering::Relaxed) {
            debug!("remote sent an event that is not JSON-RPC; skipped");
        } else {
            warn!("remote sent an event that is not JSON-RPC; skipped");
        }
    }
}

/// Withdraws a call's pending entry however its future ends (answer, error, timeout, drop).
struct Withdraw<'a> {
    session: &'a Session,
    id: &'a str,
    token: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.session.withdraw(self.id, self.token);
    }
}

impl SseClient {
    /// Opens the stream at `config.url` and waits, within `config.connect_timeout`, for its
    /// `endpoint` event; the POST URL must be same-origin with `config.url`
    /// ([`RemoteError::Malformed`] otherwise). The stream's reader then runs until the stream
    /// ends, [`close`](Self::close), or the last clone is dropped.
    pub async fn connect(
        config: RemoteConfig,
        sink: Arc<dyn RemoteSink>,
    ) -> Result<SseClient, RemoteError> {
        let sse_url = endpoint::parse_base(&config.url)?;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                // Idle sockets are fds: a burst must not leave one per call behind.
                .pool_max_idle_per_host(super::MAX_IDLE_CONNECTIONS)
                .build(connector(config.connect_timeout));
        let session = Arc::new(Session::new(sink));
        let opening = open(&client, &sse_url, &config, &session);
        let (endpoint, events) = tokio::time::timeout(config.connect_timeout, opening)
            .await
            .unwrap_or(Err(RemoteError::Timeout))?;
        let reader = tokio::spawn(read_stream(Arc::clone(&session), events)).abort_handle();
        Ok(SseClient {
            inner: Arc::new(Inner {
                client,
                endpoint,
                headers: config.headers,
                message_limit: config.max_message_bytes,
                call_timeout: config.call_timeout,
                session,
                reader,
            }),
        })
    }

    /// POSTs one request and resolves with the answer that arrives on the stream with id
    /// `out.id`, within `call_timeout`. Dropping the future withdraws the call. `out.headers`
    /// go with the POST; `out.stateless` means nothing here (the session is the stream).
    pub async fn call(&self, out: Outgoing<'_>) -> Result<RemoteResponse, RemoteError> {
        let session = &*self.inner.session;
        // Registered before sending: the answer may be on the stream before the POST returns.
        let (token, mut answer) = session.register(out.id)?;
        let _withdraw = Withdraw {
            session,
            id: out.id,
            token,
        };
        let exchange = async {
            let request = self.post(out.line, &out.headers)?;
            let posted = self.send_post(request, Some(out.id));
            tokio::pin!(posted);
            // The answer wins even while the POST is still out (or hangs).
            tokio::select! {
                biased;
                answer = &mut answer => answer.unwrap_or(Err(RemoteError::SessionLost)),
                posted = &mut posted => match posted? {
                    Some(in_body) => Ok(in_body),
                    None => answer.await.unwrap_or(Err(RemoteError::SessionLost)),
                },
            }
        };
        tokio::time::timeout(self.inner.call_timeout, exchange)
            .await
            .unwrap_or(Err(RemoteError::Timeout))
    }

    /// POSTs a notification, or an answer to one of the remote's requests, with `extra`
    /// headers; `Ok` on 2xx.
    pub async fn send(
        &self,
        line: Bytes,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<(), RemoteError> {
        if self.is_closed() {
            return Err(RemoteError::SessionLost);
        }
        let request = self.post(line, extra)?;
        tokio::time::timeout(self.inner.call_timeout, self.send_post(request, None))
            .await
            .unwrap_or(Err(RemoteError::Timeout))
            .map(|_| ())
    }

    /// Whether the stream has ended (the session is gone; connect again for a new one).
    pub fn is_closed(&self) -> bool {
        self.inner.session.table.lock().closed
    }

    /// Number of calls awaiting an answer.
    pub fn pending_len(&self) -> usize {
        self.inner.session.table.lock().calls.len()
    }

    /// Ends the stream now; pending calls fail with [`RemoteError::SessionLost`].
    pub fn close(&self) {
        self.inner.reader.abort();
        self.inner.session.end(&"closed by the client");
    }

    fn post(
        &self,
        body: Bytes,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Request<Full<Bytes>>, RemoteError> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.inner.endpoint.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json");
        for (name, value) in super::merge_headers(&self.inner.headers, &[], extra) {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(body))
            .map_err(|e| RemoteError::Malformed(e.to_string()))
    }

    /// POST and read the (bounded) acknowledgement. A 2xx is `Ok(None)` — the answer comes on
    /// the stream — unless its body already is the JSON-RPC answer to `id`; a non-2xx is
    /// that answer if the body is one, else `Status`.
    async fn send_post(
        &self,
        request: Request<Full<Bytes>>,
        id: Option<&str>,
    ) -> Result<Option<RemoteResponse>, RemoteError> {
        let response = self
            .inner
            .client
            .request(request)
            .await
            .map_err(|e| RemoteError::Transport(error_chain(&e)))?;
        let status = response.status();
        let mut body = response.into_body();
        let bytes = body::read_bounded(&mut body, self.inner.message_limit).await;
        let in_body = match (&bytes, id) {
            (Ok(bytes), Some(id)) => answer_in(bytes, id, status),
            _ => None,
        };
        if in_body.is_some() || status.is_success() {
            return Ok(in_body);
        }
        Err(RemoteError::Status {
            status: status.as_u16(),
        })
    }
}

/// The JSON-RPC answer to `id`, if that is what a POST's body is.
fn answer_in(bytes: &Bytes, id: &str, status: StatusCode) -> Option<RemoteResponse> {
    let msg = Message::parse(bytes).ok()?;
    let ours =
        msg.kind == MessageKind::Response && msg.id.as_ref().is_some_and(|m| m.as_json() == id);
    ours.then(|| response_of(bytes, &msg, status)).flatten()
}

/// GET the SSE URL and read up to its `endpoint` event; what comes before it is routed.
async fn open(
    client: &Client,
    sse_url: &Uri,
    config: &RemoteConfig,
    session: &Session,
) -> Result<(Uri, EventStream), RemoteError> {
    let mut builder = Request::builder()
        .method(Method::GET)
        .uri(sse_url.clone())
        .header(ACCEPT, "text/event-stream");
    for (name, value) in &config.headers {
        builder = builder.header(name, value);
    }
    let request = builder
        .body(Full::new(Bytes::new()))
        .map_err(|e| RemoteError::Malformed(e.to_string()))?;
    let response = client
        .request(request)
        .await
        .map_err(|e| RemoteError::Transport(error_chain(&e)))?;
    let status = response.status();
    let media = content_type(response.headers());
    if !status.is_success() {
        return Err(RemoteError::Status {
            status: status.as_u16(),
        });
    }
    if media != "text/event-stream" {
        return Err(RemoteError::NotJson {
            status: status.as_u16(),
            content_type: media,
        });
    }
    let limits = Limits {
        message: config.max_message_bytes,
        stream: usize::MAX,
    };
    let mut events = EventStream::new(response.into_body(), limits);
    // The stream lives as long as the session; each event stays bounded.
    events.unbounded_total();
    while let Some(event) = events.next().await? {
        if event.event == "endpoint" {
            return Ok((endpoint::resolve(sse_url, &event.data)?, events));
        }
        session.on_event(event);
    }
    Err(RemoteError::Malformed(
        "the SSE stream ended before its endpoint event".into(),
    ))
}

/// The session's reader: routes every event until the stream ends, then ends the session.
async fn read_stream(session: Arc<Session>, mut events: EventStream) {
    loop {
        match events.next().await {
            Ok(Some(event)) => session.on_event(event),
            Ok(None) => {
                session.end(&"the remote closed the stream");
                return;
            }
            Err(e) => {
                warn!(error = %e, "HTTP+SSE stream failed; the session is gone");
                session.end(&e);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
