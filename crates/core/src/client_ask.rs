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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use switchboard_wire::{encode_request, Message, RequestId};

use crate::registry::Registry;
use crate::route::random_hex;
use crate::session::SessionId;
use crate::{Backends, CoreError};

/// Most gateway requests one session may have outstanding at once; more are refused (429).
pub const MAX_ASKS: usize = 16;

/// Prefix of the keys the gateway's own requests go out under (a backend's are `sbs-`).
const KEY_PREFIX: &str = "sbg-";

/// The replica a gateway key names (`sbg-REPLICA-…`), unverified.
pub(crate) fn replica_of_key(key: &str) -> Option<&str> {
    let (replica, _) = key.strip_prefix(KEY_PREFIX)?.split_once('-')?;
    Some(replica)
}

/// The input capabilities a Legacy client declared in its `initialize`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientCaps {
    /// `capabilities.elicitation` present.
    pub elicitation: bool,
    /// `capabilities.sampling` present.
    pub sampling: bool,
    /// `capabilities.roots` present.
    pub roots: bool,
}

impl ClientCaps {
    /// The capabilities an `initialize`'s params declare (absent or `null` members: not).
    pub(crate) fn of_initialize(params: Option<&RawValue>) -> Self {
        let params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let caps = &params["capabilities"];
        let has = |name: &str| caps.get(name).is_some_and(|v| !v.is_null());
        ClientCaps {
            elicitation: has("elicitation"),
            sampling: has("sampling"),
            roots: has("roots"),
        }
    }

    /// Whether this client declared the capability `name` needs (`Err`: the one missing).
    fn allows(self, name: &str) -> Result<(), &'static str> {
        let declared = match crate::mrtr::capability_of(name) {
            Some("elicitation") => self.elicitation,
            Some("sampling") => self.sampling,
            Some("roots") => self.roots,
            _ => return Ok(()),
        };
        match crate::mrtr::capability_of(name) {
            Some(cap) if !declared => Err(cap),
            _ => Ok(()),
        }
    }
}

/// What the client answered: its `result`, or its `error` object (both as sent).
pub type ClientReply = Result<Box<RawValue>, Box<RawValue>>;

/// One session's outstanding gateway requests and what its client may be asked.
#[derive(Debug, Default)]
pub(crate) struct Asks {
    pub(crate) caps: ClientCaps,
    waiters: HashMap<String, oneshot::Sender<ClientReply>>,
}

impl Asks {
    /// Hands the client's answer to the waiter for `key`; false if none (not ours).
    pub(crate) fn answer(&mut self, key: &str, reply: ClientReply) -> bool {
        match self.waiters.remove(key) {
            Some(waiter) => {
                // The caller may have just given up: its guard removes nothing then.
                let _ = waiter.send(reply);
                true
            }
            None => false,
        }
    }

    /// Registers the waiter for `key`, if the client may be asked `method` and the session
    /// has room.
    pub(crate) fn register(
        &mut self,
        key: &str,
        method: &str,
        tx: oneshot::Sender<ClientReply>,
    ) -> Result<(), CoreError> {
        self.caps
            .allows(method)
            .map_err(CoreError::MissingClientCapability)?;
        if self.waiters.len() >= MAX_ASKS {
            return Err(CoreError::TooManyClientAsks(MAX_ASKS));
        }
        self.waiters.insert(key.to_owned(), tx);
        Ok(())
    }

    /// Removes the waiter for `key`, if it is still there.
    pub(crate) fn forget(&mut self, key: &str) {
        self.waiters.remove(key);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }
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
    /// step (`composite_asks`, judged only for a client with capabilities), from a client
    /// that declared `elicitation`.
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
        let Ok(caps) = self.caps(session) else {
            return false;
        };
        if composite_asks() {
            return caps.elicitation;
        }
        crate::mrtr::METHODS.contains(&name)
            && backends.iter().any(|e| !e.info().era.legacy)
            && (caps.elicitation || caps.sampling || caps.roots)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn capabilities_are_read_from_initialize() {
        let p = raw(r#"{"capabilities":{"elicitation":{},"roots":null}}"#);
        let caps = ClientCaps::of_initialize(Some(&p));
        assert!(caps.elicitation && !caps.roots && !caps.sampling);
        assert_eq!(caps.allows("elicitation/create"), Ok(()));
        assert_eq!(caps.allows("roots/list"), Err("roots"));
        assert_eq!(caps.allows("sampling/createMessage"), Err("sampling"));
        assert_eq!(caps.allows("ping"), Ok(()));
        assert_eq!(ClientCaps::of_initialize(None), ClientCaps::default());
    }

    #[test]
    fn waiters_are_bounded_checked_and_woken_when_the_session_ends() {
        let mut asks = Asks::default();
        let (tx, _rx) = oneshot::channel();
        assert!(matches!(
            asks.register("sbg-0", "elicitation/create", tx),
            Err(CoreError::MissingClientCapability("elicitation"))
        ));
        asks.caps.elicitation = true;
        let mut receivers = Vec::new();
        for i in 0..MAX_ASKS {
            let (tx, rx) = oneshot::channel();
            asks.register(&format!("sbg-{i}"), "elicitation/create", tx)
                .unwrap();
            receivers.push(rx);
        }
        let (tx, _rx) = oneshot::channel();
        assert!(matches!(
            asks.register("sbg-x", "elicitation/create", tx),
            Err(CoreError::TooManyClientAsks(MAX_ASKS))
        ));
        // Dropping the table (the session ending) wakes every waiter with an error.
        drop(asks);
        for mut rx in receivers {
            assert!(matches!(
                rx.try_recv(),
                Err(oneshot::error::TryRecvError::Closed)
            ));
        }
    }

    #[test]
    fn an_answer_reaches_only_its_waiter_once() {
        let mut asks = Asks::default();
        let (tx, mut rx) = oneshot::channel();
        asks.waiters.insert("sbg-a".into(), tx);
        assert!(!asks.answer("sbg-b", Ok(raw("{}"))));
        assert!(asks.answer("sbg-a", Ok(raw(r#"{"x":1}"#))));
        assert!(!asks.answer("sbg-a", Ok(raw("{}"))));
        assert_eq!(rx.try_recv().unwrap().unwrap().get(), r#"{"x":1}"#);
        assert_eq!(asks.len(), 0);
    }
}
