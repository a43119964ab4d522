//! SSE response bodies: a request's stream (related notifications, then its one answer) and a
//! session's listen stream.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream;
use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant, Interval};

use switchboard_core::{ListenEvent, ListenStream};
use switchboard_wire::sse;

type Answer = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

struct RequestState {
    answer: Answer,
    notes: Option<mpsc::Receiver<Bytes>>,
    ticker: Interval,
    /// Frames ready to go out before anything else (drained notes, then the answer).
    backlog: std::collections::VecDeque<Bytes>,
    done: bool,
}

/// A `text/event-stream` response for one request: related notifications (progress) as they
/// come, keep-alive comments while waiting, then the answer as the last `message` event.
///
/// Order is the backend's: a notification written before the response was queued before the
/// response resolved, and all queued notifications are drained before the answer is written.
/// The body owns the request future: when the client disconnects, hyper drops the body, which
/// drops the future, which withdraws the backend call and cancels it upstream.
pub(crate) fn request_stream(
    answer: impl Future<Output = Vec<u8>> + Send + 'static,
    notes: Option<mpsc::Receiver<Bytes>>,
    keep_alive: Duration,
) -> Response {
    let state = RequestState {
        answer: Box::pin(answer),
        notes,
        ticker: interval_at(Instant::now() + keep_alive, keep_alive),
        backlog: Default::default(),
        done: false,
    };
    let body = stream::unfold(state, |mut st| async move {
        loop {
            if let Some(frame) = st.backlog.pop_front() {
                return Some((Ok::<_, Infallible>(frame), st));
            }
            if st.done {
                return None;
            }
            tokio::select! {
                biased;
                Some(note) = recv(&mut st.notes) => return Some((Ok(Bytes::from(sse::message(&note))), st)),
                message = &mut st.answer => {
                    if let Some(rx) = st.notes.as_mut() {
                        while let Ok(note) = rx.try_recv() {
                            st.backlog.push_back(Bytes::from(sse::message(&note)));
                        }
                    }
                    st.backlog.push_back(Bytes::from(sse::message(&message)));
                    st.done = true;
                }
                _ = st.ticker.tick() => return Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), st)),
            }
        }
    });
    event_stream(Body::from_stream(body))
}

async fn recv(notes: &mut Option<mpsc::Receiver<Bytes>>) -> Option<Bytes> {
    match notes {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs a closure when dropped: ties cleanup to the end of a response body.
pub(crate) struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub(crate) fn new(f: F) -> Self {
        OnDrop(Some(f))
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

struct ListenState<G> {
    replay: std::vec::IntoIter<ListenEvent>,
    events: mpsc::Receiver<ListenEvent>,
    ticker: Interval,
    _detach: G,
}

/// A session's listen stream: replayed events first, then live ones, with keep-alives. Ends
/// when the session's queue closes (stream replaced, consumer evicted, session ended);
/// `detach` runs when the client goes away.
pub(crate) fn listen_stream<G: Send + 'static>(
    stream: ListenStream,
    detach: G,
    keep_alive: Duration,
) -> Response {
    let state = ListenState {
        replay: stream.replay.into_iter(),
        events: stream.events,
        ticker: interval_at(Instant::now() + keep_alive, keep_alive),
        _detach: detach,
    };
    let body = stream::unfold(state, |mut st| async move {
        if let Some(e) = st.replay.next() {
            return Some((Ok::<_, Infallible>(event(&e)), st));
        }
        tokio::select! {
            e = st.events.recv() => e.map(|e| (Ok(event(&e)), st)),
            _ = st.ticker.tick() => Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), st)),
        }
    });
    event_stream(Body::from_stream(body))
}

fn event(e: &ListenEvent) -> Bytes {
    Bytes::from(sse::frame("message", Some(&e.id), &e.data))
}

fn event_stream(body: Body) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}
