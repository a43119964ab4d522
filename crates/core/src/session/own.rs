//! A session's own backends (`--isolation per-session`): the process or upstream session the
//! session was given, and the server requests it has sent the client; and the operations on
//! them.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use switchboard_upstream::{Upstream, UpstreamOwner};
use switchboard_wire::RequestId;

use super::{deliver, Sessions};
use crate::BackendId;
use crate::CoreError;

/// A session's own backend.
#[derive(Debug)]
pub(crate) struct OwnBackend {
    pub(crate) handle: Upstream,
    /// Taken on session end and shut down outside the table lock.
    pub(crate) process: Option<UpstreamOwner>,
    /// Gateway key sent to the client → the backend's own request id.
    pub(crate) server_requests: HashMap<String, RequestId>,
    /// Handshaken: requests may use it. An own upstream opened on first use (a set) is in
    /// the session while it handshakes (so the session's end stops it, and what it asks the
    /// client meanwhile is the session's) but is not routed to until then.
    pub(crate) ready: bool,
}

impl OwnBackend {
    /// `run --isolation per-session`'s: the session-wide `initializing` flag says when it
    /// may be used.
    pub(crate) fn new(handle: Upstream, process: UpstreamOwner) -> Self {
        OwnBackend {
            handle,
            process: Some(process),
            server_requests: HashMap::new(),
            ready: true,
        }
    }

    /// One opened on first use, not handshaken yet.
    pub(crate) fn opening(handle: Upstream, process: UpstreamOwner) -> Self {
        OwnBackend {
            ready: false,
            ..OwnBackend::new(handle, process)
        }
    }
}

/// Most outstanding server→client requests per session; more are refused to the backend.
const MAX_SERVER_REQUESTS: usize = 256;

/// A shared backend's questions about a session's tasks, by the key each went to the client
/// under: the backend that asked and its id for the question. The session owns them: one
/// still unanswered when it ends is answered to the backend with an error then, so the
/// backend is never left waiting on a client that is gone.
#[derive(Debug, Default)]
pub(crate) struct TaskQuestionsAsked(HashMap<String, (Upstream, RequestId, BackendId)>);

impl Drop for TaskQuestionsAsked {
    fn drop(&mut self) {
        let err = switchboard_wire::ErrorObject::new(
            switchboard_wire::codes::INTERNAL_ERROR,
            "The session ended before its client answered",
        );
        for (backend, id, _) in self.0.values() {
            let _ = backend.try_send_line(switchboard_wire::encode_error(Some(id), &err));
        }
    }
}

impl Sessions {
    /// Puts `own` in the session as its own upstream on `backend`. Returns the one it
    /// replaces, to drop outside the table lock. A session that ended takes nothing (`own` is
    /// dropped, its process killed).
    pub(crate) fn install_own(
        &self,
        raw: &str,
        backend: &BackendId,
        own: OwnBackend,
    ) -> Result<Option<OwnBackend>, CoreError> {
        self.with(raw, |s| s.own.insert(backend.clone(), own))
    }

    /// Takes the session's own upstream on `backend` out (it failed to start), to drop
    /// outside the table lock.
    pub(crate) fn remove_own(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<Option<OwnBackend>, CoreError> {
        self.with(raw, |s| s.own.remove(backend))
    }

    /// Takes the session's own upstream on `backend` out if it is not handshaken (an opening
    /// that did not finish), to drop outside the table lock.
    pub(crate) fn remove_half_open(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<Option<OwnBackend>, CoreError> {
        self.with(raw, |s| {
            let half = s.own.get(backend).is_some_and(|o| !o.ready);
            half.then(|| s.own.remove(backend)).flatten()
        })
    }

    /// Takes the session's own upstream on `backend` out if it is closed (a fresh one opened
    /// meanwhile stays), to drop outside the table lock.
    pub(crate) fn remove_closed_own(&self, raw: &str, backend: &BackendId) -> Option<OwnBackend> {
        self.with(raw, |s| {
            let closed = s.own.get(backend).is_some_and(|o| o.handle.is_closed());
            closed.then(|| s.own.remove(backend)).flatten()
        })
        .ok()
        .flatten()
    }

    /// The gate that makes concurrent first requests of the session open one own upstream
    /// on `backend`.
    pub(crate) fn opening_gate(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<Arc<tokio::sync::Mutex<()>>, CoreError> {
        self.with(raw, |s| {
            s.opening.entry(backend.clone()).or_default().clone()
        })
    }

    /// Whether the session has a live own upstream on `backend` (handshaken, not closed),
    /// and the client's `initialize` a new one would be opened with.
    pub(crate) fn live_own_and_init(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<(bool, Option<Box<RawValue>>), CoreError> {
        self.with(raw, |s| {
            let live = s
                .own
                .get(backend)
                .is_some_and(|o| o.ready && !o.handle.is_closed());
            (live, s.client_init.clone())
        })
    }

    /// Keeps the client's `initialize` for the own upstreams the session opens later.
    pub(crate) fn set_client_init(&self, raw: &str, init: Option<Box<RawValue>>) {
        let _ = self.with(raw, |s| s.client_init = init);
    }

    /// Marks the session's own upstream on `backend` handshaken (requests may use it).
    /// Returns the session's log level, read under the same lock.
    pub(crate) fn mark_own_ready(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<Option<u8>, CoreError> {
        self.with(raw, |s| {
            if let Some(own) = s.own.get_mut(backend) {
                own.ready = true;
            }
            s.log_level
        })
    }

    /// The session's own upstream on `backend` when requests may use it: handshaken, and
    /// the session not initializing. `Ok(None)`: it has none usable.
    pub(crate) fn own_for_requests(
        &self,
        raw: &str,
        backend: &BackendId,
    ) -> Result<Option<Upstream>, CoreError> {
        self.with(raw, |s| match s.own.get(backend) {
            Some(own) if !s.initializing && own.ready => Some(own.handle.clone()),
            _ => None,
        })
    }

    /// The session's own upstream on `backend` once handshaken (also while the session
    /// initializes). `None` for a session that has ended.
    pub(crate) fn ready_own(&self, raw: &str, backend: &BackendId) -> Option<Upstream> {
        self.with(raw, |s| {
            s.own
                .get(backend)
                .filter(|o| o.ready)
                .map(|o| o.handle.clone())
        })
        .ok()
        .flatten()
    }

    /// Every handshaken own upstream of the session.
    pub(crate) fn ready_owns(&self, raw: &str) -> Result<Vec<Upstream>, CoreError> {
        self.with(raw, |s| {
            s.own
                .values()
                .filter(|o| o.ready)
                .map(|o| o.handle.clone())
                .collect()
        })
    }

    /// A message of the session's own upstream, onto the session's best stream. Under a
    /// policy (the session subscribed there as a judged principal), a `resources/updated`
    /// (`updated_uri`, scheme folded) only for a URI it still watches: a revoked one, another
    /// spelling, or one never subscribed is withheld. Whether a stream took it.
    pub(crate) fn deliver_own_message(
        &self,
        raw: &str,
        data: Bytes,
        updated_uri: Option<&str>,
    ) -> bool {
        self.with(raw, |s| {
            let withheld =
                s.subscriber.is_some() && updated_uri.is_some_and(|u| !s.own_watched.contains(u));
            if withheld {
                return false;
            }
            deliver(s, data)
        })
        .unwrap_or(false)
    }

    /// A request of the session's own upstream on `backend` (its id `id`) to the client,
    /// sent as `line` under the gateway's `key`: recorded so the client's answer finds its
    /// way back, and put on the session's best stream. False (nothing recorded) when the
    /// session has too many outstanding or no stream took it.
    pub(crate) fn deliver_server_request(
        &self,
        raw: &str,
        backend: &BackendId,
        (key, id): (&str, &RequestId),
        line: Bytes,
    ) -> bool {
        self.with(raw, |s| {
            let Some(own) = s.own.get_mut(backend) else {
                return false;
            };
            if own.server_requests.len() >= MAX_SERVER_REQUESTS {
                return false;
            }
            own.server_requests.insert(key.to_owned(), id.clone());
            if deliver(s, line) {
                return true;
            }
            if let Some(own) = s.own.get_mut(backend) {
                own.server_requests.remove(key);
            }
            false
        })
        .unwrap_or(false)
    }

    /// Sends a shared `backend`'s request `id` about one of the session's tasks to its client,
    /// under the gateway's `key` (`line`), remembering where the answer goes. `false`: the
    /// session is gone, has [`MAX_SERVER_REQUESTS`] waiting, or has no stream to carry it.
    pub(crate) fn deliver_task_question(
        &self,
        raw: &str,
        (backend, backend_id): (&Upstream, &BackendId),
        (key, id): (&str, &RequestId),
        line: Bytes,
    ) -> bool {
        self.with(raw, |s| {
            if s.task_questions.0.len() >= MAX_SERVER_REQUESTS {
                return false;
            }
            let asker = (backend.clone(), id.clone(), backend_id.clone());
            s.task_questions.0.insert(key.to_owned(), asker);
            if deliver(s, line) {
                return true;
            }
            s.task_questions.0.remove(key);
            false
        })
        .unwrap_or(false)
    }

    /// The client's answer to server request `key`: the upstream that asked (the session's
    /// own, or a shared one about the session's task), its own request id and its backend,
    /// taken out of the session. `Ok(None)`: nothing of the session asked under that key
    /// (keys are minted per request).
    pub(crate) fn take_server_request(
        &self,
        raw: &str,
        key: &str,
    ) -> Result<Option<(Upstream, RequestId, BackendId)>, CoreError> {
        self.with(raw, |s| {
            let own = s.own.iter_mut().find_map(|(backend, own)| {
                let id = own.server_requests.remove(key)?;
                Some((own.handle.clone(), id, backend.clone()))
            });
            own.or_else(|| s.task_questions.0.remove(key))
        })
    }

    /// Sets whether the session is initializing (tests of routing while it is).
    #[cfg(test)]
    pub(crate) fn set_initializing(&self, raw: &str, initializing: bool) -> Result<(), CoreError> {
        self.with(raw, |s| s.initializing = initializing)
    }
}
