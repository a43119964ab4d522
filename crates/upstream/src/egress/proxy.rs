//! The proxy of one backend: HTTP/1.1 over the Unix socket its sandboxes reach, parsed by
//! hyper. `CONNECT host:port` opens a tunnel (answered `200` once the upstream connection
//! is up, then bytes both ways); a request in absolute form (`GET http://host:port/path`)
//! is forwarded as origin-form on a connection of its own. Each target is checked against
//! the backend's allow list before anything is resolved or connected; what is not listed
//! gets `403` and a log line naming the backend and the `host:port` (never the URL's
//! user-info, path or headers).
//!
//! Bounded: at most [`Limits::connections`] client connections at once (each carries at
//! most one tunnel or one forwarded request at a time; past the cap a connection is
//! closed unread), each closed after [`Limits::idle`] without a byte either way; resolving
//! and connecting take at most [`Limits::connect`]. Every task selects on the proxy's stop
//! token, so all of them end with the backend.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::upgrade::OnUpgrade;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::allow::{AllowList, Host, Target};
use super::idle::Activity;

type Body = BoxBody<Bytes, hyper::Error>;
type TunnelSlot = Arc<Mutex<Option<oneshot::Sender<(OnUpgrade, TcpStream)>>>>;

/// Distinct refused targets logged at warn per backend; later ones (and repeats) at debug.
const LOGGED_REFUSALS: usize = 64;

/// The proxy's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections (so tunnels) at once.
    pub connections: usize,
    /// A connection or tunnel with no byte either way for this long is closed.
    pub idle: Duration,
    /// Resolving a name and connecting to one of its addresses.
    pub connect: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 64,
            idle: Duration::from_secs(300),
            connect: Duration::from_secs(10),
        }
    }
}

/// One backend's proxy.
/// How long a request's head may take to arrive on a proxy connection.
const HEADER_READ: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct Proxy {
    backend: Arc<str>,
    allow: AllowList,
    limits: Limits,
    /// Targets already refused at warn.
    refused: Mutex<HashSet<Target>>,
    /// Allowed targets already logged as unreachable (as `refused`: a sandbox looping on a
    /// down host cannot flood the log).
    unreachable: Mutex<HashSet<Target>>,
    /// Whether the cap was reported at warn.
    full_said: std::sync::atomic::AtomicBool,
}

/// Why a request was not served: its status and a short reason (for the body).
struct Refusal(StatusCode, String);

impl Proxy {
    pub(crate) fn new(backend: &str, allow: AllowList, limits: Limits) -> Proxy {
        Proxy {
            backend: backend.into(),
            allow,
            limits,
            refused: Mutex::new(HashSet::new()),
            unreachable: Mutex::new(HashSet::new()),
            full_said: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Accepts until `stop`; each connection is a task that ends with it (or with `stop`).
    pub(crate) async fn serve(self: Arc<Self>, listener: UnixListener, stop: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.limits.connections));
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors, say: do not spin.
                    debug!(backend = %self.backend, error = %e, "egress proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                self.full();
                continue;
            };
            let proxy = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                proxy.connection(stream, stop).await;
                drop(permit);
            });
        }
    }

    /// One client connection: its requests, then its tunnel if a `CONNECT` opened one.
    async fn connection(self: Arc<Self>, stream: UnixStream, stop: CancellationToken) {
        let activity = Activity::new();
        let (tx, rx) = oneshot::channel();
        let slot: TunnelSlot = Arc::new(Mutex::new(Some(tx)));
        let service = {
            let (proxy, activity, stop) = (self.clone(), activity.clone(), stop.clone());
            hyper::service::service_fn(move |req| {
                let (proxy, activity, stop, slot) =
                    (proxy.clone(), activity.clone(), stop.clone(), slot.clone());
                async move { Ok::<_, Infallible>(proxy.answer(req, activity, slot, stop).await) }
            })
        };
        // A request's head must come whole within the deadline: a sandbox trickling bytes
        // does not hold one of the backend's connections until its idle time.
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_READ)
            .serve_connection(TokioIo::new(activity.wrap(stream)), service)
            .with_upgrades();
        tokio::select! {
            r = conn => {
                if let Err(e) = r {
                    debug!(backend = %self.backend, error = %e, "egress proxy: connection ended");
                }
            }
            () = activity.idle(self.limits.idle) => return,
            () = stop.cancelled() => return,
        }
        let Ok((upgrade, upstream)) = rx.await else {
            return;
        };
        let idle = self.limits.idle;
        tokio::select! {
            () = tunnel(upgrade, upstream, &activity) => {}
            () = activity.idle(idle) => {
                debug!(backend = %self.backend, "egress proxy: an idle tunnel closed");
            }
            () = stop.cancelled() => {}
        }
    }

    async fn answer(
        &self,
        req: Request<Incoming>,
        activity: Activity,
        slot: TunnelSlot,
        stop: CancellationToken,
    ) -> Response<Body> {
        let out = if req.method() == Method::CONNECT {
            self.connect(req, &slot).await
        } else {
            self.forward(req, activity, stop).await
        };
        out.unwrap_or_else(|Refusal(status, why)| text(status, why))
    }

    /// `CONNECT`: the tunnel is handed to [`connection`](Proxy::connection), which runs
    /// it once hyper lets the connection go.
    async fn connect(
        &self,
        mut req: Request<Incoming>,
        slot: &TunnelSlot,
    ) -> Result<Response<Body>, Refusal> {
        let target = Target::from_connect(req.uri()).map_err(|e| self.bad(&e))?;
        let upstream = self.open(&target).await?;
        let upgrade = hyper::upgrade::on(&mut req);
        if let Some(tx) = slot.lock().take() {
            let _ = tx.send((upgrade, upstream));
        }
        Ok(text(StatusCode::OK, String::new()))
    }

    /// A request in absolute form, forwarded in origin form on a connection of its own.
    async fn forward(
        &self,
        req: Request<Incoming>,
        activity: Activity,
        stop: CancellationToken,
    ) -> Result<Response<Body>, Refusal> {
        let target = Target::from_absolute(req.uri()).map_err(|e| self.bad(&e))?;
        let upstream = self.open(&target).await?;
        let io = TokioIo::new(activity.wrap(upstream));
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Incoming>(io)
            .await
            .map_err(|e| self.unreachable(&target, &e))?;
        let idle = self.limits.idle;
        tokio::spawn(async move {
            tokio::select! {
                _ = conn => {}
                () = activity.idle(idle) => {}
                () = stop.cancelled() => {}
            }
        });
        let (mut parts, body) = req.into_parts();
        let host = match parts.uri.port() {
            Some(_) => target.to_string(),
            None => target.host.to_string(),
        };
        let origin = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = origin
            .parse()
            .map_err(|_| Refusal(StatusCode::BAD_REQUEST, "a bad path".into()))?;
        parts.version = hyper::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        let host = HeaderValue::try_from(host)
            .map_err(|_| Refusal(StatusCode::BAD_REQUEST, "a bad host".into()))?;
        parts.headers.insert(HOST, host);
        let resp = sender
            .send_request(Request::from_parts(parts, body))
            .await
            .map_err(|e| self.unreachable(&target, &e))?;
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, body.boxed()))
    }

    /// Checks `target` against the allow list, then resolves it (the sandbox has no DNS)
    /// and connects to the first address that answers.
    async fn open(&self, target: &Target) -> Result<TcpStream, Refusal> {
        if !self.allow.permits(target) {
            self.refuse(target);
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("{target} is not in this backend's sandbox.network.allow\n"),
            ));
        }
        let wait = self.limits.connect;
        let opened = tokio::time::timeout(wait, async {
            let addrs = resolve(target).await?;
            connect_any(&addrs, wait).await
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        opened.map_err(|e| self.unreachable(target, &e))
    }

    /// A connection past the cap: said at warn the first time, then at debug.
    fn full(&self) {
        let n = self.limits.connections;
        if self
            .full_said
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            debug!(backend = %self.backend, "egress proxy: {n} connections open; closed a new one");
        } else {
            warn!(
                backend = %self.backend,
                "egress proxy: {n} connections already open; closing new ones until one ends"
            );
        }
    }

    fn refuse(&self, target: &Target) {
        let first = {
            let mut seen = self.refused.lock();
            seen.len() < LOGGED_REFUSALS && seen.insert(target.clone())
        };
        let backend = &self.backend;
        if first {
            warn!(
                backend = %backend, target = %target,
                "sandbox egress refused: backend {backend} tried {target}, which is not in its \
                 sandbox.network.allow (403)"
            );
        } else {
            debug!(backend = %backend, target = %target, "sandbox egress refused (403)");
        }
    }

    fn bad(&self, e: &super::EgressError) -> Refusal {
        debug!(backend = %self.backend, error = %e, "egress proxy: a bad request (400)");
        Refusal(StatusCode::BAD_REQUEST, format!("{e}\n"))
    }

    fn unreachable(&self, target: &Target, e: &dyn std::fmt::Display) -> Refusal {
        let first = {
            let mut seen = self.unreachable.lock();
            seen.len() < LOGGED_REFUSALS && seen.insert(target.clone())
        };
        if first {
            warn!(
                backend = %self.backend, target = %target,
                "sandbox egress: {target} is allowed but could not be reached: {e} (502; said once per target)"
            );
        } else {
            debug!(backend = %self.backend, target = %target, error = %e, "sandbox egress: unreachable (502)");
        }
        Refusal(StatusCode::BAD_GATEWAY, format!("{target} unreachable\n"))
    }
}

/// Bytes both ways until either side closes.
async fn tunnel(upgrade: OnUpgrade, upstream: TcpStream, activity: &Activity) {
    let Ok(upgraded) = upgrade.await else { return };
    let mut client = TokioIo::new(upgraded);
    let mut upstream = activity.wrap(upstream);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// The addresses of `target`: an IP address as it is, a name as this host resolves it, but
/// only to public addresses: a listed name whose DNS answer points at this host or a private
/// network (loopback, RFC 1918, link-local such as a cloud metadata service, CGNAT, IPv6
/// unique- and link-local) does not reach it, so whoever controls that name's DNS cannot
/// turn the entry into a way to the gateway's own host. `localhost` (and `*.localhost`)
/// reaches loopback only. An internal target is listed by its address.
pub(crate) async fn resolve(target: &Target) -> std::io::Result<Vec<SocketAddr>> {
    match &target.host {
        Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, target.port)]),
        Host::Name(name) => {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), target.port))
                .await?
                .collect();
            let loopback_name = crate::outgoing_auth::oauth::http::local_host(name);
            let usable: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| usable_for_name(a.ip(), loopback_name))
                .collect();
            if usable.is_empty() && !found.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the name resolves only to addresses of this host or a private network; \
                     list the address itself to allow it",
                ));
            }
            Ok(usable)
        }
    }
}

/// Whether a name's address may be connected to: a public one, or for `localhost` a
/// loopback one.
pub(crate) fn usable_for_name(ip: std::net::IpAddr, loopback_name: bool) -> bool {
    let ip = match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        ip => ip,
    };
    if loopback_name {
        return ip.is_loopback();
    }
    !crate::outgoing_auth::oauth::http::local_host(&ip.to_string()) && !ip.is_multicast()
}

/// The first of `addrs` that accepts a connection within `wait`, in order.
pub(crate) async fn connect_any(
    addrs: &[SocketAddr],
    wait: Duration,
) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "the name resolved to no address",
    );
    for addr in addrs {
        match tokio::time::timeout(wait, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::from(std::io::ErrorKind::TimedOut),
        }
    }
    Err(last)
}

/// Removes the headers that belong to one hop (and the proxy's own), and those `Connection`
/// names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    r
}
