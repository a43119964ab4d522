//! The gateway's own requests to a session's client (`client_ask`): what the client may be
//! asked, the waiters for its answers, and the stream a question travels on.

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::{Sessions, Transport};
use crate::client_ask::{ClientCaps, ClientReply};
use crate::CoreError;

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
