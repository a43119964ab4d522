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
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use switchboard_core::stream_queue::{self, QueueRx, QueueTx};
use switchboard_core::{ListenEvent, ListenStream, REQUEST_STREAM};
use switchboard_wire::{sse, RequestId};
use tracing::{debug, warn};

type Answer = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

struct RequestState {
    answer: Driver,
    /// Notifications the driver queued for the client (bounded by events and bytes).
    notes: QueueRx<Bytes>,
    ticker: Interval,
    /// Frames ready to go out before anything else (drained notes, then the answer).
    backlog: std::collections::VecDeque<Bytes>,
    done: bool,
    /// The client's id, for the answer if the request's task fails (encoded only then, see
    /// [`crate::error::stream_task_failed`]).
    id: Option<RequestId>,
}

/// A `text/event-stream` response for one request: related notifications (progress) as they
/// come, keep-alive comments while waiting, then the answer as the last `message` event.
///
/// Order is the backend's: a notification written before the response was queued before the
/// response resolved, and all queued notifications are drained before the answer is written.
///
/// The request runs in a task of its own ([`drive`]), not inside the body: hyper polls a body
/// only while the client reads, so a request the body drove would stop — deadline included —
/// when its client stopped reading, and its in-flight entry would pin the session for as long
/// as the connection stayed open. The body owns the task: when the client disconnects, hyper
/// drops the body, which aborts the task, which drops the request future, which withdraws the
/// backend call and cancels it upstream.
pub(crate) fn request_stream(
    answer: impl Future<Output = Vec<u8>> + Send + 'static,
    notes: Option<mpsc::Receiver<Bytes>>,
    keep_alive: Duration,
    id: Option<&RequestId>,
) -> Response {
    let (out, rx) = stream_queue::bounded(REQUEST_STREAM);
    let state = RequestState {
        answer: Driver(tokio::spawn(drive(Box::pin(answer), notes, out))),
        notes: rx,
        ticker: interval_at(Instant::now() + keep_alive, keep_alive),
        backlog: Default::default(),
        done: false,
        id: id.cloned(),
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
                Some(note) = st.notes.recv() => return Some((Ok(Bytes::from(sse::message(&note))), st)),
                message = &mut st.answer.0 => {
                    // The driver queued every note before it finished.
                    while let Ok(note) = st.notes.try_recv() {
                        st.backlog.push_back(Bytes::from(sse::message(&note)));
                    }
                    match message {
                        Ok(message) => st.backlog.push_back(Bytes::from(sse::message(&message))),
                        Err(e) => {
                            warn!(error = %e, "request task failed; answering with an internal error");
                            let failure = crate::error::stream_task_failed(st.id.as_ref());
                            st.backlog.push_back(Bytes::from(sse::message(&failure)));
                        }
                    }
                    st.done = true;
                }
                _ = st.ticker.tick() => return Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), st)),
            }
        }
    });
    event_stream(Body::from_stream(body))
}

/// A stream carrying one answer that is already known (no request to run).
pub(crate) fn answer_stream(message: Vec<u8>) -> Response {
    let frame = Bytes::from(sse::message(&message));
    event_stream(Body::from_stream(stream::iter([Ok::<_, Infallible>(
        frame,
    )])))
}

/// The task running one streamed request; aborted when the response body goes away.
struct Driver(tokio::task::JoinHandle<Vec<u8>>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the request to its answer, moving its notifications into `out` as they come,
/// whether or not the client is reading.
async fn drive(
    mut answer: Answer,
    notes: Option<mpsc::Receiver<Bytes>>,
    out: QueueTx<Bytes>,
) -> Vec<u8> {
    let Some(mut notes) = notes else {
        return answer.await;
    };
    loop {
        tokio::select! {
            biased;
            Some(note) = notes.recv() => forward(&out, note),
            message = &mut answer => {
                while let Ok(note) = notes.try_recv() {
                    forward(&out, note);
                }
                return message;
            }
        }
    }
}

/// A note over the event or byte bound is dropped, as a full request queue always dropped it:
/// the client is not keeping up, and what it is sent on a request stream (progress above all)
/// is superseded by what comes next. The answer never goes through here.
fn forward(out: &QueueTx<Bytes>, note: Bytes) {
    if let Err(e) = out.try_send(note) {
        debug!(
            reason = ?e,
            queued = out.queued_bytes(),
            "request stream over its bound; notification dropped"
        );
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
    events: QueueRx<ListenEvent>,
    ticker: Interval,
    drained: Drained,
    _detach: G,
    suffix: Option<String>,
}

/// Resolves when the gateway starts shutting down. Made once per stream from a child token:
/// each stream then waits on a notifier of its own rather than all on the one shared token.
pub(crate) type Drained = Pin<Box<WaitForCancellationFutureOwned>>;

pub(crate) fn drained(draining: &CancellationToken) -> Drained {
    Box::pin(draining.child_token().cancelled_owned())
}

/// A session's listen stream: replayed events first, then live ones, with keep-alives. Ends
/// when the session's queue closes (stream replaced, consumer evicted, session ended) or when
/// the gateway shuts down (a clean end the client reconnects after); `detach` runs when the
/// client goes away.
/// `suffix` goes after every event id: the replica that numbered it (`listen-7@REPLICA`).
pub(crate) fn listen_stream<G: Send + 'static>(
    stream: ListenStream,
    suffix: Option<String>,
    detach: G,
    keep_alive: Duration,
    draining: &CancellationToken,
) -> Response {
    let state = ListenState {
        replay: stream.replay.into_iter(),
        events: stream.events,
        ticker: interval_at(Instant::now() + keep_alive, keep_alive),
        drained: drained(draining),
        _detach: detach,
        suffix,
    };
    let body = stream::unfold(state, |mut st| async move {
        if let Some(e) = st.replay.next() {
            let frame = event(&e, st.suffix.as_deref());
            return Some((Ok::<_, Infallible>(frame), st));
        }
        tokio::select! {
            biased;
            () = &mut st.drained => None,
            e = st.events.recv() => e.map(|e| (Ok(event(&e, st.suffix.as_deref())), st)),
            _ = st.ticker.tick() => Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), st)),
        }
    });
    event_stream(Body::from_stream(body))
}

fn event(e: &ListenEvent, suffix: Option<&str>) -> Bytes {
    let frame = match suffix {
        None => sse::frame("message", Some(&e.id), &e.data),
        Some(suffix) => sse::frame("message", Some(&format!("{}{suffix}", e.id)), &e.data),
    };
    Bytes::from(frame)
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

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// A request whose task panics still ends its stream with exactly one answer: an internal
    /// error carrying the client's id.
    #[tokio::test]
    async fn a_failed_request_task_still_answers() {
        let id = RequestId::from_string("req-7");
        let answer = async {
            panic!("a bug in the request path");
        };
        let response = request_stream(answer, None, Duration::from_secs(3600), Some(&id));
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert_eq!(text.matches("data: ").count(), 1, "one event: {text}");
        assert!(text.contains(r#""id":"req-7""#), "{text}");
        assert!(text.contains("-32603"), "{text}");
    }
}
