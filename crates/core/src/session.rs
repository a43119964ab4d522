//! Legacy sessions (Streamable HTTP `Mcp-Session-Id`s and HTTP+SSE `session_id`s, told apart by
//! [`Transport`]): the table of live sessions and what each session owns.
//!
//! One owner, [`Sessions`] (a `parking_lot` mutex around a map), locked only for map
//! operations and never across `.await`. Ids are 128-bit CSPRNG values; an id is valid only
//! while it is in the table, so DELETE, TTL expiry and shutdown all end a session the same
//! way: removal, which hands back the session's state for cleanup ([`Ended`]).
//!
//! The rest of the crate changes a session only through the owner's named operations, one
//! per thing done, grouped by what they touch: the table itself (`sessions`), in-flight
//! requests (`requests`), what the session asked to hear (`watch`), its own upstreams
//! (`own`), the gateway's questions to its client (`asks`), HTTP+SSE specifics (`sse`), its
//! streams (`streams`) and its stored record (`stored`). Reads hand back owned copies. The
//! closure-taking accessors (`with`, `for_each`, …) and `Session`'s fields are private to
//! this module.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::listen_stream::ListenState;
use crate::route::{random_hex, RouteKey};
use crate::BackendId;
use crate::Principal;

mod asks;
mod end;
mod own;
mod requests;
mod sessions;
mod sse;
mod stored;
mod streams;
mod watch;

pub(crate) use asks::capability_of;
pub use asks::{ClientCaps, ClientReply, MAX_ASKS};
pub(crate) use end::EndReason;
pub(crate) use own::OwnBackend;
pub(crate) use sessions::Ended;
pub use sessions::Sessions;
use streams::deliver;
pub use streams::{SSE_ANSWER_BYTES, SSE_MAX_REQUESTS};
pub(crate) use watch::{OwnWatch, MAX_SUBSCRIPTIONS, MAX_URI_BYTES};

/// A gateway-minted session id (visible ASCII, 32 hex digits).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    pub(crate) fn mint() -> Self {
        SessionId(random_hex())
    }

    /// The id as sent in `Mcp-Session-Id`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of a session the table holds, by its text (for work the gateway does on its
    /// own sessions, never from a client's header).
    pub(crate) fn held(raw: &str) -> Self {
        SessionId(raw.to_owned())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Session ids are bearer-like secrets: log only a prefix.
        write!(f, "{}…", &self.0[..self.0.len().min(8)])
    }
}

/// Which transport a session belongs to. A session id is valid only on the transport that
/// minted it: a Streamable HTTP `Mcp-Session-Id` names no HTTP+SSE session and vice versa.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP (`/mcp`, `Mcp-Session-Id`).
    Streamable,
    /// The 2024-11-05 HTTP+SSE transport (`GET /sse`, `POST /messages?session_id=`).
    Sse,
}

/// A request of this session that is waiting for the backend, so that the client's
/// `notifications/cancelled` can name it by the client's own id.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) key: RouteKey,
    /// The backend the request went to (its cancellation goes there too).
    pub(crate) backend: BackendId,
    pub(crate) cancel: CancellationToken,
    /// The request's own stream, where a per-session backend's related messages go.
    pub(crate) stream: Option<tokio::sync::mpsc::Sender<Bytes>>,
    /// Whether the backend holds the request under `key`. `false`: the gateway is waiting on
    /// the client (a relayed question between MRTR rounds), so a cancellation stops the wait
    /// and tells the backend nothing.
    pub(crate) at_backend: bool,
}

/// A subscription: the URI, at the backend that serves it.
pub(crate) type SubKey = (BackendId, String);

/// What the gateway keeps for one session.
#[derive(Debug)]
struct Session {
    transport: Transport,
    /// The principal that created the session (issuer, subject): the only one that can use it.
    owner: (String, String),
    protocol_version: &'static str,
    last_seen: Instant,
    listen: ListenState,
    /// `logging/setLevel` of this session, as a rank (see `logging`).
    log_level: Option<u8>,
    /// (backend, URI) pairs this session subscribed to (mirror of the backends' subscription
    /// tables, for cleanup).
    subscriptions: HashSet<SubKey>,
    /// Its subscriptions' place in its principal's count (see `watch`), once it has any.
    subscribed: Option<watch::Share>,
    /// Who subscribed (the latest subscribe's caller, its credential dropped): a changed
    /// policy judges the subscriptions again as this principal.
    subscriber: Option<std::sync::Arc<Principal>>,
    /// Under a policy, the URIs (scheme folded) this session watches at its own processes
    /// (per-session mode), as the policy in force allows: once it subscribed there, only
    /// their `resources/updated` reach the client (a revoked or never-recorded one does not).
    own_watched: HashSet<String>,
    /// In-flight requests by the client's raw id text.
    in_flight: HashMap<Box<str>, InFlight>,
    /// HTTP+SSE only: the tasks running this session's requests. Owned by the session, so
    /// ending the session (in any way) aborts them.
    tasks: Option<JoinSet<()>>,
    /// Per-session mode: this session's own backend process (or upstream session), per
    /// backend.
    own: HashMap<BackendId, OwnBackend>,
    /// A shared backend's questions about this session's tasks, by the key each went to the
    /// client under: the backend that asked, and its id for the question (`dispatch`).
    task_questions: own::TaskQuestionsAsked,
    /// A set with per-session backends: one gate per backend whose own upstream the session
    /// is opening (`per_session::lazy`), so concurrent first requests open one.
    opening: HashMap<BackendId, Arc<tokio::sync::Mutex<()>>>,
    /// A set with per-session backends: the client's `initialize`, for the own upstreams
    /// opened later.
    client_init: Option<Box<serde_json::value::RawValue>>,
    /// Per-session mode, HTTP+SSE: the session's `initialize` is under way (its process
    /// starting or handshaking), so it may neither start another nor be used yet.
    initializing: bool,
    /// The gateway's own requests to this session's client and what it may be asked
    /// (`client_ask`). Dropped with the session, which wakes every waiter.
    asks: asks::Asks,
    /// The client's `initialize` params, kept only with a session store (its record
    /// carries them to another replica).
    init_params: Option<Box<serde_json::value::RawValue>>,
    /// With a session store: the revision of its record this process last wrote or read.
    stored_rev: Option<u64>,
    /// With a session store: its record was last found larger than the store takes (it is
    /// served by this replica only until a write fits): a lost record is not written
    /// again at every request.
    unstorable: bool,
    /// Counts this session against its principal's limit while it exists (any way it ends,
    /// dropping the session gives the place back). `None` when there is no such limit.
    _counted: Option<OwnerSlot>,
}

/// Live sessions per principal (issuer, subject).
type OwnerCounts = Arc<Mutex<HashMap<(String, String), usize>>>;

/// One session's place in its principal's count; given back on drop. Lock order: the
/// session table, then the counts (a slot is dropped while the table may be locked).
#[derive(Debug)]
struct OwnerSlot {
    counts: OwnerCounts,
    owner: (String, String),
}

impl Drop for OwnerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&self.owner) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.owner);
            }
        }
    }
}

impl Session {
    fn new(
        transport: Transport,
        protocol_version: &'static str,
        listen: ListenState,
        tasks: Option<JoinSet<()>>,
        owner: &Principal,
        counted: Option<OwnerSlot>,
    ) -> Self {
        Session {
            transport,
            owner: (owner.issuer.clone(), owner.subject.clone()),
            protocol_version,
            last_seen: Instant::now(),
            listen,
            log_level: None,
            subscriptions: HashSet::new(),
            subscribed: None,
            subscriber: None,
            own_watched: HashSet::new(),
            in_flight: HashMap::new(),
            tasks,
            own: HashMap::new(),
            task_questions: Default::default(),
            initializing: false,
            opening: HashMap::new(),
            client_init: None,
            asks: Default::default(),
            init_params: None,
            stored_rev: None,
            unstorable: false,
            _counted: counted,
        }
    }

    /// The principal that opened it (issuer, subject).
    fn owner(&self) -> &(String, String) {
        &self.owner
    }
}

impl Session {
    fn owned_by(&self, caller: &Principal) -> bool {
        self.owner.0 == caller.issuer && self.owner.1 == caller.subject
    }
}
