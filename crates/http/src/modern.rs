//! The Modern (2026-07-28) branch of `POST /mcp`: stateless by construction.
//!
//! Reached only after classification, and before anything reads `Mcp-Session-Id`: this module
//! never looks at it, never sets it, and never touches the session store.

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;

use switchboard_core::{CoreError, Exchange, REQUEST_STREAM_QUEUE};
use switchboard_wire::classify::{mismatch, META_LOG_LEVEL, META_SUBSCRIPTION_ID};
use switchboard_wire::{
    encode_error, encode_result, headers as mcp_headers, Message, MessageKind, RequestId,
};

use crate::error::{status_of, HttpError};
use crate::headers::{self, Delivery};
use crate::{sse, AppState};

const LISTEN: &str = "subscriptions/listen";

pub(crate) async fn handle(
    state: &AppState,
    caller: &std::sync::Arc<switchboard_core::Principal>,
    headers: &HeaderMap,
    msg: &Message<'_>,
    bytes: &Bytes,
    delivery: Delivery,
) -> Result<Response, HttpError> {
    let id = msg.id.clone();
    match msg.kind {
        MessageKind::Response => return Err(HttpError::ClientResponse),
        // 2026-07-28 defines no client→server notifications over HTTP (cancellation is closing
        // the stream): accepted and dropped.
        MessageKind::Notification => return Ok(axum::http::StatusCode::ACCEPTED.into_response()),
        MessageKind::Request => {}
    }
    if headers.get(headers::PROTOCOL_VERSION).is_none() {
        return Err(HttpError::Rpc(
            id,
            mismatch("MCP-Protocol-Version header is required"),
        ));
    }
    let text = |name: &str| headers.get(name).map(|v| v.to_str().ok());
    mcp_headers::check_modern(msg, text("mcp-method"), text("mcp-name"))
        .map_err(|e| HttpError::Rpc(id.clone(), e))?;
    // `Mcp-Param-*` mirror the arguments the tool's schema designates (SEP-2243). A stdio
    // backend never sees headers, so the gateway checks them.
    if msg.method == Some("tools/call") {
        let tool = msg
            .param("name")
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        if let Some(tool) = tool {
            if let Some(spec) = state.gateway.param_headers(caller, &tool).await {
                let args: Option<serde_json::Value> = msg
                    .param("arguments")
                    .and_then(|a| serde_json::from_str(a.get()).ok());
                mcp_headers::check_params(args.as_ref(), &spec, |h| {
                    headers.get(h).map(|v| v.to_str().ok())
                })
                .map_err(|e| HttpError::Rpc(id.clone(), e))?;
            }
        }
    }

    // A stream where something may travel before the answer: a listen's events, progress,
    // and the log messages a request asked for with `_meta` logLevel (its own, on its stream).
    let streaming = msg.method == Some(LISTEN)
        || msg.meta("progressToken").is_some()
        || msg.meta(META_LOG_LEVEL).is_some();
    let delivery = if streaming { Delivery::Sse } else { delivery };
    // A denial is a plain 403 even when the answer would have been a stream (the client's
    // Accept may prefer one, too) or comes from another replica; a JSON answer is decided
    // once, on the request path, with the same 403.
    if state
        .gateway
        .decides_early(matches!(delivery, Delivery::Sse))
    {
        state
            .gateway
            .authorize(caller, None, msg, true)
            .await
            .map_err(|e| HttpError::Core(id.clone(), e))?;
    }
    // A retry whose `requestState` another replica issued is answered there (`hop`).
    state
        .gateway
        .modern_home(msg)
        .await
        .map_err(|e| HttpError::Core(id.clone(), e))?;
    match delivery {
        Delivery::Json => {
            let answer = state
                .gateway
                .handle(Exchange::modern(caller, msg, None))
                .await
                .map_err(|e| HttpError::Core(id, e))?;
            let status = answer
                .error_code
                .map_or(axum::http::StatusCode::OK, status_of);
            Ok((
                status,
                [(header::CONTENT_TYPE, "application/json")],
                answer.body,
            )
                .into_response())
        }
        Delivery::Sse => {
            let gateway = state.gateway.clone();
            let bytes = bytes.clone();
            let caller = caller.clone();
            let (tx, rx) = mpsc::channel(REQUEST_STREAM_QUEUE);
            let stream_id = id.clone();
            // A listen stream waits for events for ever: at shutdown it ends at once, with
            // the graceful result the spec gives for a server-closed subscription (dropping
            // the call withdraws its registration, and cancels it upstream).
            let listen = (msg.method == Some(LISTEN)).then(|| (state.draining.clone(), id.clone()));
            let call = async move {
                let result = match Message::parse(&bytes) {
                    Ok(msg) => gateway
                        .handle(Exchange::modern(&caller, &msg, Some(tx)))
                        .await
                        .map(|a| a.body),
                    Err(_) => Err(CoreError::UnexpectedResponse),
                };
                result.unwrap_or_else(|e| {
                    let failure = HttpError::Core(id, e);
                    let (_, id, err) = failure.parts();
                    encode_error(id, &err)
                })
            };
            let call = async move {
                let Some((draining, Some(id))) = listen else {
                    return call.await;
                };
                tokio::select! {
                    biased;
                    () = draining.cancelled() => listen_closed(&id),
                    answer = call => answer,
                }
            };
            Ok(sse::request_stream(
                call,
                Some(rx),
                state.config.keep_alive,
                stream_id.as_ref(),
            ))
        }
    }
}

/// The result that ends a listen stream the server closes (mcp-wire.md §3.9).
fn listen_closed(id: &RequestId) -> Vec<u8> {
    let result = format!(
        r#"{{"resultType":"complete","_meta":{{"{META_SUBSCRIPTION_ID}":{}}}}}"#,
        id.as_json()
    );
    encode_result(id, &result)
}
