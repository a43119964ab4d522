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
            l.push_answer(big(1500), || Bytes::from_static(b"error")),
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

/// An HTTP+SSE stream's unread answers stop at the bound: past it each answer is replaced by
/// its request's small error, so every request still gets one answer, what a burst pins is
/// bounded, and the stream is not evicted (review HIGH: a burst of 64 answers of 8 MiB pinned
/// 540 MB; then review MEDIUM: evicting instead cut off a client reading slower than it).
#[test]
fn unread_answers_past_the_bound_are_replaced_by_errors() {
    let limits = Limits {
        // An HTTP+SSE stream's (`legacy_sse`).
        events: 256,
        bytes: 8 << 20,
    };
    let (mut l, mut rx) = ListenState::stream_only(limits);
    let mib = Bytes::from(vec![b'x'; 1 << 20]);
    let error = || Bytes::from_static(b"error");
    for _ in 0..48 {
        assert!(l.push_answer(mib.clone(), error));
    }
    assert!(l.is_attached(), "not evicted");
    let (mut full, mut replaced) = (0, 0);
    while let Ok(event) = rx.try_recv() {
        match event.data.len() {
            n if n == mib.len() => full += 1,
            _ => replaced += 1,
        }
    }
    assert_eq!(full + replaced, 48, "one answer each");
    // Up to the bound (each answer weighs its 1 MiB and its event id).
    let bound = MAX_UNREAD_ANSWERS >> 20;
    assert!(
        (bound - 1..=bound).contains(&full),
        "{full} full answers queued"
    );
    // Taken, the room is there again.
    assert!(l.push_answer(mib.clone(), error));
    assert_eq!(rx.try_recv().map(|e| e.data.len()), Ok(mib.len()));
}
