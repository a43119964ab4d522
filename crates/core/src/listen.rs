//! A session's listen stream (GET `/mcp`) and its replay buffer.
//!
//! Event ids are `listen-<seq>`: unique within the session and naming the stream they belong
//! to. A client that lost its connection reconnects with `Last-Event-ID` and receives, exactly
//! once, the events after that id that are still in the bounded buffer. Lookups happen inside
//! the requesting session only, so a `Last-Event-ID` copied from another session names nothing.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::sync::mpsc;

/// Capacity of a listen stream's queue; a consumer that lets it fill is evicted (it can resume).
pub(crate) const LISTEN_QUEUE: usize = 64;
/// Events kept for resumption per session.
pub(crate) const REPLAY_EVENTS: usize = 64;

const PREFIX: &str = "listen-";

/// One event on a listen stream.
#[derive(Debug, Clone)]
pub struct ListenEvent {
    /// The SSE `id:`.
    pub id: String,
    /// One JSON-RPC message.
    pub data: Bytes,
}

/// What a new listen stream starts with.
#[derive(Debug)]
pub struct ListenStream {
    /// Identifies this attachment, so a replaced stream's cleanup cannot detach its successor.
    pub generation: u64,
    /// Missed events to send first (only when resuming with a known `Last-Event-ID`).
    pub replay: Vec<ListenEvent>,
    /// Live events; closed when the stream is replaced, evicted or the session ends.
    pub events: mpsc::Receiver<ListenEvent>,
}

/// Per-session listen state.
#[derive(Debug, Default)]
pub(crate) struct ListenState {
    active: Option<(u64, mpsc::Sender<ListenEvent>)>,
    /// Events are buffered only once the session has opened a listen stream: a session that
    /// never listens costs nothing.
    opened: bool,
    /// Set for HTTP+SSE sessions, whose stream cannot be resumed: nothing is buffered.
    no_replay: bool,
    next_seq: u64,
    replay: VecDeque<ListenEvent>,
    /// When the last attached stream went away (closed, replaced by nothing, or evicted).
    lost_since: Option<tokio::time::Instant>,
}

impl ListenState {
    /// State for a session whose one stream exists from the start and cannot be resumed (the
    /// HTTP+SSE transport): no replay buffer, and the stream ends with the session.
    pub(crate) fn stream_only(capacity: usize) -> (Self, mpsc::Receiver<ListenEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let state = ListenState {
            active: Some((0, tx)),
            opened: true,
            no_replay: true,
            next_seq: 0,
            replay: VecDeque::new(),
            lost_since: None,
        };
        (state, rx)
    }

    /// Attaches a new stream, replacing (and so closing) any previous one.
    pub(crate) fn attach(&mut self, generation: u64, last_event_id: Option<&str>) -> ListenStream {
        let (tx, rx) = mpsc::channel(LISTEN_QUEUE);
        let after = last_event_id
            .and_then(|id| id.strip_prefix(PREFIX))
            .and_then(|seq| seq.parse::<u64>().ok());
        let replay = match after {
            Some(after) => self
                .replay
                .iter()
                .filter(|e| seq_of(&e.id) > after)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
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
            self.active = None;
            self.lost_since = Some(tokio::time::Instant::now());
        }
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

    /// Queues one message for this session's listen stream. Never blocks: a full queue evicts
    /// the stream (the client may resume from the buffer).
    pub(crate) fn push(&mut self, data: Bytes) -> bool {
        if !self.opened {
            return false;
        }
        self.next_seq += 1;
        let event = ListenEvent {
            id: format!("{PREFIX}{}", self.next_seq),
            data,
        };
        if !self.no_replay {
            if self.replay.len() == REPLAY_EVENTS {
                self.replay.pop_front();
            }
            self.replay.push_back(event.clone());
        }
        let Some((_, tx)) = &self.active else {
            return false;
        };
        if tx.try_send(event).is_err() {
            // Full (a consumer that stopped reading) or closed: drop the stream, never wait.
            self.active = None;
            self.lost_since = Some(tokio::time::Instant::now());
            return false;
        }
        true
    }
}

impl ListenState {
    /// Queues a message that may be lost (progress) only while more than `reserve` slots are
    /// free, so it can never crowd out the answers those slots are kept for. Never evicts.
    pub(crate) fn push_reserving(&mut self, data: Bytes, reserve: usize) -> bool {
        let room = self
            .active
            .as_ref()
            .is_some_and(|(_, tx)| tx.capacity() > reserve);
        room && self.push(data)
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
        let (mut l, mut rx) = ListenState::stream_only(4);
        assert!(l.push_reserving(ev("p1"), 2));
        assert!(l.push_reserving(ev("p2"), 2));
        assert!(!l.push_reserving(ev("p3"), 2), "only the reserve is left");
        assert!(l.is_attached(), "dropping progress evicts nobody");
        assert!(l.push(ev("answer")));
        assert!(l.replay.is_empty());
        assert_eq!(rx.try_recv().unwrap().data, "p1");
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
        assert_eq!(l.replay.len(), REPLAY_EVENTS);
    }
}
