//! What reaches a session's streams: the bounds an HTTP+SSE session's one stream is shared
//! under, and the choice of a session's best stream for a message of its own.

use bytes::Bytes;

use super::{Session, Sessions, Transport};

/// Requests one HTTP+SSE session may have running at once; more are refused (503).
pub const SSE_MAX_REQUESTS: usize = 64;
/// Bytes of the stream's queue kept for answers: progress may queue only while this much is
/// still free. A listen stream's budget, so answers get at least what any stream gets.
pub const SSE_ANSWER_BYTES: usize = crate::listen_stream::LISTEN_QUEUE_BYTES;

/// Puts one message on the session's best stream: the single in-flight request's stream if
/// there is exactly one, else the listen stream. Returns whether a stream took it.
///
/// An HTTP+SSE session has one stream for everything: the message goes there, and, like
/// progress, only while it leaves the room kept for answers (so a backend that asks or logs
/// a lot can neither crowd out the answers nor get a reading client evicted). A request
/// refused that way is failed back to the backend by the caller.
pub(super) fn deliver(s: &mut Session, data: Bytes) -> bool {
    if s.transport == Transport::Sse {
        return s
            .listen
            .push_reserving(data, SSE_MAX_REQUESTS, SSE_ANSWER_BYTES);
    }
    let mut streams = s.in_flight.values().filter_map(|f| f.stream.as_ref());
    if let (Some(only), None) = (streams.next(), streams.next()) {
        if only.try_send(data.clone()).is_ok() {
            return true;
        }
    }
    s.listen.is_attached() && s.listen.push(data)
}

impl Sessions {
    /// Queues `data` on every session's listen stream (kept for a resume where none is
    /// attached).
    pub(crate) fn broadcast(&self, data: &Bytes) {
        self.for_each(|_, s| {
            s.listen.push(data.clone());
        });
    }

    /// Queues `data` on every listen stream attached here; sessions without one get nothing.
    pub(crate) fn broadcast_to_attached(&self, data: &Bytes) {
        self.for_each(|_, s| {
            if s.listen.is_attached() {
                s.listen.push(data.clone());
            }
        });
    }
}
