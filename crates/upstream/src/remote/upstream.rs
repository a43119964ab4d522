//! A remote MCP server behind [`crate::Upstream`]: the same "one request, exactly one answer"
//! contract the stdio path has, over Streamable HTTP.
//!
//! One [`RemoteUpstream`] is one upstream session (or, [`Mode::Stateless`], none at all: the
//! shared handle a Modern remote is reached through). The gateway creates one per client
//! session and per Modern partition, never one per backend, so an upstream session is never
//! shared between principals. Its `Mcp-Session-Id` stays inside [`super::RemoteClient`].
//!
//! Each call runs as a task the returned [`PendingCall`] owns (dropping the call aborts the
//! exchange). The remote's own messages go to the [`InboundSink`] in stream order, with this
//! handle to answer through. When the remote loses the session (404 on its id) or ends it, the
//! handle closes for good and the sink hears it once, so the client's session ends with it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderValue;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use switchboard_wire::Message;

use super::callers::Callers;
use super::designations::Designations;
use super::facts::{negotiated_version, Facts};
use super::link::Link;
use super::{ListenHandle, Outgoing, RemoteEndpoint, RemoteError, RemoteSink};
use crate::answer::Withdraw;
use crate::credential::Owner;
use crate::outgoing_auth::{OutgoingAuth, OutgoingAuthError};
use crate::{BackendResponse, Credential, InboundSink, PendingCall, Upstream, UpstreamError};

/// Most exchanges (calls and sent lines) one upstream session carries at once; more are
/// refused as overload rather than opening connections without bound.
const MAX_IN_FLIGHT: usize = 1024;

/// Which transport a remote speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteTransport {
    /// Streamable HTTP (2025-03-26 and later, and 2026-07-28).
    Streamable,
    /// HTTP+SSE (2024-11-05).
    Sse,
}

/// Whether the handle carries an upstream session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Never sends or adopts a session id (Modern requests; the gateway's own probes).
    Stateless,
    /// Adopts the session the remote hands out at `initialize` and keeps it private.
    Session,
}

/// A cloneable handle to one remote upstream session.
#[derive(Debug, Clone)]
pub struct RemoteUpstream {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    link: Link,
    mode: Mode,
    /// What a call sends as `Authorization`, resolved per call from its caller's credential.
    auth: OutgoingAuth,
    /// A session acting as its caller: whose credential it carries (the first caller's). A
    /// call with another principal's credential is refused, so an upstream session opened
    /// with one caller's token never carries another's request.
    owner: Mutex<Option<Owner>>,
    /// That owner's principal, for what the session sends on its own (`send_line`).
    owner_principal: Mutex<Option<String>>,
    /// Exchanges under way (calls and lines being sent).
    live: AtomicUsize,
    /// A stateless handle acting as its callers: whose each call is, for its cancellation.
    callers: Arc<Callers>,
    /// Set once the upstream session is gone: every later call fails with it.
    lost: Mutex<Option<UpstreamError>>,
    /// The endpoint's: cleared when an exchange fails below HTTP, set again by any answer.
    reachable: Arc<AtomicBool>,
    /// The GET stream of a session, opened once the session is initialized.
    listen: Mutex<Option<ListenHandle>>,
    /// Whether that stream has settled (the remote took it, or would not): until then the
    /// session's requests wait for it (at most [`LISTEN_WAIT`]), since a remote may send what
    /// a request makes it ask the client (an elicitation) on that stream alone, and drops it
    /// when the stream is not there yet.
    listen_settled: tokio::sync::watch::Sender<bool>,
    /// The `x-mcp-header` designations of the tools this handle listed (`Designations`).
    designations: Designations,
    sink: Arc<dyn InboundSink>,
}

/// Longest a session's request waits for its listen stream to open (see
/// `Shared::listen_settled`).
const LISTEN_WAIT: Duration = Duration::from_secs(2);

/// Routes the client's deliveries to the gateway's sink with a handle to answer through.
#[derive(Debug)]
struct Bridge {
    me: Weak<Shared>,
}

impl RemoteSink for Bridge {
    fn deliver(&self, line: &Bytes, msg: &Message<'_>) {
        if let Some(shared) = self.me.upgrade() {
            let handle = Upstream::Remote(RemoteUpstream {
                shared: shared.clone(),
            });
            crate::handle::deliver_contained(shared.sink.as_ref(), line, msg, &handle);
        }
    }

    fn listen_closed(&self, reason: &RemoteError) {
        match (self.me.upgrade(), reason) {
            (Some(shared), RemoteError::SessionLost) => {
                shared.lose(RemoteError::SessionLost);
            }
            (_, reason) => debug!(%reason, "remote listen stream ended"),
        }
    }

    fn reopening(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(shared) = self.me.upgrade() {
                shared.drop_revoked_auth().await;
            }
        })
    }
}

impl RemoteUpstream {
    /// A handle on `endpoint`; what the remote sends on its own goes to `sink`.
    pub fn new(endpoint: &RemoteEndpoint, mode: Mode, sink: Arc<dyn InboundSink>) -> Self {
        let shared = Arc::new_cyclic(|me| {
            let bridge: Arc<dyn RemoteSink> = Arc::new(Bridge { me: me.clone() });
            let link = match (endpoint.transport(), mode) {
                (RemoteTransport::Streamable, _) => Link::Streamable(endpoint.client(bridge)),
                (RemoteTransport::Sse, Mode::Session) => Link::Sse {
                    config: Box::new(endpoint.config().clone()),
                    sink: bridge,
                    conn: tokio::sync::OnceCell::new(),
                    auth: Mutex::new(None),
                },
                (RemoteTransport::Sse, Mode::Stateless) => Link::NoSession,
            };
            Shared {
                link,
                mode,
                auth: endpoint.config().auth.clone(),
                owner: Mutex::new(None),
                owner_principal: Mutex::new(None),
                live: AtomicUsize::new(0),
                callers: Arc::default(),
                lost: Mutex::new(None),
                reachable: endpoint.reachability(),
                listen: Mutex::new(None),
                listen_settled: tokio::sync::watch::Sender::new(true),
                designations: Designations::default(),
                sink,
            }
        });
        RemoteUpstream { shared }
    }

    /// The owner that ends this upstream session.
    pub fn owner(&self) -> RemoteOwner {
        RemoteOwner {
            upstream: self.clone(),
        }
    }

    pub(crate) fn call(
        &self,
        key: &str,
        line: Vec<u8>,
        credential: Option<&Credential>,
    ) -> Result<PendingCall, UpstreamError> {
        let live = self.enter()?;
        self.claim(credential)?;
        let caller = credential.cloned();
        let calling = match (self.shared.mode, credential) {
            (Mode::Stateless, Some(c)) if self.shared.auth.acts_as_caller() => {
                Some(self.shared.callers.hold(key, c))
            }
            _ => None,
        };
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        let id = format!("\"{key}\"");
        let task = tokio::spawn(async move {
            let _live = live;
            let answer = me.exchange(Bytes::from(line), &id, caller.as_ref()).await;
            if let Some(calling) = calling {
                calling.finish();
            }
            let _ = tx.send(answer);
        });
        Ok(PendingCall::new(rx, Withdraw::Task(task.abort_handle())))
    }

    /// A session that acts as its caller belongs to the first caller whose credential it
    /// carries; another principal's call is refused (core never sends one: this is the
    /// upstream's own guarantee of it).
    fn claim(&self, credential: Option<&Credential>) -> Result<(), UpstreamError> {
        let (Mode::Session, Some(c), true) = (
            self.shared.mode,
            credential,
            self.shared.auth.acts_as_caller(),
        ) else {
            return Ok(());
        };
        let mut owner = self.shared.owner.lock();
        match *owner.get_or_insert(*c.owner()) == *c.owner() {
            true => {
                let mut principal = self.shared.owner_principal.lock();
                principal.get_or_insert_with(|| c.principal().to_owned());
                Ok(())
            }
            false => Err(auth_error(OutgoingAuthError::ForeignSession)),
        }
    }

    /// What a call on behalf of `caller` (`None`: the gateway's own) sends as
    /// `Authorization` with this one request: a session keeps it for everything it sends
    /// (one principal owns the session), so it goes through the session instead; a stateless
    /// handle, which every principal shares, sends it with this one exchange only.
    async fn authorization(
        &self,
        caller: Option<&Credential>,
    ) -> Result<(Option<HeaderValue>, Option<HeaderValue>), UpstreamError> {
        let seen = self.shared.link.caller_auth();
        let auth = self
            .shared
            .auth
            .authorization(caller)
            .await
            .map_err(auth_error)?;
        match (self.shared.mode, &auth) {
            (Mode::Session, Some(h)) => {
                self.shared.link.set_caller_auth(h);
                Ok((auth, None))
            }
            // The caller has no token now (its consent revoked): the session stops sending
            // the one it was opened or last used with.
            (Mode::Session, None) if caller.is_some() => {
                if let Some(seen) = &seen {
                    self.shared.link.clear_caller_auth_if(seen);
                }
                Ok((None, None))
            }
            _ => Ok((auth.clone(), auth)),
        }
    }

    async fn exchange(
        &self,
        line: Bytes,
        id: &str,
        caller: Option<&Credential>,
    ) -> Result<BackendResponse, UpstreamError> {
        let facts = Facts::of(&line);
        if let Some(refusal) = self.shared.designations.refuse_rejected(&facts, id) {
            return refusal.map(super::RemoteResponse::into_backend);
        }
        let params = match self.shared.designations.headers(&facts) {
            Ok(params) => params,
            Err(why) => return refused(id, &why).map(super::RemoteResponse::into_backend),
        };
        if !facts.modern {
            self.listen_settled().await;
        }
        let mut retried = false;
        let answer = loop {
            let (sent, per_request) = self.authorization(caller).await?;
            let mut headers = facts.headers();
            headers.extend(per_request.map(|v| (hyper::header::AUTHORIZATION, v)));
            headers.extend(params.iter().cloned());
            let out = Outgoing {
                id,
                headers,
                stateless: self.shared.mode == Mode::Stateless || facts.modern,
                line: line.clone(),
            };
            let mut challenge = None;
            let answer = self.shared.link.call(out, &mut challenge).await;
            // A token obtained for this call that the remote refused (401): forgotten, and
            // one more try with a fresh one (the remote did not run a request it refused).
            if let (false, true, Some(sent)) = (retried, unauthorized(&answer), &sent) {
                if self.shared.auth.refused(caller, sent).await {
                    retried = true;
                    debug!("remote refused the token obtained for it (401); fetching another");
                    continue;
                }
            }
            // Per-user OAuth: a 401 (or 403 insufficient_scope) to a caller's call asks for
            // that caller's consent.
            if let Some(status) = refused_status(&answer) {
                let asked = self
                    .shared
                    .auth
                    .challenged(caller, status, challenge.as_deref())
                    .await;
                if let Some(e) = asked {
                    return Err(auth_error(e));
                }
            }
            break answer;
        };
        let mut answer = self.note(answer)?;
        if facts.modern && facts.method.as_deref() == Some("tools/list") && !answer.is_error() {
            answer = self.shared.designations.screen(answer, id)?;
        }
        if facts.initialize && !answer.is_error() {
            if let Some(version) = negotiated_version(answer.payload()) {
                self.shared.link.set_protocol_version(&version);
            }
        }
        Ok(answer.into_backend())
    }

    pub(crate) async fn send_line(&self, line: Bytes) -> Result<(), UpstreamError> {
        let _live = self.enter()?;
        let facts = Facts::of(&line);
        let opens_listen = facts.initialized && self.shared.mode == Mode::Session;
        if opens_listen {
            // From now on the session's requests wait for its listen stream (`open_listen`),
            // even one that overtakes this line.
            self.shared.listen_settled.send_replace(false);
        }
        // The gateway's own line: only a gateway token (client credentials) is added; a
        // session's lines carry what its calls set. On a stateless handle, a call's
        // cancellation carries that call's credential, as the call did.
        let caller = match (self.shared.mode, &facts.cancels) {
            (Mode::Stateless, Some(key)) => self.shared.callers.take(key),
            _ => None,
        };
        // A session carrying its owner's token: what it sends on its own (answers to the
        // remote's questions, cancellations) goes without it once consent is revoked, as its
        // calls do (an HTTP+SSE session ends).
        self.shared.drop_revoked_auth().await;
        let sent = match self.authorization(caller.as_ref()).await {
            Ok((_, per_request)) => {
                let sent = self
                    .shared
                    .link
                    .send(line, per_request, facts.headers())
                    .await;
                self.note(sent)
            }
            Err(e) => Err(e),
        };
        match (sent, opens_listen) {
            (Ok(()), true) => self.open_listen(),
            (Err(e), true) => {
                self.shared.listen_settled.send_replace(true);
                return Err(e);
            }
            (sent, false) => sent?,
        }
        Ok(())
    }

    pub(crate) fn try_send_line(&self, line: Bytes) -> Result<(), UpstreamError> {
        // Bounded by MAX_IN_FLIGHT (checked by `send_line`) and by the call deadline; the
        // task owns nothing but its one POST.
        // Counted before the task exists, so a flood of these is refused, not spawned.
        let live = self.enter()?;
        let me = self.clone();
        tokio::spawn(async move {
            let _live = live;
            if let Err(e) = me.send_line(line).await {
                debug!(error = %e, "line to the remote not delivered");
            }
        });
        Ok(())
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lost.lock().is_some()
    }

    pub(crate) fn is_reachable(&self) -> bool {
        self.shared.reachable.load(Ordering::Relaxed) && !self.is_closed()
    }

    /// The transport it speaks (a stateless handle on an HTTP+SSE remote has none but that).
    pub(crate) fn transport(&self) -> RemoteTransport {
        match self.shared.link {
            Link::Streamable(_) => RemoteTransport::Streamable,
            Link::Sse { .. } | Link::NoSession => RemoteTransport::Sse,
        }
    }

    fn closed_error(&self) -> Option<UpstreamError> {
        self.shared.lost.lock().clone()
    }

    /// Counts one exchange in, refusing it when the session is gone or too busy.
    fn enter(&self) -> Result<LiveGuard, UpstreamError> {
        if let Some(e) = self.closed_error() {
            return Err(e);
        }
        let n = self.shared.live.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(self.shared.clone());
        if n >= MAX_IN_FLIGHT {
            return Err(UpstreamError::Overloaded);
        }
        Ok(guard)
    }

    /// Records what an exchange says about the remote, and maps its error.
    fn note<T>(&self, result: Result<T, RemoteError>) -> Result<T, UpstreamError> {
        match result {
            Ok(v) => {
                self.shared.reachable.store(true, Ordering::Relaxed);
                Ok(v)
            }
            Err(RemoteError::Transport(reason)) => {
                self.shared.reachable.store(false, Ordering::Relaxed);
                Err(UpstreamError::Remote(RemoteError::Transport(reason)))
            }
            Err(RemoteError::SessionLost) if self.shared.mode == Mode::Session => {
                Err(self.shared.lose(RemoteError::SessionLost))
            }
            Err(e) => Err(UpstreamError::Remote(e)),
        }
    }

    fn open_listen(&self) {
        let mut listen = self.shared.listen.lock();
        if listen.is_none() {
            *listen = self.shared.link.listen();
        }
        let Some(opened) = listen.as_mut().and_then(ListenHandle::take_opened) else {
            // Already open (or none to open): nothing to wait for.
            self.shared.listen_settled.send_replace(true);
            return;
        };
        let settled = self.shared.listen_settled.clone();
        // Ends when the first attempt to open the stream does (or the stream is dropped).
        tokio::spawn(async move {
            let _ = opened.await;
            settled.send_replace(true);
        });
    }

    /// Waits (bounded) until the listen stream being opened has settled.
    async fn listen_settled(&self) {
        let mut settled = self.shared.listen_settled.subscribe();
        if *settled.borrow() {
            return;
        }
        if tokio::time::timeout(LISTEN_WAIT, settled.wait_for(|s| *s))
            .await
            .is_err()
        {
            // A remote slow to take the stream delays one wait, not every request.
            self.shared.listen_settled.send_replace(true);
        }
    }
}

impl Shared {
    /// A session carrying its owner's token whose consent was revoked stops carrying it
    /// (an HTTP+SSE session ends): for what the session sends on its own, its lines and its
    /// listen stream's reopening, which no call's lookup precedes. Read only; a vault that
    /// cannot answer revokes nothing.
    async fn drop_revoked_auth(&self) {
        let owner = self.owner_principal.lock().clone();
        if let Some((principal, seen)) = owner.zip(self.link.caller_auth()) {
            if self.auth.revoked(&principal).await {
                self.link.clear_caller_auth_if(&seen);
            }
        }
    }

    /// The upstream session is gone: every later call fails, and the sink hears it once.
    fn lose(&self, why: RemoteError) -> UpstreamError {
        let error = UpstreamError::Remote(why);
        let first = {
            let mut lost = self.lost.lock();
            let first = lost.is_none();
            lost.get_or_insert_with(|| error.clone());
            first
        };
        if first {
            self.listen.lock().take();
            warn!("remote upstream session ended: {error}");
            self.sink.closed(&error.to_string());
        }
        error
    }
}

fn auth_error(e: OutgoingAuthError) -> UpstreamError {
    UpstreamError::Remote(RemoteError::OutgoingAuth(e))
}

/// The status of a 401 or 403 answer (with or without a JSON-RPC body).
fn refused_status(answer: &Result<super::RemoteResponse, RemoteError>) -> Option<u16> {
    let status = match answer {
        Ok(r) => r.status(),
        Err(RemoteError::Status { status }) => *status,
        Err(_) => return None,
    };
    matches!(status, 401 | 403).then_some(status)
}

/// Whether the remote answered HTTP 401 (with or without a JSON-RPC body).
fn unauthorized(answer: &Result<super::RemoteResponse, RemoteError>) -> bool {
    match answer {
        Ok(r) => r.status() == 401,
        Err(RemoteError::Status { status }) => *status == 401,
        Err(_) => false,
    }
}

/// One exchange counted in [`Shared::live`].
struct LiveGuard(Arc<Shared>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Ends one upstream session; see [`crate::UpstreamOwner`].
#[derive(Debug)]
pub struct RemoteOwner {
    upstream: RemoteUpstream,
}

impl RemoteOwner {
    /// Ends the session at the remote (DELETE), bounded by `grace`, and closes the handle.
    pub async fn shutdown(self, grace: Duration) {
        let shared = &self.upstream.shared;
        shared.listen.lock().take();
        // Closed first: the stream ending because we end it is not a loss to report.
        shared
            .lost
            .lock()
            .get_or_insert(UpstreamError::Closed("upstream session ended".into()));
        if shared.mode == Mode::Session {
            match tokio::time::timeout(grace, shared.link.end_session()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(error = %e, "remote did not confirm the session's end"),
                Err(_) => debug!("remote did not answer the session's DELETE in time"),
            }
        }
    }
}

impl Drop for RemoteOwner {
    /// Dropped without `shutdown`: the handle closes now; the remote expires the session.
    fn drop(&mut self) {
        let shared = &self.upstream.shared;
        shared.listen.lock().take();
        shared
            .lost
            .lock()
            .get_or_insert(UpstreamError::Closed("upstream session ended".into()));
    }
}

/// The gateway's own error answer to the call `id`, which the remote never saw.
pub(super) fn refused(
    id: &str,
    error: &switchboard_wire::ErrorObject,
) -> Result<super::RemoteResponse, UpstreamError> {
    let error = serde_json::json!({"code": error.code, "message": &*error.message});
    let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#);
    super::answer_from(Bytes::from(line), id, hyper::StatusCode::OK).map_err(UpstreamError::Remote)
}
