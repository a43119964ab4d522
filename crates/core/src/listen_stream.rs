//! A session's listen stream (GET `/mcp`) and its replay buffer.
//!
//! Event ids are `listen-<seq>`: unique within the session and naming the stream they belong
//! to. A client that lost its connection reconnects with `Last-Event-ID` and receives, exactly
//! once, the events after that id that are still in the bounded buffer. Lookups happen inside
//! the requesting session only, so a `Last-Event-ID` copied from another session names nothing.
//!
//! Both the live queue and the replay buffer are bounded by events *and* bytes
//! ([`crate::stream_queue`]): a consumer that falls behind by either bound is evicted (it can
//! resume), and the replay buffer forgets its oldest events by either bound. Both hold the same
//! `Bytes` (reference-counted), so a session pins at most about the larger of the two budgets,
//! or one maximum-size line.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::stream_queue::{self, Limits, QueueRx, QueueTx, Weigh};

/// Events a listen stream may have queued; a consumer that lets it fill is evicted (it can
/// resume).
pub(crate) const LISTEN_QUEUE: usize = 64;
/// Bytes a listen stream may have queued, with the same eviction. Why 4 MiB: a backend line
/// may be 16 MiB, so the event bound alone would let one stalled client pin about 1 GiB; 4 MiB
/// is thousands of ordinary notifications, far more than a client that reads ever lags, and a
/// single larger event still goes out when the queue is empty.
pub const LISTEN_QUEUE_BYTES: usize = 4 << 20;
/// Events kept for resumption per session.
pub(crate) const REPLAY_EVENTS: usize = 64;
/// Bytes kept for resumption per session; the oldest events go first. The newest event is
/// always kept, even alone over the budget, so a client that drops right after a large event
/// can still resume it.
pub const REPLAY_BYTES: usize = 4 << 20;

const LISTEN_LIMITS: Limits = Limits {
    events: LISTEN_QUEUE,
    bytes: LISTEN_QUEUE_BYTES,
};

const PREFIX: &str = "listen-";

/// Most answer bytes an HTTP+SSE stream may leave unread (eight times the bytes that refuse
/// it new requests, `SSE_ANSWER_BYTES`, a listen stream's budget): past it an answer is replaced by a small error for its request. What a
/// burst of its requests, all admitted while nothing was queued, may pin (review HIGH: 64
/// answers of 8 MiB pinned 540 MB).
pub(crate) const MAX_UNREAD_ANSWERS: usize = 8 * LISTEN_QUEUE_BYTES;

/// One event on a listen stream.
#[derive(Debug, Clone)]
pub struct ListenEvent {
    /// The SSE `id:`.
    pub id: String,
    /// One JSON-RPC message.
    pub data: Bytes,
    /// The answer to one of the client's own requests (HTTP+SSE): not counted against the
    /// byte budget (see [`ListenState::push_answer`]).
    pub(crate) answer: bool,
}

impl Weigh for ListenEvent {
    fn weight(&self) -> usize {
        if self.answer {
            0
        } else {
            self.data.len() + self.id.len()
        }
    }

    fn answer_bytes(&self) -> usize {
        if self.answer {
            self.data.len() + self.id.len()
        } else {
            0
        }
    }
}

/// What a new listen stream starts with.
#[derive(Debug)]
pub struct ListenStream {
    /// Identifies this attachment, so a replaced stream's cleanup cannot detach its successor.
    pub generation: u64,
    /// Missed events to send first (only when resuming with a known `Last-Event-ID`).
    pub replay: Vec<ListenEvent>,
    /// Live events; closed when the stream is replaced, evicted or the session ends.
    pub events: QueueRx<ListenEvent>,
}

/// Per-session listen state.
#[derive(Debug, Default)]
pub(crate) struct ListenState {
    active: Option<(u64, QueueTx<ListenEvent>)>,
    /// Events are buffered only once the session has opened a listen stream: a session that
    /// never listens costs nothing.
    opened: bool,
    /// Set for HTTP+SSE sessions, whose stream cannot be resumed: nothing is buffered.
    no_replay: bool,
    next_seq: u64,
    replay: Replay,
    /// When the last attached stream went away (closed, replaced by nothing, or evicted).
    lost_since: Option<tokio::time::Instant>,
}

impl ListenState {
    /// State for a session whose one stream exists from the start and cannot be resumed (the
    /// HTTP+SSE transport): no replay buffer, and the stream ends with the session.
    pub(crate) fn stream_only(limits: Limits) -> (Self, QueueRx<ListenEvent>) {
        let (tx, rx) = stream_queue::bounded(limits);
        let state = ListenState {
            active: Some((0, tx)),
            opened: true,
            no_replay: true,
            ..ListenState::default()
        };
        (state, rx)
    }

    /// Attaches a new stream, replacing (and so closing) any previous one.
    pub(crate) fn attach(&mut self, generation: u64, last_event_id: Option<&str>) -> ListenStream {
        let (tx, rx) = stream_queue::bounded(LISTEN_LIMITS);
        let after = last_event_id
            .and_then(|id| id.strip_prefix(PREFIX))
            .and_then(|seq| seq.parse::<u64>().ok());
        let replay = after
            .map(|after| self.replay.after(after))
            .unwrap_or_default();
        self.active = Some((generation, tx));
        self.lost_since = None;
        self.opened = true;
        ListenStream {
            generation,
            replay,
            events: rx,
        }
    }

    /// Detaches the stream if it is still the one with `generation`.
    pub(crate) fn detach(&mut self, generation: u64) {
        if self.active.as_ref().is_some_and(|(g, _)| *g == generation) {
            self.lose_stream();
        }
    }

    fn lose_stream(&mut self) {
        self.active = None;
        self.lost_since = Some(tokio::time::Instant::now());
    }

    /// How long the session has been without the listen stream it once had.
    pub(crate) fn lost_for(&self, now: tokio::time::Instant) -> Option<std::time::Duration> {
        match (&self.active, self.lost_since) {
            (None, Some(since)) => Some(now.duration_since(since)),
            _ => None,
        }
    }

    /// Whether a stream is attached (for tests and metrics).
    pub(crate) fn is_attached(&self) -> bool {
        self.active.is_some()
    }

    /// Queues one message for this session's listen stream. Never blocks: a queue over its
    /// event or byte bound evicts the stream (the client may resume from the buffer).
    pub(crate) fn push(&mut self, data: Bytes) -> bool {
        let Some(event) = self.record(data) else {
            return false;
        };
        let Some((_, tx)) = &self.active else {
            return false;
        };
        if tx.try_send(event).is_err() {
            // Full (a consumer that stopped reading) or closed: drop the stream, never wait.
            self.lose_stream();
            return false;
        }
        true
    }

    /// Answer bytes queued on the active stream and not yet taken by it.
    pub(crate) fn queued_answer_bytes(&self) -> usize {
        self.active
            .as_ref()
            .map_or(0, |(_, tx)| tx.queued_answer_bytes())
    }

    /// Queues the answer to one of the client's requests (HTTP+SSE). Answers are the one
    /// reply a request gets, so they are bounded by events only (the stream keeps a slot for
    /// every request the session may have running) and weigh nothing against the byte
    /// budget: neither is an answer refused for its size, nor does a large answer make the
    /// budgeted notifications behind it evict a client that is reading. What answers can pin
    /// is bounded by refusing the session more requests while the answers it has not read
    /// pass `SSE_ANSWER_BYTES` ([`Self::queued_answer_bytes`]),
    /// by its requests in flight, and, for a burst of them (every request admitted while
    /// nothing was queued), by [`MAX_UNREAD_ANSWERS`]: an answer that would pass it is
    /// replaced by `too_many` (a small error for the same request), so the request still gets
    /// one answer and a client reading slower than the burst is not evicted. A full or closed
    /// queue evicts as [`push`] does.
    ///
    /// [`push`]: Self::push
    pub(crate) fn push_answer(&mut self, data: Bytes, too_many: impl FnOnce() -> Bytes) -> bool {
        let Some((_, tx)) = &self.active else {
            return false;
        };
        let mut event = ListenEvent {
            id: format!("{PREFIX}{}", self.next_seq + 1),
            data,
            answer: true,
        };
        let unread = tx.queued_answer_bytes();
        // One answer of any size fits an empty queue, as any event does.
        if unread > 0 && unread.saturating_add(event.answer_bytes()) > MAX_UNREAD_ANSWERS {
            event.data = too_many();
        }
        if tx.try_send_answer(event.clone()).is_err() {
            self.lose_stream();
            return false;
        }
        self.next_seq += 1;
        self.keep(event);
        true
    }

    /// Queues a message that may be lost (progress) only while it leaves `events` slots and
    /// `bytes` of the byte budget free, so it can never crowd out the answers that room is kept
    /// for. Never evicts.
    pub(crate) fn push_reserving(&mut self, data: Bytes, events: usize, bytes: usize) -> bool {
        let Some((_, tx)) = &self.active else {
            return false;
        };
        let event = ListenEvent {
            id: format!("{PREFIX}{}", self.next_seq + 1),
            data,
            answer: false,
        };
        if tx.try_send_reserving(event.clone(), events, bytes).is_err() {
            return false;
        }
        self.next_seq += 1;
        self.keep(event);
        true
    }

    /// Numbers the next event and keeps it for resumption; `None` before any stream opened.
    fn record(&mut self, data: Bytes) -> Option<ListenEvent> {
        if !self.opened {
            return None;
        }
        self.next_seq += 1;
        let event = ListenEvent {
            id: format!("{PREFIX}{}", self.next_seq),
            data,
            answer: false,
        };
        self.keep(event.clone());
        Some(event)
    }

    fn keep(&mut self, event: ListenEvent) {
        if !self.no_replay {
            self.replay.push(event);
        }
    }
}

/// The events kept for `Last-Event-ID`, bounded by count and by bytes.
#[derive(Debug, Default)]
struct Replay {
    events: VecDeque<ListenEvent>,
    bytes: usize,
}

impl Replay {
    /// Keeps `event`, forgetting the oldest ones beyond either bound (never the newest).
    fn push(&mut self, event: ListenEvent) {
        self.bytes += event.weight();
        self.events.push_back(event);
        while self.events.len() > REPLAY_EVENTS
            || (self.bytes > REPLAY_BYTES && self.events.len() > 1)
        {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= old.weight();
            }
        }
    }

    /// The kept events after sequence number `after`.
    fn after(&self, after: u64) -> Vec<ListenEvent> {
        self.events
            .iter()
            .filter(|e| seq_of(&e.id) > after)
            .cloned()
            .collect()
    }
}

fn seq_of(id: &str) -> u64 {
    id.strip_prefix(PREFIX)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
