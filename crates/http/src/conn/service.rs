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
use crate::direct::{self, DirectFuture};
use crate::AppState;

/// One connection's service.
#[derive(Clone)]
pub(crate) struct ConnService {
    pub(crate) router: Router,
    /// On the main listener: `POST /mcp` is answered without the router (`direct`). `None`
    /// for the health-only connections over the bound, whose router answers everything.
    pub(crate) direct: Option<AppState>,
    pub(crate) activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Dispatch;

    fn call(&self, request: Request<Incoming>) -> Dispatch {
        let busy = self.activity.begin();
        let route = match &self.direct {
            Some(state) if direct::serves(&request) => Route::Direct {
                future: direct::post(state.clone(), request),
            },
            // `Router::call` needs `&mut`; a clone is one reference count, as axum's own
            // server pays per request.
            _ => Route::Router {
                future: tower_service::Service::call(&mut self.router.clone(), request),
            },
        };
        Dispatch {
            route,
            busy: Some(busy),
        }
    }
}

pin_project! {
    /// Whichever of the two answers the request.
    #[project = RouteProj]
    enum Route {
        Router { #[pin] future: RouteFuture<Infallible> },
        Direct { future: DirectFuture },
    }
}

pin_project! {
    /// The request's future; its response carries the request's busy mark.
    pub(crate) struct Dispatch {
        #[pin]
        route: Route,
        busy: Option<Busy>,
    }
}

impl Future for Dispatch {
    type Output = Result<Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.route.project() {
            RouteProj::Router { future } => ready!(future.poll(cx))?,
            RouteProj::Direct { future } => ready!(future.as_mut().poll(cx)),
        };
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
