//! The hyper service in front of the router: it marks each request busy on its connection
//! from dispatch until its response body ends, which is what the read deadlines and eviction
//! go by. No allocation of its own: the future and the body are plain wrappers.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::future::RouteFuture;
use axum::Router;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use super::table::{Activity, Busy};

/// One connection's service.
#[derive(Debug, Clone)]
pub(crate) struct ConnService {
    pub(crate) router: Router,
    pub(crate) activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Dispatch;

    fn call(&self, request: Request<Incoming>) -> Dispatch {
        let busy = self.activity.begin();
        // `Router::call` needs `&mut`; a clone is one reference count, as axum's own server
        // pays per request.
        let future = tower_service::Service::call(&mut self.router.clone(), request);
        Dispatch {
            future,
            busy: Some(busy),
        }
    }
}

pin_project! {
    /// The router's future; its response carries the request's busy mark.
    pub(crate) struct Dispatch {
        #[pin]
        future: RouteFuture<Infallible>,
        busy: Option<Busy>,
    }
}

impl Future for Dispatch {
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.future.poll(cx))?;
        let busy = this.busy.take();
        Poll::Ready(Ok(response.map(|body| Tracked { body, _busy: busy })))
    }
}

/// A response body that keeps its request busy until it ends or is dropped.
#[derive(Debug)]
pub(crate) struct Tracked {
    body: Body,
    _busy: Option<Busy>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
