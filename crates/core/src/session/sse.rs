//! What only an HTTP+SSE session (`legacy_sse`) has: its one stream carries its answers
//! too, its requests run as tasks it owns, and, per-session, its `initialize` is claimed.

use std::future::Future;

use bytes::Bytes;
use tokio::task::JoinSet;

use super::{Sessions, Transport, SSE_ANSWER_BYTES, SSE_MAX_REQUESTS};
use crate::CoreError;

impl Sessions {
    /// Records the version an HTTP+SSE session's `initialize` negotiated and queues its
    /// answer on the session's stream, against the stream's byte budget (it echoes the
    /// client's id, of any length, and is answered without a task: counted as an answer, a
    /// client repeating it unread would pin the event bound's worth, review HIGH). A session
    /// whose stream was evicted, or is by this answer, is not found: it could never be sent.
    pub(crate) fn queue_initialize_answer(
        &self,
        raw: &str,
        version: &'static str,
        response: &Bytes,
    ) -> Result<(), CoreError> {
        self.with_transport(raw, Transport::Sse, |s| {
            let queued = s.listen.is_attached() && s.listen.push(response.clone());
            if queued {
                s.protocol_version = version;
            }
            queued
        })?
        .then_some(())
        .ok_or(CoreError::SessionNotFound)
    }

    /// Records the version the session's `initialize` negotiated.
    pub(crate) fn set_protocol_version(
        &self,
        raw: &str,
        version: &'static str,
    ) -> Result<(), CoreError> {
        self.with(raw, |s| s.protocol_version = version)
    }

    /// Per-session mode: claims an HTTP+SSE session's one `initialize` (refused while
    /// another runs, or once the session has its process).
    pub(crate) fn claim_initialize(&self, raw: &str) -> Result<(), CoreError> {
        self.with_transport(raw, Transport::Sse, |s| {
            if s.initializing || !s.own.is_empty() {
                return Err(CoreError::AlreadyInitialized);
            }
            s.initializing = true;
            Ok(())
        })?
    }

    /// Releases the session's `initialize` claim: it is usable (or may try again).
    pub(crate) fn release_initialize(&self, raw: &str) {
        let _ = self.with(raw, |s| s.initializing = false);
    }

    /// Runs `task` as one of the HTTP+SSE session's own tasks (aborted when the session
    /// ends); refused when the session already runs [`SSE_MAX_REQUESTS`], or when the
    /// answers its stream has not taken pass [`SSE_ANSWER_BYTES`] (a client that posts and
    /// does not read would otherwise have every answer held for it: 150 MB, in review).
    pub(crate) fn spawn_task(
        &self,
        raw: &str,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), CoreError> {
        self.with_transport(raw, Transport::Sse, |s| {
            let tasks = s.tasks.get_or_insert_with(JoinSet::new);
            // Finished tasks stay in the set until joined; collect them first.
            while tasks.try_join_next().is_some() {}
            // Its stream was evicted: nothing it asks could be answered, and the session ends
            // with the stream.
            if !s.listen.is_attached() {
                return Err(CoreError::SessionNotFound);
            }
            if tasks.len() >= SSE_MAX_REQUESTS {
                return Err(CoreError::SessionBusy(SSE_MAX_REQUESTS));
            }
            if s.listen.queued_answer_bytes() >= SSE_ANSWER_BYTES {
                return Err(CoreError::AnswersUnread(SSE_ANSWER_BYTES));
            }
            tasks.spawn(task);
            Ok(())
        })?
    }

    /// Queues progress on an HTTP+SSE session's stream, only while it leaves the room kept
    /// for answers. False when not queued (no such session, or no room).
    pub(crate) fn push_sse_progress(&self, raw: &str, data: Bytes) -> bool {
        self.with_transport(raw, Transport::Sse, |s| {
            s.listen
                .push_reserving(data, SSE_MAX_REQUESTS, SSE_ANSWER_BYTES)
        })
        .unwrap_or(false)
    }

    /// Queues a request's answer on its HTTP+SSE session's stream (never refused for its
    /// size; `too_many` in its place past the unread bound). False when not queued (no such
    /// session).
    pub(crate) fn push_sse_answer(
        &self,
        raw: &str,
        data: Bytes,
        too_many: impl FnOnce() -> Bytes,
    ) -> bool {
        self.with_transport(raw, Transport::Sse, |s| {
            s.listen.push_answer(data, too_many)
        })
        .unwrap_or(false)
    }

    /// Whether requests of this HTTP+SSE session are still running. False once it ended.
    pub(crate) fn has_running_tasks(&self, raw: &str) -> bool {
        self.with_transport(raw, Transport::Sse, |s| {
            s.tasks.as_mut().is_some_and(|tasks| {
                while tasks.try_join_next().is_some() {}
                !tasks.is_empty()
            })
        })
        .unwrap_or(false)
    }
}
