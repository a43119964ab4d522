//! A global bound on POSTs being handled or still streaming their answer (invariant 6).
//!
//! Each POST holds a permit from admission until its response body ends (a streamed answer
//! holds it until the stream closes); beyond the bound the gateway answers 503 at once rather
//! than queueing work without limit. GET listen streams are bounded by the session table
//! instead, so they are not counted here.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use crate::error::HttpError;
use crate::AppState;

/// Middleware: admit a POST only with a free permit.
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        return HttpError::Busy.into_response();
    };
    let (parts, body) = next.run(request).await.into_parts();
    Response::from_parts(
        parts,
        Body::new(Held {
            body,
            _permit: permit,
        }),
    )
}

/// A response body that keeps its request's permit until the body is done or dropped.
struct Held {
    body: Body,
    _permit: OwnedSemaphorePermit,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
