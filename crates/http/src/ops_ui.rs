//! The operator's page (`GET /ui`: static HTML, CSS and script compiled into the binary) and
//! the trust endpoints it uses: `GET /trust` (pins and what waits for approval; admitted like
//! `/status`) and `POST /trust/approve` (`{"backend": B, "tool": T}`; always admitted like
//! `/mcp`, since it changes what every client may call).
//!
//! The page holds no data: it reads `/status` and `/trust` with the bearer token it was
//! given (the URL fragment `#token=…`, never sent to a server, or a field), so serving it
//! needs no credential. Every string from a backend is put in the page as text, never as
//! markup, and the Content-Security-Policy allows only the page's own script and style.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use serde_json::json;

use switchboard_core::trust::Approval;
use switchboard_core::Principal;

use crate::error::OpsError;

use crate::AppState;

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// Largest approval body read.
const APPROVE_BODY_LIMIT: usize = 4096;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, &'static str); 4] = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    (headers, body).into_response()
}

/// Where the documentation is published, when the build was told (`SWITCHBOARD_DOCS_URL`).
const DOCS_URL: Option<&str> = option_env!("SWITCHBOARD_DOCS_URL");

/// `/status`'s `links`: where the page's links go. `metrics` is `null` when `/metrics` is
/// not on this listener (`--metrics-listen`); `docs` when no docs URL was built in.
pub(crate) fn links(config: &crate::HttpConfig) -> serde_json::Value {
    json!({
        "status": "/status",
        "metrics": config.metrics_here.then_some("/metrics"),
        "docs": DOCS_URL,
        "docsInSource": "docs/operations.md",
    })
}

pub(crate) async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn json_answer(body: serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `GET /trust`, for approvers only (it names every backend's pending tools).
pub(crate) async fn trust(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
) -> Response {
    match state.gateway.operator().trust() {
        None => json_answer(json!({"mode": "off", "pending": []})),
        Some(trust) if !trust.is_approver(&caller) => OpsError::NotApprover.into_response(),
        Some(trust) => json_answer(trust.status_page()),
    }
}

#[derive(Debug, Deserialize)]
struct Approve {
    backend: String,
    tool: String,
    /// The pending definition's digest as `GET /trust` showed it: what was reviewed.
    digest: String,
}

/// `POST /trust/approve`, by a principal listed in `trust.approvers` only.
pub(crate) async fn approve(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // JSON only: a cross-site form or `no-cors` fetch can send `text/plain` without a
    // preflight, and must not be read as an approval.
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return OpsError::NotJson.into_response();
    }
    // Within a bound and a deadline (see `oauth_callback::start`).
    let body = match crate::streamable::read_body(&headers, body, APPROVE_BODY_LIMIT).await {
        Ok(body) => body,
        Err(crate::error::HttpError::PayloadTooLarge(_)) => {
            return OpsError::TooLarge.into_response()
        }
        Err(_) => return OpsError::BadBody.into_response(),
    };
    let Ok(ask) = serde_json::from_slice::<Approve>(&body) else {
        return OpsError::BadBody.into_response();
    };
    match state
        .gateway
        .operator()
        .approve_tool(&ask.backend, &ask.tool, &ask.digest, &caller)
        .await
    {
        Ok(Approval::Approved) => {
            json_answer(json!({"approved": format!("{}/{}", ask.backend, ask.tool)}))
        }
        Ok(Approval::NothingPending) => OpsError::NothingPending.into_response(),
        Ok(Approval::Changed) => OpsError::Changed.into_response(),
        Err(e) => OpsError::Core(e).into_response(),
    }
}
