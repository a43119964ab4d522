//! Guards that tie per-request state to the request's lifetime: the in-flight entry that lets
//! a client cancel by its own id, and the upstream cancellation sent when a call is abandoned.
//! Both run on drop, so every way a request can end (answer, error, timeout, client gone)
//! cleans up the same way.

use bytes::Bytes;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use switchboard_upstream::Upstream;
use switchboard_wire::{encode_notification, method, RequestId};

use crate::route::RouteKey;
use crate::session::{InFlight, SessionId, Sessions};
use crate::BackendId;

/// Makes a request cancellable by the client's own id while it is in flight.
pub(crate) struct InFlightGuard<'a> {
    sessions: &'a Sessions,
    session: &'a SessionId,
    client_id: Box<str>,
    key: RouteKey,
}

impl<'a> InFlightGuard<'a> {
    /// The request: the client's id, and the backend the request goes to.
    pub(crate) fn register(
        sessions: &'a Sessions,
        session: &'a SessionId,
        (id, backend): (&RequestId, &BackendId),
        key: &RouteKey,
        cancel: &CancellationToken,
        stream: Option<mpsc::Sender<Bytes>>,
    ) -> Self {
        let entry = InFlight {
            key: key.clone(),
            backend: backend.clone(),
            cancel: cancel.clone(),
            stream,
            at_backend: true,
        };
        Self::insert(sessions, session, id, entry)
    }

    /// A request of the client's that waits on the client itself (a question relayed to it
    /// between MRTR rounds, the backend holding nothing): its cancellation fires `cancel`
    /// and reaches no backend.
    pub(crate) fn waiting_on_client(
        sessions: &'a Sessions,
        session: &'a SessionId,
        (id, backend): (&RequestId, &BackendId),
        cancel: &CancellationToken,
        stream: Option<mpsc::Sender<Bytes>>,
    ) -> Self {
        let entry = InFlight {
            key: RouteKey::mint(),
            backend: backend.clone(),
            cancel: cancel.clone(),
            stream,
            at_backend: false,
        };
        Self::insert(sessions, session, id, entry)
    }

    fn insert(
        sessions: &'a Sessions,
        session: &'a SessionId,
        id: &RequestId,
        entry: InFlight,
    ) -> Self {
        let client_id: Box<str> = id.as_json().into();
        let key = entry.key.clone();
        sessions.track_request(session.as_str(), client_id.clone(), entry);
        InFlightGuard {
            sessions,
            session,
            client_id,
            key,
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        // Only our own entry: a client reusing an id concurrently owns the newer one.
        self.sessions
            .untrack_request(self.session.as_str(), &self.client_id, &self.key);
    }
}

/// Sends `notifications/cancelled` for a call that will never be awaited again, so the backend
/// can stop work nobody will read.
pub(crate) struct CancelOnDrop<'a> {
    pub(crate) backend: &'a Upstream,
    pub(crate) key: &'a RouteKey,
    pub(crate) reason: &'static str,
    pub(crate) armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            send_cancel(self.backend, self.key, self.reason);
        }
    }
}

/// Never blocks: if the queue is full the backend is already overloaded, and the late answer
/// will be dropped as unattributable anyway.
pub(crate) fn send_cancel(backend: &Upstream, key: &RouteKey, reason: &str) {
    let params = json!({"requestId": key.as_str(), "reason": reason}).to_string();
    // A replicated backend: only the replica that holds the call.
    let Some(backend) = backend.for_key(key.as_str()) else {
        return;
    };
    if let Ok(params) = RawValue::from_string(params) {
        let _ = backend.try_send_line(encode_notification(method::CANCELLED, Some(&params)));
    }
}
