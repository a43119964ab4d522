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

    /// Queues the answer to one of the client's requests (HTTP+SSE). Answers are the one
    /// reply a request gets, so they are bounded by events only (the stream keeps a slot for
    /// every request the session may have running) and weigh nothing against the byte
    /// budget: neither is an answer refused for its size, nor does a large answer make the
    /// budgeted notifications behind it evict a client that is reading. What answers can pin
    /// is bounded by the session's requests in flight instead. A full or closed queue evicts
    /// as [`push`] does.
    ///
    /// [`push`]: Self::push
    pub(crate) fn push_answer(&mut self, data: Bytes) -> bool {
        let Some((_, tx)) = &self.active else {
            return false;
        };
        let event = ListenEvent {
            id: format!("{PREFIX}{}", self.next_seq + 1),
            data,
            answer: true,
        };
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
mod tests {
    use super::*;

    fn ev(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    #[test]
    fn nothing_is_buffered_before_a_stream_opens() {
        let mut l = ListenState::default();
        assert!(!l.push(ev("early")));
        let s = l.attach(1, Some("listen-0"));
        assert!(s.replay.is_empty());
    }

    #[test]
    fn resume_replays_exactly_the_missed_events() {
        let mut l = ListenState::default();
        let mut first = l.attach(1, None);
        assert!(l.push(ev("a")));
        assert!(l.push(ev("b")));
        let got = first.events.try_recv().unwrap();
        assert_eq!(got.id, "listen-1");
        l.detach(1);
        assert!(!l.push(ev("c")), "no stream attached: buffered only");
        let resumed = l.attach(2, Some(&got.id));
        let ids: Vec<_> = resumed.replay.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["listen-2", "listen-3"]);
        // Unknown or foreign ids replay nothing.
        for bogus in ["listen-x", "post-1", "garbage"] {
            assert!(l.attach(3, Some(bogus)).replay.is_empty());
        }
    }

    #[test]
    fn a_second_stream_replaces_the_first_and_stale_detach_is_ignored() {
        let mut l = ListenState::default();
        let mut old = l.attach(1, None);
        let mut new = l.attach(2, None);
        assert!(old.events.try_recv().is_err(), "old stream closed");
        l.detach(1);
        assert!(l.push(ev("x")));
        assert_eq!(new.events.try_recv().unwrap().data, "x");
    }

    #[test]
    fn a_stream_only_state_buffers_nothing_and_keeps_room_for_answers() {
        let limits = Limits {
            events: 4,
            bytes: 1000,
        };
        let (mut l, mut rx) = ListenState::stream_only(limits);
        assert!(l.push_reserving(ev("p1"), 2, 0));
        assert!(l.push_reserving(ev("p2"), 2, 0));
        assert!(
            !l.push_reserving(ev("p3"), 2, 0),
            "only the reserve is left"
        );
        assert!(l.is_attached(), "dropping progress evicts nobody");
        assert!(l.push(ev("answer")));
        assert!(l.replay.events.is_empty());
        assert_eq!(rx.try_recv().unwrap().data, "p1");
        assert_eq!(
            rx.try_recv().unwrap().id,
            "listen-2",
            "ids stay consecutive"
        );
        assert_eq!(rx.try_recv().unwrap().id, "listen-3");
    }

    #[test]
    fn progress_cannot_take_the_bytes_kept_for_answers() {
        let limits = Limits {
            events: 64,
            bytes: 1000,
        };
        let (mut l, _rx) = ListenState::stream_only(limits);
        assert!(l.push_reserving(big(400), 2, 500));
        assert!(
            !l.push_reserving(big(200), 2, 500),
            "would eat into the reserve"
        );
        assert!(l.is_attached());
        assert!(l.push(big(580)), "an answer may use the reserve");
    }

    fn big(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    /// Answers larger than the byte budget, queued behind one another for a client that
    /// reads but has not caught up: none is refused, and they leave the notifications' budget
    /// untouched, so a notification after them does not evict the client.
    #[test]
    fn answers_neither_are_refused_for_bytes_nor_crowd_out_notifications() {
        let limits = Limits {
            events: 8,
            bytes: 1000,
        };
        let (mut l, mut rx) = ListenState::stream_only(limits);
        for _ in 0..3 {
            assert!(
                l.push_answer(big(1500)),
                "an answer is never refused for bytes"
            );
        }
        assert!(
            l.push(big(900)),
            "the notifications' budget is untouched by answers"
        );
        assert!(l.is_attached());
        assert!(
            !l.push(big(200)),
            "notifications alone still obey the budget"
        );
        assert!(!l.is_attached());
        for _ in 0..3 {
            assert_eq!(rx.try_recv().map(|e| e.data.len()).ok(), Some(1500));
        }
    }

    #[test]
    fn a_consumer_that_stops_reading_is_evicted() {
        let mut l = ListenState::default();
        let _stalled = l.attach(1, None);
        for i in 0..LISTEN_QUEUE {
            assert!(l.push(ev(&i.to_string())));
        }
        assert!(!l.push(ev("overflow")));
        assert!(!l.is_attached());
        assert_eq!(l.replay.events.len(), REPLAY_EVENTS);
    }

    #[test]
    fn few_large_events_evict_a_stalled_consumer_by_bytes() {
        let mut l = ListenState::default();
        let _stalled = l.attach(1, None);
        let mib = 1 << 20;
        let fit = LISTEN_QUEUE_BYTES / (mib + 16);
        for _ in 0..fit {
            assert!(l.push(big(mib)));
        }
        assert!(fit < LISTEN_QUEUE, "the event bound is far away");
        assert!(!l.push(big(mib)), "over the byte budget");
        assert!(!l.is_attached(), "evicted, as by the event bound");
        assert!(l.lost_for(tokio::time::Instant::now()).is_some());
    }

    #[test]
    fn an_oversize_event_reaches_a_reader_and_can_be_resumed() {
        let mut l = ListenState::default();
        let mut s = l.attach(1, None);
        assert!(l.push(ev("small")));
        let first = s.events.try_recv().unwrap();
        let huge = LISTEN_QUEUE_BYTES.max(REPLAY_BYTES) + 1;
        assert!(l.push(big(huge)), "alone in the queue: delivered");
        assert_eq!(s.events.try_recv().unwrap().data.len(), huge);
        assert!(l.is_attached());
        let resumed = l.attach(2, Some(&first.id));
        let sizes: Vec<_> = resumed.replay.iter().map(|e| e.data.len()).collect();
        assert_eq!(
            sizes,
            [huge],
            "the newest event is kept even over the budget"
        );
    }

    #[test]
    fn the_replay_buffer_forgets_the_oldest_events_by_bytes() {
        let mut l = ListenState::default();
        let s = l.attach(1, None);
        drop(s);
        l.detach(1);
        let chunk = REPLAY_BYTES / 4;
        for _ in 0..6 {
            assert!(!l.push(big(chunk)), "no stream: buffered only");
        }
        assert!(l.replay.bytes <= REPLAY_BYTES, "{}", l.replay.bytes);
        let ids: Vec<_> = l.replay.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["listen-4", "listen-5", "listen-6"], "oldest evicted");
        let resumed = l.attach(2, Some("listen-0"));
        assert_eq!(resumed.replay.len(), 3);
        // Small events are still bounded by count.
        for i in 0..(REPLAY_EVENTS + 5) {
            l.push(ev(&i.to_string()));
        }
        assert_eq!(l.replay.events.len(), REPLAY_EVENTS);
    }
}
