//! The Modern (2026-07-28) branch of `POST /mcp`: stateless by construction.
//!
//! Reached only after classification, and before anything reads `Mcp-Session-Id`: this module
//! never looks at it, never sets it, and never touches the session store.

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;

use switchboard_core::{CoreError, Exchange, REQUEST_STREAM_QUEUE};
use switchboard_wire::classify::{mismatch, META_SUBSCRIPTION_ID};
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
    // Delivery, `Mcp-Param-*`, an early denial and a retry's home replica: decided in core.
    let prefers_stream = matches!(delivery, Delivery::Sse);
    let header = |h: &str| headers.get(h).map(|v| v.to_str().ok());
    let plan = (state.gateway)
        .plan(&Exchange::modern(caller, msg, None), prefers_stream, header)
        .await
        .map_err(|e| HttpError::Core(id.clone(), e))?;
    let delivery = if plan.stream {
        Delivery::Sse
    } else {
        Delivery::Json
    };
    match delivery {
        Delivery::Json => {
            let answer = match state
                .gateway
                .handle(Exchange::modern(caller, msg, None))
                .await
            {
                Ok(answer) => answer,
                Err(e) => match crate::error::modern_consent(id.as_ref(), &e) {
                    Some(body) => {
                        let json = [(header::CONTENT_TYPE, "application/json")];
                        return Ok((json, body).into_response());
                    }
                    None => return Err(HttpError::Core(id, e)),
                },
            };
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
                    if let Some(body) = crate::error::modern_consent(id.as_ref(), &e) {
                        return body;
                    }
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
