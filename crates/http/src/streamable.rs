//! Streamable HTTP (Legacy semantics) at `/mcp`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use switchboard_core::CoreError;
use switchboard_wire::{encode_error, method, Message, MessageKind, RequestId};

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

/// GET: the listen stream is not offered yet, which the spec allows with 405.
pub(crate) async fn get() -> Response {
    HttpError::MethodNotAllowed("POST, DELETE").into_response()
}

/// DELETE: ends the session named by `Mcp-Session-Id`.
pub(crate) async fn delete(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let result = match headers::session_id(&headers) {
        None => Err(HttpError::MissingSession),
        Some(sid) => state
            .gateway
            .end_session(sid)
            .map_err(|e| HttpError::Core(None, e)),
    };
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
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
    headers::check_protocol_version(headers)?;
    let gateway = &state.gateway;
    let session = headers::session_id(headers);
    match (msg.kind, msg.method, msg.id.clone()) {
        (MessageKind::Response, ..) => Err(HttpError::ClientResponse),
        (MessageKind::Notification, ..) => {
            if let Some(sid) = session {
                gateway.session(sid).map_err(|e| HttpError::Core(None, e))?;
            }
            gateway
                .notify(&msg)
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
            if let Some(sid) = session {
                gateway
                    .session(sid)
                    .map_err(|e| HttpError::Core(id.clone(), e))?;
            }
            Ok(forward(state, delivery, &msg, &bytes, id).await)
        }
    }
}

/// Sends a request to the backend. On SSE the body stream owns the call (see
/// [`sse::single_answer`]); on JSON this handler's future does, with the same effect when the
/// client disconnects.
async fn forward(
    state: &AppState,
    delivery: Delivery,
    msg: &Message<'_>,
    bytes: &Bytes,
    id: Option<RequestId>,
) -> Response {
    match delivery {
        Delivery::Json => match state.gateway.request(msg).await {
            Ok(body) => json_response(body),
            Err(e) => HttpError::Core(id, e).into_response(),
        },
        Delivery::Sse => {
            let gateway = state.gateway.clone();
            let bytes = bytes.clone();
            let call = async move {
                // The bytes parsed once already; parsing again inside the owned future avoids
                // copying the payload out of the body buffer.
                let result = match Message::parse(&bytes) {
                    Ok(msg) => gateway.request(&msg).await,
                    Err(_) => Err(CoreError::UnexpectedResponse),
                };
                result.unwrap_or_else(|e| {
                    let failure = HttpError::Core(id, e);
                    let (_, id, err) = failure.parts();
                    encode_error(id, &err)
                })
            };
            sse::single_answer(call, state.config.keep_alive)
        }
    }
}

fn answer(state: &AppState, delivery: Delivery, body: Vec<u8>) -> Response {
    match delivery {
        Delivery::Json => json_response(body),
        Delivery::Sse => sse::single_answer(std::future::ready(body), state.config.keep_alive),
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

async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, HttpError> {
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
