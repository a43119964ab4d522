//! A global bound on POSTs being handled or still streaming their answer (invariant 6).
//!
//! Each POST holds a permit from admission until its response body ends (a streamed answer
//! holds it until the stream closes); beyond the bound the gateway answers 503 at once rather
//! than queueing work without limit. GET listen streams are bounded by the session table
//! instead, so they are not counted here.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use crate::error::HttpError;
use crate::AppState;

/// The admission step: a POST needs a free permit (else 503 at once); other methods none.
pub(crate) fn admit(
    state: &AppState,
    request: &Request,
) -> Result<Option<OwnedSemaphorePermit>, HttpError> {
    if request.method() != Method::POST {
        return Ok(None);
    }
    match state.in_flight.clone().try_acquire_owned() {
        Ok(permit) => Ok(Some(permit)),
        Err(_) => Err(HttpError::Busy),
    }
}

/// Ties `permit` to `response`'s body, so a streamed answer keeps it until the stream ends.
pub(crate) fn hold(response: Response, permit: Option<OwnedSemaphorePermit>) -> Response {
    let Some(permit) = permit else {
        return response;
    };
    let (parts, body) = response.into_parts();
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
