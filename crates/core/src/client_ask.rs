//! Gateway-originated requests to a Legacy client: `elicitation/create`,
//! `sampling/createMessage` and `roots/list` that the gateway itself needs answered in the
//! middle of a call (a Modern backend's `input_required` relayed to a Legacy client, a
//! composite tool's elicitation step).
//!
//! The request goes to the session that owns the call, under a gateway-minted key
//! (`sbg-<128-bit hex>`, or `sbg-REPLICA-<128-bit hex>` with replicas, so an answer reaching
//! another replica is handed to the one waiting for it: `session_store::home`), on the calling request's own stream when it has one, else on the
//! session's best stream (`session::deliver`, the rule a backend's own requests follow too).
//! The client's answer comes back through `client_response`, which looks the key up in *that*
//! session only: a key is never a routing decision across sessions. Each session keeps a
//! bounded table of waiters; every way out of [`ClientAsks::ask`] (answer, deadline,
//! caller dropped) removes its waiter, and a session that ends drops its table, so a waiting
//! caller gets a clean error instead of hanging.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use switchboard_wire::{encode_request, Message, RequestId};

use crate::registry::Registry;
use crate::route::random_hex;
use crate::session::{ClientCaps, ClientReply, SessionId};
use crate::{Backends, CoreError};

/// Prefix of the keys the gateway's own requests go out under (a backend's are `sbs-`).
const KEY_PREFIX: &str = "sbg-";

/// The replica a gateway key names (`sbg-REPLICA-…`, `sbq-REPLICA-…`), unverified.
pub(crate) fn replica_of_key(key: &str) -> Option<&str> {
    let rest = (key.strip_prefix(KEY_PREFIX))
        .or_else(|| key.strip_prefix(crate::route::TASK_QUESTION_PREFIX))?;
    let (replica, _) = rest.split_once('-')?;
    Some(replica)
}

/// Removes the waiter on every exit path of [`ClientAsks::ask`] (answered, timed out, dropped).
struct Waiter<'a> {
    registry: &'a Registry,
    session: &'a str,
    key: String,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.registry.sessions.forget_ask(self.session, &self.key);
    }
}

/// The gateway's own requests to Legacy clients (built by `Gateway::new`).
#[derive(Debug)]
pub(crate) struct ClientAsks {
    /// The sessions, with each one's waiters and declared capabilities.
    pub(crate) registry: Arc<Registry>,
    /// This replica's name, in the keys it mints (`session_store::home`).
    pub(crate) replica_id: Option<String>,
    /// How long a question waits for its answer (the request deadline).
    pub(crate) deadline: Duration,
}

impl ClientAsks {
    /// Asks the Legacy client of `session` `method` (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`, or any other client method) with `params`, and
    /// waits for its answer within the request deadline.
    ///
    /// `stream` is the calling request's own stream (`Call::stream`), preferred when present;
    /// otherwise the session's best stream carries the request. Errors:
    /// [`CoreError::MissingClientCapability`] (the client did not declare what `method`
    /// needs; nothing is sent), [`CoreError::TooManyClientAsks`] (the session has
    /// [`MAX_ASKS`] outstanding), [`CoreError::NoClientStream`] (no stream could take it),
    /// [`CoreError::Timeout`], [`CoreError::Cancelled`] (the session ended meanwhile),
    /// [`CoreError::SessionNotFound`]. The client's JSON-RPC error comes back as
    /// `Ok(Err(error object))`.
    pub(crate) async fn ask(
        &self,
        session: &SessionId,
        stream: Option<&mpsc::Sender<Bytes>>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<ClientReply, CoreError> {
        let key = match &self.replica_id {
            Some(replica) => format!("{KEY_PREFIX}{replica}-{}", random_hex()),
            None => format!("{KEY_PREFIX}{}", random_hex()),
        };
        let line = Bytes::from(encode_request(
            &RequestId::from_string(&key),
            method,
            params,
        ));
        let (tx, rx) = oneshot::channel();
        let sid = session.as_str();
        self.registry.sessions.register_ask(sid, &key, method, tx)?;
        let _waiter = Waiter {
            registry: &self.registry,
            session: sid,
            key,
        };
        let delivered = self.registry.sessions.deliver_ask(sid, line, stream);
        if !delivered {
            return Err(CoreError::NoClientStream);
        }
        let deadline = self.deadline;
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            // The session ended: its table (and our sender) went with it.
            Ok(Err(_)) => Err(CoreError::Cancelled),
            Err(_) => Err(CoreError::Timeout(deadline)),
        }
    }

    /// The input capabilities the client of `session` declared.
    pub(crate) fn caps(&self, session: &SessionId) -> Result<ClientCaps, CoreError> {
        self.registry.sessions.client_caps(session.as_str())
    }

    /// Whether handling `msg` may make the gateway ask the session's client something (so
    /// its answer should be a stream the question can travel on first, whether or not the
    /// client holds a listen stream): a call that may answer `input_required`, from a client
    /// that declared something it can be asked, with a Modern-only backend in `backends`
    /// (whose `input_required` the gateway relays); or a composite tool with an elicitation
    /// step (`composite_asks`), from a client that declared `elicitation`.
    pub(crate) fn may_ask(
        &self,
        session: Option<&SessionId>,
        msg: &Message<'_>,
        composite_asks: impl FnOnce() -> bool,
        backends: &Backends,
    ) -> bool {
        let (Some(session), Some(name)) = (session, msg.method) else {
            return false;
        };
        let composite = composite_asks();
        // `tasks/result` too: on a Modern backend the gateway polls the task, and asks the
        // client for the input it needs meanwhile (`modern::legacy_tasks`).
        let relayed = !composite
            && (switchboard_wire::method::INPUT_CAPABLE.contains(&name) || name == "tasks/result")
            && backends.relays_questions();
        // The session's capabilities (a look into the session table) only when something
        // could ask.
        if !composite && !relayed {
            return false;
        }
        let Ok(caps) = self.caps(session) else {
            return false;
        };
        match composite {
            true => caps.elicitation,
            false => caps.elicitation || caps.sampling || caps.roots,
        }
    }
}

/// Keeps the capabilities of a client's `initialize` on its session.
pub(crate) fn remember(registry: &Registry, session: &SessionId, params: Option<&RawValue>) {
    let caps = ClientCaps::of_initialize(params);
    registry.sessions.set_client_caps(session.as_str(), caps);
}

/// A client's response, if it answers one of the gateway's own requests of this session.
/// `Ok(true)`: delivered to its waiter; `Ok(false)`: not a gateway key (the caller tries the
/// session's backends next).
pub(crate) fn client_response(
    registry: &Registry,
    session: &str,
    key: &str,
    msg: &Message<'_>,
) -> Result<bool, CoreError> {
    if !key.starts_with(KEY_PREFIX) {
        return Ok(false);
    }
    let reply = match (msg.result, msg.error) {
        (Some(r), _) => Ok(r.to_owned()),
        (None, Some(e)) => Err(e.to_owned()),
        (None, None) => return Err(CoreError::UnexpectedResponse),
    };
    registry
        .sessions
        .answer_ask(session, key, reply)?
        .then_some(true)
        .ok_or(CoreError::UnexpectedResponse)
}
