//! Streamable HTTP (Legacy semantics) at `/mcp`.

use axum::body::Body;
use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use switchboard_core::{CoreError, Exchange, Principal, SessionId, REQUEST_STREAM_QUEUE};
use switchboard_wire::classify::{classify, Era};
use switchboard_wire::{encode_error, method, Message, MessageKind, RequestId};
use tokio::sync::mpsc;

use crate::error::HttpError;
use crate::headers::{self, Delivery};
use crate::hop::{self, Forward};
use crate::{sse, AppState};

/// POST: one JSON-RPC message in, exactly one answer out (here, or from the replica that
/// serves its session: `hop`).
pub(crate) async fn post(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve_post(&state, &caller, &uri, &headers, body).await
}

/// The POST itself, for the router's handler above and for `direct` (which skips the router).
pub(crate) async fn serve_post(
    state: &AppState,
    caller: &Arc<Principal>,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let (delivery, bytes) = match read_post(state, headers, body).await {
        Ok(read) => read,
        Err(e) => return e.into_response(),
    };
    match handle_post(state, caller, headers, delivery, &bytes).await {
        Ok(answer) => answer,
        Err(HttpError::Core(id, CoreError::ServedElsewhere { at, gone })) => {
            let forward = Forward {
                method: Method::POST,
                path: path_of(uri),
                headers,
                body: bytes,
            };
            // Boxed: the hop's state would otherwise be part of every POST's future.
            Box::pin(hop::serve_elsewhere(state, (&at, gone), forward, id)).await
        }
        Err(e) => e.into_response(),
    }
}

/// The request line's path and query, as forwarded.
fn path_of(uri: &Uri) -> &str {
    uri.path_and_query().map_or("/mcp", |p| p.as_str())
}

/// A POST's header checks and its body.
async fn read_post(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Delivery, Bytes), HttpError> {
    headers::refuse_duplicates(headers)?;
    let delivery = headers::delivery(headers)?;
    headers::require_json(headers)?;
    let bytes = read_body(headers, body, state.config.max_body_bytes).await?;
    Ok((delivery, bytes))
}

/// GET: the session's listen stream (server-initiated messages), resumable with
/// `Last-Event-ID`. At most one per session: a new GET replaces the previous stream.
pub(crate) async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    match open_listen(&state, &caller, path_of(&uri), &headers).await {
        Ok(stream) => stream,
        Err(HttpError::Core(_, CoreError::ServedElsewhere { at, gone })) => {
            let forward = Forward {
                method: Method::GET,
                path: path_of(&uri),
                headers: &headers,
                body: Bytes::new(),
            };
            hop::serve_elsewhere(&state, (&at, gone), forward, None).await
        }
        Err(e) => e.into_response(),
    }
}

async fn open_listen(
    state: &AppState,
    caller: &Principal,
    path: &str,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    headers::refuse_duplicates(headers)?;
    refuse_modern_stream_methods(headers)?;
    if !headers::accepts_sse(headers) {
        return Err(HttpError::NotAcceptable);
    }
    let sid = headers::session_id(headers).ok_or(HttpError::MissingSession)?;
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let stream = match state
        .gateway
        .sessions()
        .open_listen(sid, caller, last)
        .await
    {
        // Its events are in another replica's memory: resumed there when it answers
        // (`hop::resume_elsewhere`), else this stream starts afresh here.
        Err(CoreError::StreamElsewhere(at)) => {
            if let Some(resumed) = hop::resume_elsewhere(state, &at, path, headers).await {
                return Ok(resumed);
            }
            state
                .gateway
                .sessions()
                .open_listen(sid, caller, None)
                .await
        }
        opened => opened,
    }
    .map_err(|e| HttpError::Core(None, e))?;
    let (gateway, sid, generation) = (state.gateway.clone(), sid.to_owned(), stream.generation);
    let detach = sse::OnDrop::new(move || gateway.sessions().close_listen(&sid, generation));
    Ok(sse::listen_stream(
        stream,
        state.gateway.session_store().listen_id_suffix(),
        detach,
        state.config.keep_alive,
        &state.draining,
    ))
}

/// DELETE: ends the session named by `Mcp-Session-Id`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(e) =
        headers::refuse_duplicates(&headers).and_then(|()| refuse_modern_stream_methods(&headers))
    {
        return e.into_response();
    }
    let result = match headers::session_id(&headers) {
        None => Err(HttpError::MissingSession),
        Some(sid) => state
            .gateway
            .sessions()
            .end(sid, &caller)
            .await
            .map_err(|e| HttpError::Core(None, e)),
    };
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(HttpError::Core(_, CoreError::ServedElsewhere { at, gone })) => {
            let forward = Forward {
                method: Method::DELETE,
                path: path_of(&uri),
                headers: &headers,
                body: Bytes::new(),
            };
            hop::serve_elsewhere(&state, (&at, gone), forward, None).await
        }
        Err(e) => e.into_response(),
    }
}

/// 2026-07-28 has no GET stream and no sessions to DELETE: a sessionless GET/DELETE that
/// declares a Modern version gets 405 with `Allow: POST`. A version this endpoint does not
/// serve at all gets 400, as on POST (the spec's MUST holds for every request).
fn refuse_modern_stream_methods(headers: &HeaderMap) -> Result<(), HttpError> {
    let Some(value) = headers.get(headers::PROTOCOL_VERSION) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    if switchboard_wire::version::is_modern(text) {
        if headers::session_id(headers).is_none() {
            return Err(HttpError::MethodNotAllowed("POST"));
        }
        return Ok(());
    }
    headers::check_protocol_version(headers)
}

async fn handle_post(
    state: &AppState,
    caller: &Arc<Principal>,
    headers: &HeaderMap,
    delivery: Delivery,
    bytes: &Bytes,
) -> Result<Response, HttpError> {
    let msg = Message::parse_client(bytes).map_err(HttpError::Parse)?;
    // Decided per request, before anything reads a session id (invariant 4).
    let version_header = headers
        .get(headers::PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    match classify(&msg, version_header) {
        Err(e) => return Err(HttpError::Rpc(msg.id.clone(), e)),
        Ok(Era::Modern(_)) => {
            return crate::modern::handle(state, caller, headers, &msg, bytes, delivery).await
        }
        Ok(Era::Legacy) => {}
    }
    headers::check_protocol_version(headers)?;
    let gateway = &state.gateway;
    let session = headers::session_id(headers);
    match (msg.kind, msg.method, msg.id.clone()) {
        (MessageKind::Response, ..) => {
            // Only a per-session backend ever sends this client a request; an answer is
            // accepted only for a request that session's own backend actually sent.
            let sid = resolve(state, caller, session, None)
                .await?
                .ok_or(HttpError::ClientResponse)?;
            gateway
                .sessions()
                .client_response(&sid, &msg)
                .await
                .map_err(|e| match e {
                    // Asked by another replica: answered there (`hop`).
                    e @ CoreError::ServedElsewhere { .. } => HttpError::Core(None, e),
                    _ => HttpError::ClientResponse,
                })?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        (MessageKind::Notification, ..) => {
            let sid = resolve(state, caller, session, None).await?;
            gateway
                .notify(caller, sid.as_ref(), &msg)
                .await
                .map_err(|e| HttpError::Core(None, e))?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        (MessageKind::Request, Some(method::INITIALIZE), Some(id)) => {
            let init = gateway.initialize(caller, &id, &msg).await;
            let init = init.map_err(|e| HttpError::Core(Some(id), e))?;
            let mut response = answer(delivery, init.response);
            if let Ok(v) = HeaderValue::from_str(init.session.as_str()) {
                response.headers_mut().insert(headers::SESSION_ID, v);
            }
            Ok(response)
        }
        (MessageKind::Request, _, id) => {
            let sid = resolve(state, caller, session, id.as_ref()).await?;
            // Delivery (a stream wherever something may travel before the answer; the client
            // declared it accepts both) and an early denial: decided in core.
            let exchange = Exchange::legacy(caller, sid.as_ref(), &msg, None);
            let plan = gateway
                .plan(&exchange, matches!(delivery, Delivery::Sse), |_| None)
                .await
                .map_err(|e| HttpError::Core(id.clone(), e))?;
            let delivery = if plan.stream {
                Delivery::Sse
            } else {
                Delivery::Json
            };
            Ok(forward(state, caller, delivery, &msg, bytes, id, sid).await)
        }
    }
}

/// The caller's session, if it named one: unknown ids, and other principals' sessions, are
/// 404 (echoing `id` when given).
async fn resolve(
    state: &AppState,
    caller: &Principal,
    raw: Option<&str>,
    id: Option<&RequestId>,
) -> Result<Option<SessionId>, HttpError> {
    let Some(sid) = raw else {
        return Ok(None);
    };
    match state.gateway.sessions().resolve(sid, caller).await {
        Ok(session) => Ok(Some(session)),
        Err(e) => Err(HttpError::Core(id.cloned(), e)),
    }
}

/// Sends a request to the backend. On SSE the body stream owns the call (see
/// [`sse::request_stream`]); on JSON this handler's future does, with the same effect when the
/// client disconnects.
async fn forward(
    state: &AppState,
    caller: &Arc<Principal>,
    delivery: Delivery,
    msg: &Message<'_>,
    bytes: &Bytes,
    id: Option<RequestId>,
    session: Option<SessionId>,
) -> Response {
    match delivery {
        Delivery::Json => {
            let call = Exchange::legacy(caller, session.as_ref(), msg, None);
            match state.gateway.handle(call).await {
                Ok(answer) => json_response(answer.body),
                Err(e) => HttpError::Core(id, e).into_response(),
            }
        }
        Delivery::Sse => {
            let gateway = state.gateway.clone();
            let bytes = bytes.clone();
            let caller = caller.clone();
            let (tx, rx) = mpsc::channel(REQUEST_STREAM_QUEUE);
            let stream_id = id.clone();
            let call = async move {
                // The bytes parsed once already; parsing again inside the owned future avoids
                // copying the payload out of the body buffer.
                let result = match Message::parse(&bytes) {
                    Ok(msg) => {
                        let call = Exchange::legacy(&caller, session.as_ref(), &msg, Some(tx));
                        gateway.handle(call).await.map(|a| a.body)
                    }
                    Err(_) => Err(CoreError::UnexpectedResponse),
                };
                result.unwrap_or_else(|e| {
                    let failure = HttpError::Core(id, e);
                    let (_, id, err) = failure.parts();
                    encode_error(id, &err)
                })
            };
            sse::request_stream(call, Some(rx), state.config.keep_alive, stream_id.as_ref())
        }
    }
}

fn answer(delivery: Delivery, body: Vec<u8>) -> Response {
    match delivery {
        Delivery::Json => json_response(body),
        Delivery::Sse => sse::answer_stream(body),
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

/// Reads a request body of at most `limit` bytes.
///
/// An oversized body is *drained* (discarded, within a budget and a deadline) before the 413
/// goes out: closing a connection with unread request bytes makes the kernel reset it, and the
/// client would see a reset instead of the 413. Bodies declared beyond the budget, or sent with
/// `Expect: 100-continue` (the client waits for our answer before sending), are refused
/// without reading.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, HttpError> {
    use http_body_util::BodyExt;
    let limit_u64 = limit as u64;
    let budget = limit_u64.saturating_mul(8).clamp(1 << 20, 64 << 20);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let expects_continue = headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    let mut over = declared.is_some_and(|n| n > limit_u64);
    if over && (expects_continue || declared.is_some_and(|n| n > budget)) {
        return Err(HttpError::PayloadTooLarge(limit));
    }
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    let mut seen: u64 = 0;
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| ())?.into_data() else {
                continue;
            };
            seen += data.len() as u64;
            if !over && buf.len() + data.len() <= limit {
                buf.extend_from_slice(&data);
            } else {
                over = true;
                buf.clear();
                if seen > budget {
                    break;
                }
            }
        }
        Ok::<(), ()>(())
    };
    let unreadable = || {
        HttpError::Parse(switchboard_wire::ParseError {
            id: None,
            error: switchboard_wire::ErrorObject::new(
                switchboard_wire::codes::PARSE_ERROR,
                "Parse error: request body could not be read",
            ),
        })
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(())) if !over => Ok(buf.freeze()),
        Ok(Ok(())) | Err(_) if over => Err(HttpError::PayloadTooLarge(limit)),
        _ => Err(unreadable()),
    }
}
