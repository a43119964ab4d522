//! Switchboard's HTTP face: Streamable HTTP at `/mcp`, the HTTP+SSE transport at `/sse` +
//! `/messages`, and the operator endpoints: `/healthz` (liveness), `/readyz` (readiness),
//! `/status` (per-backend health, behind the same admission as `/mcp` unless opened) and
//! `/metrics` (Prometheus text, here or on its own listener: [`metrics_router`]).
//!
//! Architecture invariant: this is the only crate that knows the HTTP server. It validates
//! headers and bodies, parses the envelope once, hands it to `core`, and turns every outcome
//! into exactly one HTTP answer. All error → status/JSON-RPC mapping lives in [`error`].

mod auth;
mod conn;
mod direct;
mod error;
mod headers;
mod hop;
mod in_flight;
mod legacy_sse;
mod modern;
mod oauth_callback;
mod ops_ui;
mod origin;
mod outbound;
mod sse;
mod stall;
mod streamable;
mod tokens;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use switchboard_core::{Gateway, Principal};

pub use auth::{
    parse_algorithm, reserved_issuer, Authenticator, JwtConfig, ANONYMOUS_ISSUER, API_KEY_ISSUER,
};
pub use conn::{serve, ConnLimits, EVICTION_SLACK};
pub use hop::{Hop, HopError, HOP_HEADER, MIN_SECRET_BYTES};
pub use legacy_sse::clean_prefix;
pub use origin::OriginPolicy;

/// HTTP-level limits.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body; larger ones get 413 before any parsing.
    pub max_body_bytes: usize,
    /// Interval of `: keep-alive` comments on open SSE streams, so idle proxies keep them open
    /// and dead clients are noticed.
    pub keep_alive: Duration,
    /// DNS-rebinding protection for `/mcp`, `/sse` and `/messages`.
    pub origin: OriginPolicy,
    /// Path prefix put in front of `/messages` in the HTTP+SSE `endpoint` event (a reverse
    /// proxy's mount point; see [`clean_prefix`]). Empty: none.
    pub endpoint_prefix: String,
    /// Use the client's `X-Forwarded-Prefix` (when valid) instead of `endpoint_prefix`. Only
    /// for gateways behind a proxy that sets it: otherwise any client could choose the URI.
    pub trust_forwarded_prefix: bool,
    /// Who may call: anonymous (default), static API keys, OAuth JWTs.
    pub auth: Arc<Authenticator>,
    /// Most POSTs handled or streaming their answer at once; more get 503.
    pub max_in_flight: usize,
    /// Serve `/status` without authentication (it shows no secrets, but names backends and
    /// their failures, which an operator may not want to show to everyone).
    pub status_open: bool,
    /// Serve `/metrics` on this listener (else it has its own, see [`metrics_router`]).
    pub metrics_here: bool,
    /// Replicas on one session store that forward to each other (`hop`); `None`: a request
    /// carrying a hop header is refused.
    pub hop: Option<Arc<Hop>>,
    /// Callers' upstream tokens (`GET /oauth/tokens`, `DELETE /oauth/tokens/{backend}`);
    /// `None`: those routes answer 404.
    pub token_vault: Option<Arc<dyn switchboard_upstream::outgoing_auth::TokenVault>>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 4 * 1024 * 1024,
            keep_alive: Duration::from_secs(15),
            origin: OriginPolicy::loopback(),
            endpoint_prefix: String::new(),
            trust_forwarded_prefix: false,
            auth: Arc::new(Authenticator::anonymous()),
            max_in_flight: 10_000,
            status_open: false,
            metrics_here: true,
            hop: None,
            token_vault: None,
        }
    }
}

/// Shared state of every handler: one pointer, because axum clones the state for every layer
/// and handler of every request, and each clone of a multi-`Arc` struct was several atomic
/// operations on cache lines shared by all cores (measurable under load).
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] points to.
#[derive(Debug)]
pub struct Shared {
    gateway: Arc<Gateway>,
    config: HttpConfig,
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Cancelled when shutdown begins: streams that only wait for events (GET listen, `/sse`,
    /// Modern `subscriptions/listen`) end then, so they never hold the shutdown grace, while
    /// requests in flight get it.
    draining: CancellationToken,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// State for [`router`].
    pub fn new(gateway: Arc<Gateway>, config: HttpConfig) -> Self {
        AppState(Arc::new(Shared {
            gateway,
            in_flight: Arc::new(tokio::sync::Semaphore::new(config.max_in_flight.max(1))),
            config,
            draining: CancellationToken::new(),
        }))
    }
}

/// The gateway's routes. On the main listener `POST /mcp` never reaches this router: `direct`
/// answers it with the same [`admission`] and handler. The route stays so the table is
/// complete (and answers `POST /mcp` wherever the router is served by itself).
pub fn router(state: AppState) -> Router {
    let mut admitted = Router::new()
        .route(
            "/mcp",
            post(streamable::post)
                .get(streamable::get)
                .delete(streamable::delete),
        )
        .route("/sse", get(legacy_sse::open))
        .route("/messages", post(legacy_sse::post))
        // Changes what every client may call, or shows what waits for approval (tool names
        // the policy may hide from a caller): always behind `/mcp`'s admission, for approvers.
        .route("/trust/approve", post(ops_ui::approve))
        .route("/trust", get(ops_ui::trust))
        // The caller's own upstream tokens: admitted like `/mcp`.
        .route("/oauth/tokens", get(tokens::list))
        .route(
            "/oauth/tokens/{backend}",
            axum::routing::delete(tokens::revoke),
        );
    // `/status` and `/stats` tell backends' health, traffic and table sizes: behind the same
    // admission as `/mcp` (Origin/Host, auth) unless the operator opened `/status`.
    if !state.config.status_open {
        admitted = admitted
            .route("/status", get(status))
            .route("/stats", get(stats));
    }
    // `/metrics` on the main listener follows `/status`'s rule.
    // `--metrics-listen` serves it open, on a listener of its own.
    if state.config.metrics_here && !state.config.status_open {
        admitted = admitted.route("/metrics", get(metrics));
    }
    let mut open = admitted
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), admit))
        .route("/readyz", get(ready));
    if state.config.status_open {
        // Opened to callers without a credential, not to other sites: Origin/Host still
        // apply (a page elsewhere must not read it through a rebound name).
        let mut opened = Router::new()
            .route("/status", get(open_status))
            .route("/stats", get(stats));
        if state.config.metrics_here {
            opened = opened.route("/metrics", get(metrics));
        }
        let same_site = axum::middleware::from_fn_with_state(state.clone(), same_site);
        open = open.merge(opened.route_layer(same_site));
    }
    open.route("/.well-known/oauth-protected-resource", get(auth::metadata))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(auth::metadata),
        )
        .route(
            "/oauth/start",
            get(oauth_callback::start_page).post(oauth_callback::start),
        )
        .route("/oauth/callback", get(oauth_callback::callback))
        .route("/oauth/i/{tag}/callback", get(oauth_callback::callback))
        .route(
            "/oauth/client-metadata.json",
            get(oauth_callback::client_metadata),
        )
        .route("/", get(index))
        // Static, no data (see `ops_ui`): the data it shows comes from `/status` and `/trust`.
        .route("/ui", get(ops_ui::page))
        .route("/ui/app.js", get(ops_ui::script))
        .route("/ui/app.css", get(ops_ui::style))
        .route("/healthz", get(health))
        .with_state(state)
}

/// Admission for the MCP routes (the router's layer; `direct` calls [`admission`] itself).
/// The caller's principal travels as a request extension to the handlers.
async fn admit(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    match admission(&state, &mut request).await {
        Ok(Admitted { caller, permit }) => {
            request.extensions_mut().insert(caller);
            in_flight::hold(next.run(request).await, permit)
        }
        Err(refused) => refused.into_response(),
    }
}

/// Origin/Host alone (an opened `/status`): no credential asked.
async fn same_site(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match origin::admit(&state, &request) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// What admission hands an MCP route.
pub(crate) struct Admitted {
    pub(crate) caller: Arc<Principal>,
    /// Held until the response body ends (`in_flight::hold`); POST only.
    pub(crate) permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The checks in front of every MCP route, in order: a replica hop's proof (403), Origin/Host
/// (403), authentication (401), the in-flight bound (503). One function for the router's layer
/// and the direct `POST /mcp`, so the two cannot drift apart.
pub(crate) async fn admission(
    state: &AppState,
    request: &mut Request,
) -> Result<Admitted, error::HttpError> {
    // A request claiming to come from another replica must prove it (`hop`).
    if request.headers().contains_key(HOP_HEADER)
        && !state.config.hop.as_ref().is_some_and(|h| h.verify(request))
    {
        return Err(error::HttpError::Forbidden(
            "Forbidden: replica hop not verified",
        ));
    }
    origin::admit(state, request)?;
    let caller = auth::admit(state, request).await?;
    let request = &*request;
    let permit = in_flight::admit(state, request)?;
    Ok(Admitted { caller, permit })
}

/// What a person who opens the gateway in a browser (or curls it) learns: where the endpoints
/// are. Fixed text, so it needs no authentication and reveals nothing about the backend.
const INDEX: &str = "\
Switchboard MCP gateway

  POST/GET/DELETE /mcp   MCP Streamable HTTP (2025-11-25 sessions, 2026-07-28 stateless)
  GET /sse               MCP HTTP+SSE (2024-11-05); then POST /messages?session_id=...
  GET /healthz           liveness: 200 while the backend runs
  GET /readyz            readiness: 200 when enough backends are healthy, else 503
  GET /status            each backend's health, era, transport and breaker (JSON)
  GET /ui                the status page (backends, traffic, quarantined tools)
  GET /trust             tool pins waiting for approval (JSON); POST /trust/approve
  GET /metrics           Prometheus metrics (unless on --metrics-listen)
  GET /stats             table sizes (JSON)
  GET /oauth/tokens      your own upstream tokens (no secrets); DELETE /oauth/tokens/BACKEND
  GET /.well-known/oauth-protected-resource   OAuth protected resource metadata
";

async fn index() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        INDEX,
    )
}

/// What a connection over the connection bound is served with: `/healthz`, and 503 for the
/// rest (see `conn`).
pub(crate) fn health_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .fallback(too_many_connections)
        .with_state(state)
}

async fn too_many_connections() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        error::TOO_MANY_CONNECTIONS_BODY.clone(),
    )
        .into_response()
}

async fn health(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.gateway.operator().alive() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "backend unavailable\n")
    }
}

/// 200 when the gateway is ready to serve (`--ready-when`), else 503.
async fn ready(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.gateway.operator().ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// `/status` behind `/mcp`'s admission: by principal, the caller's own sessions (an
/// approver's: everyone's).
async fn status(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Arc<Principal>>,
) -> Response {
    status_for(&state, Some(&caller))
}

/// `/status` opened (`--status-open`): nobody's sessions by principal.
async fn open_status(State(state): State<AppState>) -> Response {
    status_for(&state, None)
}

fn status_for(state: &AppState, caller: Option<&Principal>) -> Response {
    let mut status = state.gateway.operator().status(caller);
    if let Some(map) = status.as_object_mut() {
        map.insert("links".to_owned(), ops_ui::links(&state.config));
    }
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        status.to_string(),
    )
        .into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    render_metrics(&state.gateway)
}

fn render_metrics(gateway: &Gateway) -> Response {
    (
        // The OpenMetrics text format (what `prometheus-client` writes), which Prometheus
        // scrapes natively.
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gateway.operator().render_metrics(),
    )
        .into_response()
}

/// `/metrics` alone, for its own listener (`--metrics-listen`): nothing else is reachable
/// there, so it can be exposed to a scraper's network without the MCP endpoint.
pub fn metrics_router(gateway: Arc<Gateway>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let gateway = gateway.clone();
            async move { render_metrics(&gateway) }
        }),
    )
}

/// Serves [`metrics_router`] on its own listener until `shutdown`. A scraper's endpoint, so
/// axum's plain server: it has none of the main loop's connection bounds (`conn`), which is
/// why it is meant for an address only the scraper reaches.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(gateway))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Table sizes, for operators and leak tests. Counts only: no ids, nothing a caller could use.
async fn stats(State(state): State<AppState>) -> axum::response::Response {
    let body = serde_json::json!({
        "sessions": state.gateway.operator().session_count(),
        "tableEntries": state.gateway.operator().table_entries(),
        "partitions": state.gateway.operator().partition_count(),
        "backendEra": state.gateway.operator().primary_era().to_string(),
    });
    axum::response::IntoResponse::into_response((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    ))
}
