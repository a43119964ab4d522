//! The gateway's own requests to a session's client (`client_ask` sends them): what the
//! client declared it may be asked, the waiters for its answers, and the stream a question
//! travels on.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::{Sessions, Transport};
use crate::CoreError;

/// The client capability a server-to-client request needs (`elicitation/create`:
/// `elicitation`, …); `None` for any other method.
pub(crate) fn capability_of(name: &str) -> Option<&'static str> {
    match name {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Most gateway requests one session may have outstanding at once; more are refused (429).
pub const MAX_ASKS: usize = 16;

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
        let declared = match capability_of(name) {
            Some("elicitation") => self.elicitation,
            Some("sampling") => self.sampling,
            Some("roots") => self.roots,
            _ => return Ok(()),
        };
        match capability_of(name) {
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

impl Sessions {
    /// Keeps the input capabilities the session's client declared in its `initialize`.
    pub(crate) fn set_client_caps(&self, raw: &str, caps: ClientCaps) {
        let _ = self.with(raw, |s| s.asks.caps = caps);
    }

    /// The input capabilities the session's client declared.
    pub(crate) fn client_caps(&self, raw: &str) -> Result<ClientCaps, CoreError> {
        self.with(raw, |s| s.asks.caps)
    }

    /// Registers the waiter for the answer to question `key` (`method`), if the client may
    /// be asked `method` and the session has room for another question.
    pub(crate) fn register_ask(
        &self,
        raw: &str,
        key: &str,
        method: &str,
        tx: oneshot::Sender<ClientReply>,
    ) -> Result<(), CoreError> {
        self.with(raw, |s| s.asks.register(key, method, tx))?
    }

    /// Removes the waiter for question `key` (answered, timed out, or given up).
    pub(crate) fn forget_ask(&self, raw: &str, key: &str) {
        let _ = self.with(raw, |s| s.asks.forget(key));
    }

    /// Hands the client's answer to the waiter for question `key`; false if the session
    /// asked no such question.
    pub(crate) fn answer_ask(
        &self,
        raw: &str,
        key: &str,
        reply: ClientReply,
    ) -> Result<bool, CoreError> {
        self.with(raw, |s| s.asks.answer(key, reply))
    }

    /// Puts a question on the asking request's own `stream` when it has one (not on
    /// HTTP+SSE, whose one stream carries everything), else on the session's best stream.
    /// False when no stream took it.
    pub(crate) fn deliver_ask(
        &self,
        raw: &str,
        line: Bytes,
        stream: Option<&mpsc::Sender<Bytes>>,
    ) -> bool {
        self.with(raw, |s| {
            let own = s.transport != Transport::Sse
                && stream.is_some_and(|st| st.try_send(line.clone()).is_ok());
            own || super::deliver(s, line)
        })
        .unwrap_or(false)
    }
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
