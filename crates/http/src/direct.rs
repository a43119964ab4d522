//! `POST /mcp` answered without the router: the one request every client sends, over and
//! over.
//!
//! Through axum each such request paid for route matching, the admission layer's boxed future
//! and state clone, a request extension map for the principal, and the extractors; about a
//! fifth of a forwarded request's instructions (BENCHMARKS.md, "Where the CPU goes"). Here the
//! same steps run in the same order by calling the same functions: [`crate::admission`] (hop
//! proof, Origin/Host, authentication, in-flight bound), then [`streamable::serve_post`], and
//! the in-flight permit rides on the response body exactly as the layer does it. Every other
//! method and path still goes through the router.

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;

use crate::{in_flight, streamable, Admitted, AppState};

/// The future of one direct `POST /mcp`.
pub(crate) type DirectFuture = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Whether `request` is served here rather than by the router: `POST` to exactly `/mcp` (the
/// router matches the path the same way, query ignored).
pub(crate) fn serves(request: &Request<Incoming>) -> bool {
    request.method() == Method::POST && request.uri().path() == "/mcp"
}

/// Answers one `POST /mcp`, as the router's admission layer and handler would.
pub(crate) fn post(state: AppState, request: Request<Incoming>) -> DirectFuture {
    Box::pin(async move {
        let mut request = request.map(Body::new);
        let Admitted { caller, permit } = match crate::admission(&state, &mut request).await {
            Ok(admitted) => admitted,
            Err(refused) => return refused.into_response(),
        };
        let (parts, body) = request.into_parts();
        let response = streamable::serve_post(&state, &caller, &parts.uri, &parts.headers, body);
        in_flight::hold(response.await, permit)
    })
}
