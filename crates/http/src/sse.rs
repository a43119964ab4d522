//! SSE response bodies.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream;
use tokio::time::{interval_at, Instant, Interval};

use switchboard_wire::sse;

type Answer = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

enum State {
    Waiting(Answer, Interval),
    Done,
}

/// A `text/event-stream` response that carries keep-alive comments while `answer` runs, then
/// the answer as one `message` event, then ends.
///
/// The body owns the future: when the client disconnects, hyper drops the body, which drops the
/// future, which withdraws the backend call and cancels it upstream.
pub(crate) fn single_answer(
    answer: impl Future<Output = Vec<u8>> + Send + 'static,
    keep_alive: Duration,
) -> Response {
    let ticker = interval_at(Instant::now() + keep_alive, keep_alive);
    let state = State::Waiting(Box::pin(answer), ticker);
    let body = stream::unfold(state, |state| async move {
        let State::Waiting(mut answer, mut ticker) = state else {
            return None;
        };
        tokio::select! {
            message = &mut answer => Some((Ok::<_, Infallible>(Bytes::from(sse::message(&message))), State::Done)),
            _ = ticker.tick() => Some((Ok(Bytes::from_static(sse::KEEP_ALIVE)), State::Waiting(answer, ticker))),
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
