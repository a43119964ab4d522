//! Streamable HTTP (Legacy semantics) at `/mcp`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use switchboard_core::{Call, CoreError, SessionId, REQUEST_STREAM_QUEUE};
use switchboard_wire::classify::{classify, Era};
use switchboard_wire::{encode_error, method, Message, MessageKind, RequestId};
use tokio::sync::mpsc;

use crate::error::HttpError;
use crate::headers::{self, Delivery};
use crate::{sse, AppState};

/// POST: one JSON-RPC message in, exactly one answer out.
pub(crate) async fn post(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle_post(&state, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// GET: the session's listen stream (server-initiated messages), resumable with
/// `Last-Event-ID`. At most one per session: a new GET replaces the previous stream.
pub(crate) async fn get(State(state): State<AppState>, headers: HeaderMap) -> Response {
    open_listen(&state, &headers).unwrap_or_else(IntoResponse::into_response)
}

fn open_listen(state: &AppState, headers: &HeaderMap) -> Result<Response, HttpError> {
    refuse_modern_stream_methods(headers)?;
    if !headers::accepts_sse(headers) {
        return Err(HttpError::NotAcceptable);
    }
    let sid = headers::session_id(headers).ok_or(HttpError::MissingSession)?;
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let stream = state
        .gateway
        .open_listen(sid, last)
        .map_err(|e| HttpError::Core(None, e))?;
    let (gateway, sid, generation) = (state.gateway.clone(), sid.to_owned(), stream.generation);
    let detach = sse::OnDrop::new(move || gateway.close_listen(&sid, generation));
    Ok(sse::listen_stream(stream, detach, state.config.keep_alive))
}

/// DELETE: ends the session named by `Mcp-Session-Id`.
pub(crate) async fn delete(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = refuse_modern_stream_methods(&headers) {
        return e.into_response();
    }
    let result = match headers::session_id(&headers) {
        None => Err(HttpError::MissingSession),
        Some(sid) => state
            .gateway
            .end_session(sid)
            .await
            .map_err(|e| HttpError::Core(None, e)),
    };
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

/// 2026-07-28 has no GET stream and no sessions to DELETE: a sessionless GET/DELETE that
/// declares a Modern version gets 405 with `Allow: POST`.
fn refuse_modern_stream_methods(headers: &HeaderMap) -> Result<(), HttpError> {
    let modern = headers
        .get(headers::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(switchboard_wire::version::is_modern);
    if modern && headers::session_id(headers).is_none() {
        return Err(HttpError::MethodNotAllowed("POST"));
    }
    Ok(())
}

async fn handle_post(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let delivery = headers::delivery(headers)?;
    headers::require_json(headers)?;
    let bytes = read_body(headers, body, state.config.max_body_bytes).await?;
    let msg = Message::parse(&bytes).map_err(HttpError::Parse)?;
    // Decided per request, before anything reads a session id (invariant 4).
    let version_header = headers
        .get(headers::PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    match classify(&msg, version_header) {
        Err(e) => return Err(HttpError::Rpc(msg.id.clone(), e)),
        Ok(Era::Modern(_)) => {
            return crate::modern::handle(state, headers, &msg, &bytes, delivery).await
        }
        Ok(Era::Legacy) => {}
    }
    headers::check_protocol_version(headers)?;
    let gateway = &state.gateway;
    let session = headers::session_id(headers);
    match (msg.kind, msg.method, msg.id.clone()) {
        (MessageKind::Response, ..) => Err(HttpError::ClientResponse),
        (MessageKind::Notification, ..) => {
            let sid = resolve(state, session, None)?;
            gateway
                .notify(sid.as_ref(), &msg)
                .await
                .map_err(|e| HttpError::Core(None, e))?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        (MessageKind::Request, Some(method::INITIALIZE), Some(id)) => {
            let init = gateway
                .initialize(&id, msg.params)
                .map_err(|e| HttpError::Core(Some(id), e))?;
            let mut response = answer(state, delivery, init.response);
            if let Ok(v) = HeaderValue::from_str(init.session.as_str()) {
                response.headers_mut().insert(headers::SESSION_ID, v);
            }
            Ok(response)
        }
        (MessageKind::Request, _, id) => {
            let sid = resolve(state, session, id.as_ref())?;
            // Progress can only reach a client on a stream: a request carrying a progress
            // token is answered as SSE (the client declared that it accepts both).
            let delivery = if msg.meta("progressToken").is_some() {
                Delivery::Sse
            } else {
                delivery
            };
            Ok(forward(state, delivery, &msg, &bytes, id, sid).await)
        }
    }
}

/// The caller's session, if it named one: unknown ids are 404 (echoing `id` when given).
fn resolve(
    state: &AppState,
    raw: Option<&str>,
    id: Option<&RequestId>,
) -> Result<Option<SessionId>, HttpError> {
    raw.map(|sid| state.gateway.session(sid))
        .transpose()
        .map_err(|e| HttpError::Core(id.cloned(), e))
}

/// Sends a request to the backend. On SSE the body stream owns the call (see
/// [`sse::request_stream`]); on JSON this handler's future does, with the same effect when the
/// client disconnects.
async fn forward(
    state: &AppState,
    delivery: Delivery,
    msg: &Message<'_>,
    bytes: &Bytes,
    id: Option<RequestId>,
    session: Option<SessionId>,
) -> Response {
    match delivery {
        Delivery::Json => {
            let call = Call {
                session: session.as_ref(),
                msg,
                stream: None,
            };
            match state.gateway.request(call).await {
                Ok(body) => json_response(body),
                Err(e) => HttpError::Core(id, e).into_response(),
            }
        }
        Delivery::Sse => {
            let gateway = state.gateway.clone();
            let bytes = bytes.clone();
            let (tx, rx) = mpsc::channel(REQUEST_STREAM_QUEUE);
            let call = async move {
                // The bytes parsed once already; parsing again inside the owned future avoids
                // copying the payload out of the body buffer.
                let result = match Message::parse(&bytes) {
                    Ok(msg) => {
                        let call = Call {
                            session: session.as_ref(),
                            msg: &msg,
                            stream: Some(tx),
                        };
                        gateway.request(call).await
                    }
                    Err(_) => Err(CoreError::UnexpectedResponse),
                };
                result.unwrap_or_else(|e| {
                    let failure = HttpError::Core(id, e);
                    let (_, id, err) = failure.parts();
                    encode_error(id, &err)
                })
            };
            sse::request_stream(call, Some(rx), state.config.keep_alive)
        }
    }
}

fn answer(state: &AppState, delivery: Delivery, body: Vec<u8>) -> Response {
    match delivery {
        Delivery::Json => json_response(body),
        Delivery::Sse => {
            sse::request_stream(std::future::ready(body), None, state.config.keep_alive)
        }
    }
}

fn json_response(body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, HttpError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(HttpError::PayloadTooLarge(limit));
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            HttpError::PayloadTooLarge(limit)
        } else {
            HttpError::Parse(switchboard_wire::ParseError {
                id: None,
                error: switchboard_wire::ErrorObject::new(
                    switchboard_wire::codes::PARSE_ERROR,
                    "Parse error: request body could not be read",
                ),
            })
        }
    })
}
