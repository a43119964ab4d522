//! The browser's side of per-user OAuth to remote backends: `GET /oauth/callback`, where an
//! authorization server sends the user back (the state, code and `iss` are checked and the
//! code redeemed by `switchboard_core::oauth::complete`), and `GET
//! /oauth/client-metadata.json`, the gateway's Client ID Metadata Document. Neither needs the
//! caller's credential: the `state` is what binds a callback to the principal that asked.
//! Pages are fixed text plus the backend's configured name, escaped; never the query.

use axum::extract::RawQuery;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use switchboard_core::oauth;

/// `GET /oauth/callback`.
pub(crate) async fn callback(RawQuery(query): RawQuery) -> Response {
    let site = oauth::site();
    match oauth::complete(&site, query.as_deref().unwrap_or("")).await {
        Ok(backend) => page(
            StatusCode::OK,
            "Authorized",
            &format!(
                "Switchboard can now use {} on your behalf. You can close this tab and retry in your MCP client.",
                escape(&backend)
            ),
        ),
        Err(e) => {
            tracing::info!(error = %e, "OAuth callback refused");
            let status = match e {
                oauth::CallbackError::Token(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            };
            page(status, "Authorization failed", &escape(&e.to_string()))
        }
    }
}

/// `GET /oauth/client-metadata.json`.
pub(crate) async fn client_metadata() -> Response {
    match oauth::site().metadata_document() {
        Some(doc) => (
            [(header::CONTENT_TYPE, "application/json")],
            doc.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>"
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
