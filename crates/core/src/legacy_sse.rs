//! Sessions of the 2024-11-05 HTTP+SSE transport (`GET /sse` + `POST /messages`).
//!
//! They live in the same [`Sessions`](crate::session::Sessions) as Streamable HTTP
//! sessions (one table, one bound, one reaper) but are tagged [`Transport::Sse`], so their ids
//! are never valid on `/mcp` and vice versa. What differs:
//!
//! - The session *is* its stream: it is created with the stream open (its `ListenState` is
//!   attached from the start, without a replay buffer), and it ends when the stream closes. So
//!   the dispatch table needs nothing SSE-specific: list_changed reaches the stream through
//!   `for_each`, resources/updated through `push_listen`, exactly like a listen stream.
//! - Answers cannot travel on the POST, so each request runs in a task owned by the session
//!   (a bounded `JoinSet` inside the session's table entry) and its answer, and its progress,
//!   are queued on the session's stream. When the session ends — stream closed, TTL, shutdown —
//!   the entry leaves the table, which aborts those tasks (each aborted call withdraws its route
//!   key and cancels upstream) and closes the stream. An answer produced after that finds no
//!   session and is dropped: there is no queue a later client could inherit.
//! - Per-session mode (`--isolation per-session`): the session exists before its
//!   `initialize`, so its process is started when that arrives, not at `GET /sse`; until it
//!   is ready the session uses no backend at all (see `Gateway::own_route`). Its process's
//!   requests and notifications come through `per_session::SessionSink` onto this stream,
//!   like progress (never into the room kept for answers), and its exit ends the session.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use tokio::task::JoinSet;
use tracing::debug;

use switchboard_wire::RequestId;

use crate::listen_stream::{ListenEvent, ListenState};
use crate::session::{SessionId, Transport};
pub use crate::session::{SSE_ANSWER_BYTES, SSE_MAX_REQUESTS};
use crate::stream_queue::{Limits, QueueRx};
use crate::CoreError;

/// Capacity of an HTTP+SSE session's stream queue. Progress may use it only down to
/// [`SSE_MAX_REQUESTS`] free slots, so every running request's answer always fits; a client
/// that stops reading long enough to fill it anyway is evicted, which ends its session.
pub const SSE_QUEUE: usize = 4 * SSE_MAX_REQUESTS;
/// Byte budget of an HTTP+SSE session's stream queue: its answers' share plus as much again
/// for progress and listen traffic. Going over it evicts the consumer, as the event bound does
/// (the session ends). Answers weigh nothing against it: they are bounded by
/// [`SSE_MAX_REQUESTS`], one per request the client made (see `ListenState::push_answer`).
pub const SSE_QUEUE_BYTES: usize = 2 * SSE_ANSWER_BYTES;
/// The revision a session is recorded with until its `initialize` negotiates one.
const TRANSPORT_REVISION: &str = "2024-11-05";

/// A new HTTP+SSE session and its stream.
#[derive(Debug)]
pub struct SseSession {
    /// Goes out in the `endpoint` event's URI.
    pub id: SessionId,
    /// Every message for this session, in order; ends when the session ends.
    pub events: QueueRx<ListenEvent>,
}

/// An HTTP+SSE session's claim on its one per-session `initialize`
/// ([`SseStreams::claim_initialize`]); released on drop.
#[derive(Debug)]
pub struct SseInitClaim {
    registry: Arc<crate::registry::Registry>,
    pub(crate) session: SessionId,
}

impl SseInitClaim {
    /// The session the claim is for.
    pub fn session(&self) -> &SessionId {
        &self.session
    }
}

impl Drop for SseInitClaim {
    fn drop(&mut self) {
        self.registry
            .sessions
            .release_initialize(self.session.as_str());
    }
}

/// What `http` does with the HTTP+SSE sessions it holds: open one, resolve one, claim its
/// per-session `initialize`, run a request as its task, queue progress and answers on its
/// stream, keep it alive. A handle on the session table (`Gateway::sse`); initializing and
/// closing a session stay with the gateway (they negotiate, audit and clean up).
#[derive(Debug, Clone)]
pub struct SseStreams {
    registry: Arc<crate::registry::Registry>,
}

impl SseStreams {
    pub(crate) fn new(registry: Arc<crate::registry::Registry>) -> Self {
        SseStreams { registry }
    }

    /// Opens an HTTP+SSE session (`GET /sse`) owned by `caller`, with its stream attached.
    pub fn open(&self, caller: &crate::Principal) -> Result<SseSession, CoreError> {
        let (listen, events) = ListenState::stream_only(Limits {
            events: SSE_QUEUE,
            bytes: SSE_QUEUE_BYTES,
        });
        let id = self.registry.sessions.create_with(
            Transport::Sse,
            TRANSPORT_REVISION,
            listen,
            Some(JoinSet::new()),
            caller,
        )?;
        debug!(session = ?id, "HTTP+SSE session opened");
        Ok(SseSession { id, events })
    }

    /// Resolves a client-supplied HTTP+SSE session id (`POST /messages?session_id=`),
    /// refreshing its TTL. Streamable HTTP ids, and other principals' sessions, are not found.
    pub fn session(&self, raw: &str, caller: &crate::Principal) -> Result<SessionId, CoreError> {
        self.registry
            .sessions
            .touch(raw, Transport::Sse, caller)
            .map(|(id, _)| id)
    }

    /// Per-session mode: claims the session's one `initialize` (refused while another runs,
    /// or once the session has its process). The claim is released when dropped, so an
    /// `initialize` that fails, or whose task never runs, leaves the session free to retry.
    pub fn claim_initialize(&self, session: &SessionId) -> Result<SseInitClaim, CoreError> {
        self.registry.sessions.claim_initialize(session.as_str())?;
        Ok(SseInitClaim {
            registry: self.registry.clone(),
            session: session.clone(),
        })
    }

    /// Runs `task` (one request and the delivery of its answer) as a task owned by the session:
    /// it is aborted when the session ends. Refused when the session already runs
    /// [`SSE_MAX_REQUESTS`].
    pub fn spawn(
        &self,
        session: &SessionId,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), CoreError> {
        self.registry.sessions.spawn_task(session.as_str(), task)
    }

    /// Queues progress on an HTTP+SSE session's stream. Returns false when it was not queued:
    /// the session is gone (the message is dropped, never kept for anyone), or the queue is
    /// short of the room kept for answers.
    pub fn deliver_progress(&self, session: &SessionId, data: Bytes) -> bool {
        self.registry
            .sessions
            .push_sse_progress(session.as_str(), data)
    }

    /// Queues request `id`'s answer on its HTTP+SSE session's stream: never refused for its
    /// size, but replaced by an error for `id` past the unread bound (see
    /// [`ListenState::push_answer`]); a queue over its event bound, which the reserved slots
    /// make unreachable while the client reads, evicts the consumer. False when it was not
    /// queued (the session is gone: the answer is dropped, never kept).
    pub fn deliver_answer(&self, session: &SessionId, id: &RequestId, data: Bytes) -> bool {
        let too_many = || {
            let err = switchboard_wire::ErrorObject::new(
                switchboard_wire::codes::INTERNAL_ERROR,
                "Internal error: the answer was not sent: the session's stream has too many answers unread",
            );
            Bytes::from(switchboard_wire::encode_error(Some(id), &err))
        };
        self.registry
            .sessions
            .push_sse_answer(session.as_str(), data, too_many)
    }

    /// Whether requests of this HTTP+SSE session are still running (their answers are still to
    /// be queued on its stream). False once the session has ended.
    pub fn in_flight(&self, session: &SessionId) -> bool {
        self.registry.sessions.has_running_tasks(session.as_str())
    }

    /// Refreshes an HTTP+SSE session's TTL while its stream is open. False once it has ended.
    pub fn keep_alive(&self, session: &SessionId) -> bool {
        self.registry.sessions.refresh(session, Transport::Sse)
    }
}
