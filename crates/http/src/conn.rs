//! The server loop: accepts connections and drives each with hyper, under three limits that
//! keep the gateway answering when clients misbehave at the connection level:
//!
//! - a header-read timeout and an idle timeout ([`read_guard`]): a connection trickling its
//!   headers, or sitting idle, does not hold a file descriptor for ever;
//! - a bound on open connections ([`table`]): at the bound the oldest idle connection makes
//!   room, so `/healthz` and clients with work still get in; when every connection is busy the
//!   newcomer is read for one request (up to [`HEALTH_OVERFLOW`] at once): `/healthz` is
//!   answered, anything else gets 503, and it is closed (past those, 503 unread); when a
//!   burst of accepts outruns the closing of the connections it evicted, a newcomer waits
//!   for them in a task of its own (up to [`ROOM_WAIT`], [`WAITING`] at once) instead of
//!   being refused;
//! - the send timeout and `TCP_NODELAY` ([`crate::stall`]).
//!
//! The accept loop never dies: an accept error other than a failed handshake (out of file
//! descriptors, above all) evicts an idle connection, backs off briefly and is logged at most
//! once per [`WARN_EVERY`].
//!
//! Shutdown: the listener closes, long-lived streams end ([`AppState::draining`]), every
//! connection finishes its in-flight requests and closes. Connection tasks live in a `JoinSet`
//! owned by this loop, so dropping [`serve`]'s future (the caller's last resort after the
//! grace) aborts them all.

mod read_guard;
mod service;
mod table;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::stall::StallGuard;
use crate::AppState;
use read_guard::ReadGuard;
use service::ConnService;
use table::{Admission, Connections, Slot};

pub use table::EVICTION_SLACK;

/// Connection-level limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// A write that makes no progress for this long fails the connection.
    pub send_timeout: Duration,
    /// A request's headers must be complete this long after its first byte (after the accept,
    /// for a connection's first request).
    pub header_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long.
    pub idle_timeout: Duration,
    /// Most open connections (see [`table`]).
    pub max_connections: usize,
}

/// Connections beyond the bound, when every admitted one is busy, that are still read for a
/// `GET /healthz` (anything else gets 503): so a caller holding every connection with streams
/// cannot make the gateway look dead to its orchestrator. Past these, refused unread.
const HEALTH_OVERFLOW: usize = 16;

/// Pause after an accept error that is not about one connection (EMFILE, ENFILE, ENOBUFS):
/// retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Longest a newcomer waits for evicted connections to close before it is answered as one
/// over the bound.
const ROOM_WAIT: Duration = Duration::from_secs(1);
/// Newcomers waiting for room at once (each in a task of its own; the accept loop never
/// waits); past these, a newcomer is answered as one over the bound at once.
const WAITING: usize = 16;
/// Rate of the warnings about the bound and about accept errors.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Serves the gateway's routes on `listener` until `shutdown` resolves, then lets in-flight
/// requests finish (the caller bounds that with its grace).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let serving = Serving {
        router: crate::router(state.clone()),
        health_only: crate::health_router(state.clone()),
        state: state.clone(),
        overflow: Arc::new(Semaphore::new(HEALTH_OVERFLOW)),
        waiting: Arc::new(Semaphore::new(WAITING)),
        connections: Connections::new(limits.max_connections),
        limits,
    };
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut at_bound = Throttled::default();
    let mut accept_failed = Throttled::default();
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => serving.dispatch(tcp, &mut tasks, &mut at_bound),
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    accept_failed.warn_error(&e);
                    serving.connections.evict_one();
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    state.draining.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// What the accept loop gives each new connection: the routes, the table, the limits.
#[derive(Clone)]
struct Serving {
    router: axum::Router,
    health_only: axum::Router,
    state: AppState,
    overflow: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
    connections: Arc<Connections>,
    limits: ConnLimits,
}

impl Serving {
    /// Serves a just-accepted connection, or waits for room for it, or refuses it: never
    /// waiting itself (the accept loop goes on at once).
    fn dispatch(&self, tcp: TcpStream, tasks: &mut JoinSet<()>, at_bound: &mut Throttled) {
        let max = self.limits.max_connections;
        match self.connections.admit() {
            Admission::Admitted { slot, evicted } => {
                if evicted {
                    at_bound.warn(max, "the oldest idle connection was closed to make room");
                }
                tasks.spawn(self.clone().serve(tcp, slot));
            }
            Admission::Wait => match self.waiting.clone().try_acquire_owned() {
                Ok(permit) => {
                    at_bound.warn(
                        max,
                        "evicted connections are still closing; a newcomer waits for one",
                    );
                    tasks.spawn(self.clone().wait_for_room(tcp, permit));
                }
                Err(_) => {
                    at_bound.warn(max, "too many newcomers wait for room; refused with 503");
                    self.overflow(tcp, tasks);
                }
            },
            Admission::Refused => {
                at_bound.warn(max, "every connection is busy; refused with 503");
                self.overflow(tcp, tasks);
            }
        }
    }

    async fn serve(self, tcp: TcpStream, slot: Slot) {
        connection(tcp, slot, (self.router, self.state), self.limits).await;
    }

    /// Waits (up to [`ROOM_WAIT`]) for an evicted connection to close, then serves `tcp`;
    /// past the wait it is answered as one over the bound.
    async fn wait_for_room(self, tcp: TcpStream, permit: OwnedSemaphorePermit) {
        let admission = admit_patiently(&self.connections).await;
        drop(permit);
        match admission {
            Admission::Admitted { slot, .. } => self.serve(tcp, slot).await,
            Admission::Wait | Admission::Refused => match self.overflow.clone().try_acquire_owned()
            {
                Ok(permit) => {
                    overflow_connection(tcp, permit, self.health_only, self.limits).await;
                }
                Err(_) => refuse(&tcp),
            },
        }
    }

    /// A connection over the bound: read for `/healthz` while there is room for that, else
    /// refused unread.
    fn overflow(&self, tcp: TcpStream, tasks: &mut JoinSet<()>) {
        match self.overflow.clone().try_acquire_owned() {
            Ok(permit) => {
                let router = self.health_only.clone();
                tasks.spawn(overflow_connection(tcp, permit, router, self.limits));
            }
            Err(_) => refuse(&tcp),
        }
    }
}

/// Admits a new connection; while there is no room only because evicted connections have not
/// closed yet (a burst of accepts ran ahead of their tasks), waits for them, up to
/// [`ROOM_WAIT`].
async fn admit_patiently(connections: &Arc<Connections>) -> Admission {
    let deadline = Instant::now() + ROOM_WAIT;
    loop {
        // Listening before asking: a connection that leaves in between is not missed.
        let room = connections.left().notified();
        let mut room = std::pin::pin!(room);
        room.as_mut().enable();
        match connections.admit() {
            Admission::Wait => {
                if tokio::time::timeout_at(deadline, room).await.is_err() {
                    return Admission::Refused;
                }
            }
            admission => return admission,
        }
    }
}

/// Serves one connection until it closes: at its peer's or its own initiative, at eviction, or
/// (gracefully: in-flight requests first) at shutdown.
async fn connection(
    tcp: TcpStream,
    mut slot: Slot,
    (router, state): (axum::Router, AppState),
    limits: ConnLimits,
) {
    let draining = state.draining.clone();
    // SSE streams write one small event at a time; with Nagle's algorithm an event written
    // while the previous one is unacknowledged waits for that ACK.
    if let Err(e) = tcp.set_nodelay(true) {
        debug!(error = %e, "could not set TCP_NODELAY");
    }
    let activity = slot.activity().clone();
    let service = ConnService {
        router,
        direct: Some(state),
        activity: activity.clone(),
    };
    let io = ReadGuard::new(
        tcp,
        activity.clone(),
        limits.header_read_timeout,
        limits.idle_timeout,
    );
    let io = TokioIo::new(StallGuard::new(io, limits.send_timeout));
    let conn = http1::Builder::new().serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            () = asked_to_close(&draining, &activity), if !closing => {
                // With nothing in progress there is nothing to finish: close now (a graceful
                // shutdown would wait for the headers of a request never dispatched, i.e.
                // for a slow-header client). Otherwise the request in progress completes first.
                if !activity.is_busy() {
                    break;
                }
                slot.linger();
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    drop(slot);
}

/// Serves one request on a connection over the bound with the health-only router (`/healthz`
/// answered, anything else 503), within the header-read timeout, then closes.
async fn overflow_connection(
    tcp: TcpStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
    router: axum::Router,
    limits: ConnLimits,
) {
    let service = ConnService {
        router,
        direct: None,
        activity: std::sync::Arc::default(),
    };
    let io = TokioIo::new(StallGuard::new(tcp, limits.send_timeout));
    let conn = http1::Builder::new()
        .keep_alive(false)
        .serve_connection(io, service);
    if tokio::time::timeout(limits.header_read_timeout, conn)
        .await
        .is_err()
    {
        debug!("an over-the-bound connection sent no request in time");
    }
}

async fn asked_to_close(draining: &CancellationToken, activity: &table::Activity) {
    tokio::select! {
        () = draining.cancelled() => {}
        () = activity.evicted() => {}
    }
}

/// Answers a connection there is no room for with 503 and closes it. A non-blocking write: a
/// fresh socket's send buffer always takes these few bytes, and the accept loop never waits
/// on a client. (If the request was already received, closing with it unread may send a reset
/// that overtakes the answer; either way the client learns at once.)
fn refuse(tcp: &TcpStream) {
    if let Err(e) = tcp.try_write(&crate::error::TOO_MANY_CONNECTIONS) {
        debug!(error = %e, "could not write the 503 to a refused connection");
    }
}

/// Errors about one connection (it was reset before it was accepted): nothing to back off for.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A warning logged once per burst: at the first event, then at most once per [`WARN_EVERY`]
/// with the number of events since.
#[derive(Debug, Default)]
struct Throttled {
    last: Option<Instant>,
    since: u64,
}

impl Throttled {
    fn due(&mut self) -> Option<u64> {
        self.since += 1;
        if self.last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return None;
        }
        self.last = Some(Instant::now());
        Some(std::mem::take(&mut self.since))
    }

    fn warn(&mut self, max_connections: usize, what: &'static str) {
        if let Some(events) = self.due() {
            warn!(
                max_connections,
                events, "connection bound (--max-connections) reached: {what}"
            );
        }
    }

    fn warn_error(&mut self, e: &io::Error) {
        if let Some(events) = self.due() {
            warn!(error = %e, events, "accept failed (out of file descriptors?); backing off");
        }
    }
}
