//! The 2024-11-05 HTTP+SSE transport: `GET /sse` opens a session whose stream carries every
//! message for it; `POST /messages?session_id=<id>` takes the client's messages and answers
//! `202 Accepted` at once.
//!
//! Routing is the core's, exactly as on `/mcp`: every request goes through
//! `Gateway::handle` (a fresh route key, the client's id restored byte for byte), in a task
//! the session owns ([`Gateway::spawn_sse`]), and its answer and progress are queued on that
//! session's stream only ([`Gateway::deliver_sse_answer`]). Nothing here keeps a message for a client
//! that is not connected: the session and its stream live and die together.
//!
//! The checks before the 202 are /mcp's: Content-Type, body limit, the wire parser (forbidden
//! ids, batches, malformed JSON → 400 with the spec-shaped error), `MCP-Protocol-Version` when
//! sent, unknown session → 404 -32001, client-posted responses → 400 unless, in per-session
//! mode, they answer a request of the session's own process (then routed back to it, 202).
//!
//! In per-session mode the session's `initialize` starts its own process (claimed, so once per
//! session, and run as one of the session's tasks: the POST gets its 202 at once).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream;
use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant, Interval};
use tracing::debug;

use switchboard_core::stream_queue::QueueRx;
use switchboard_core::{
    CoreError, Exchange, Gateway, ListenEvent, Principal, SessionId, SseInit, SseInitClaim,
    REQUEST_STREAM_QUEUE,
};
use switchboard_wire::{encode_error, method, sse, Message, MessageKind, RequestId};

use crate::error::HttpError;
use crate::sse::OnDrop;
use crate::streamable::read_body;
use crate::{headers, AppState};

/// The path clients POST to (after the configured or forwarded prefix).
const MESSAGES_PATH: &str = "/messages";
/// Longest accepted prefix: it goes into every `endpoint` event.
const MAX_PREFIX: usize = 256;

/// GET `/sse`: a new session owned by the caller, announced by the `endpoint` event, then its
/// messages.
pub(crate) async fn open(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    headers: HeaderMap,
) -> Response {
    open_stream(&state, &caller, &headers).unwrap_or_else(IntoResponse::into_response)
}

fn open_stream(
    state: &AppState,
    caller: &Principal,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    if !headers::accepts_sse(headers) {
        return Err(HttpError::NotAcceptable);
    }
    let session = state
        .gateway
        .sse()
        .open(caller)
        .map_err(|e| HttpError::Core(None, e))?;
    let prefix = endpoint_prefix(&state.config, headers);
    let mut endpoint = format!("{prefix}{MESSAGES_PATH}?session_id={}", session.id.as_str());
    // With replicas the stream is this one's: a POST reaching another is forwarded here.
    if let Some(replica) = state.gateway.session_store().replica_id() {
        endpoint.push_str("&replica=");
        endpoint.push_str(replica);
    }
    let keep_alive = state.config.keep_alive;
    let (gateway, id) = (state.gateway.clone(), session.id.clone());
    // The stream is the session: when the client goes away, the session ends with it.
    let close = OnDrop::new(move || gateway.sse().close(&id));
    let st = StreamState {
        endpoint: Some(Bytes::from(sse::frame(
            "endpoint",
            None,
            endpoint.as_bytes(),
        ))),
        events: session.events,
        ticker: interval_at(Instant::now() + keep_alive, keep_alive),
        drained: crate::sse::drained(&state.draining),
        draining: false,
        gateway: state.gateway.clone(),
        session: session.id,
        _close: close,
    };
    let body = stream::unfold(st, |mut st| async move {
        if let Some(endpoint) = st.endpoint.take() {
            return Some((Ok::<_, Infallible>(endpoint), st));
        }
        next_frame(&mut st).await.map(|frame| (Ok(frame), st))
    });
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// While shutting down, how often a stream that still waits for answers checks whether its
/// session's requests are done.
const DRAIN_CHECK: Duration = Duration::from_millis(50);

struct StreamState<G> {
    endpoint: Option<Bytes>,
    events: QueueRx<ListenEvent>,
    ticker: Interval,
    drained: crate::sse::Drained,
    /// Shutdown has begun: the stream ends as soon as its session has no request running, so
    /// it holds the grace only for answers still to come, never for idle listening.
    draining: bool,
    gateway: std::sync::Arc<Gateway>,
    session: SessionId,
    _close: G,
}

/// The stream's next frame; `None` ends it.
async fn next_frame<G>(st: &mut StreamState<G>) -> Option<Bytes> {
    loop {
        if st.draining && !st.gateway.sse().streams().in_flight(&st.session) {
            return None;
        }
        tokio::select! {
            biased;
            () = &mut st.drained, if !st.draining => {
                st.draining = true;
                st.ticker = tokio::time::interval(DRAIN_CHECK);
            }
            // Ends when the session ends (stream closed elsewhere, TTL, eviction, shutdown).
            e = st.events.recv() => return e.map(|e| message(&e)),
            _ = st.ticker.tick() => {
                if !st.draining {
                    // An open stream keeps its session alive.
                    st.gateway.sse().streams().keep_alive(&st.session);
                    return Some(Bytes::from_static(sse::KEEP_ALIVE));
                }
            }
        }
    }
}

/// HTTP+SSE streams cannot be resumed, so events carry no `id:`.
fn message(e: &ListenEvent) -> Bytes {
    Bytes::from(sse::message(&e.data))
}

/// POST `/messages?session_id=<id>` (`sessionId` accepted too).
pub(crate) async fn post(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Principal>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bytes = match read_post(&state, &uri, &headers, body).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    match handle_post(&state, &caller, &uri, &headers, &bytes).await {
        Ok(()) => (
            StatusCode::ACCEPTED,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "Accepted",
        )
            .into_response(),
        Err(HttpError::Core(id, CoreError::ServedElsewhere { at, gone })) => {
            let forward = crate::hop::Forward {
                method: axum::http::Method::POST,
                path: uri.path_and_query().map_or(MESSAGES_PATH, |p| p.as_str()),
                headers: &headers,
                body: bytes,
            };
            crate::hop::serve_elsewhere(&state, (&at, gone), forward, id).await
        }
        Err(e) => e.into_response(),
    }
}

/// A POST's header checks and its body.
async fn read_post(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, HttpError> {
    headers::refuse_duplicates(headers)?;
    session_param(uri.query()).ok_or(HttpError::MissingSessionParam)?;
    headers::require_json(headers)?;
    read_body(headers, body, state.config.max_body_bytes).await
}

async fn handle_post(
    state: &AppState,
    caller: &Arc<Principal>,
    uri: &Uri,
    headers: &HeaderMap,
    bytes: &Bytes,
) -> Result<(), HttpError> {
    let raw_session = session_param(uri.query()).ok_or(HttpError::MissingSessionParam)?;
    let msg = Message::parse_client(bytes).map_err(HttpError::Parse)?;
    headers::check_protocol_version(headers)?;
    let gateway = &state.gateway;
    let session = match gateway.sse().streams().session(raw_session, caller) {
        Ok(session) => session,
        Err(e) => return Err(not_held(state, uri, &msg, e).await),
    };
    if msg.kind == MessageKind::Response {
        // Accepted only for a request this session's backend or the gateway actually sent.
        return gateway
            .sessions()
            .client_response(&session, &msg)
            .await
            .map_err(|_| HttpError::ClientResponse);
    }
    match (msg.method, msg.id.clone()) {
        (_, None) => gateway
            .notify(caller, Some(&session), &msg)
            .await
            .map_err(|e| HttpError::Core(None, e)),
        (Some(method::INITIALIZE), Some(id)) => {
            let init = gateway.sse().initialize(caller, &session, &id, &msg);
            match init.map_err(|e| HttpError::Core(Some(id.clone()), e))? {
                SseInit::Queued => Ok(()),
                SseInit::Claimed(claim) => {
                    let task = run_initialize(
                        gateway.clone(),
                        caller.clone(),
                        claim,
                        bytes.clone(),
                        id.clone(),
                    );
                    // Refused (busy): the task is dropped unrun, and its claim released with it.
                    gateway
                        .sse()
                        .streams()
                        .spawn(&session, task)
                        .map_err(|e| HttpError::Core(Some(id), e))
                }
            }
        }
        (_, Some(id)) => {
            // A denial is a plain 403 on the POST, as on /mcp, rather than an error that
            // arrives later on the stream.
            let exchange = Exchange::legacy(caller, Some(&session), &msg, None);
            gateway
                .plan(&exchange, true, |_| None)
                .await
                .map_err(|e| HttpError::Core(Some(id.clone()), e))?;
            let task = run_request(
                gateway.clone(),
                caller.clone(),
                session.clone(),
                bytes.clone(),
                id.clone(),
            );
            gateway
                .sse()
                .streams()
                .spawn(&session, task)
                .map_err(|e| HttpError::Core(Some(id), e))
        }
    }
}

/// One request, run by a task of its session: progress and then the answer go to the
/// session's stream, in the backend's order. If the session ends first, the task is aborted
/// (withdrawing the call upstream); an answer that finds the session gone is dropped.
async fn run_request(
    gateway: Arc<Gateway>,
    caller: Arc<Principal>,
    session: SessionId,
    bytes: Bytes,
    id: RequestId,
) {
    // Parsed once already; parsing again here lets the task own the buffer, not a copy.
    let Ok(msg) = Message::parse(&bytes) else {
        return;
    };
    let (tx, mut notes) = mpsc::channel(REQUEST_STREAM_QUEUE);
    let call = gateway.handle(Exchange::legacy(&caller, Some(&session), &msg, Some(tx)));
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            biased;
            Some(note) = notes.recv() => {
                gateway.sse().streams().deliver_progress(&session, note);
            }
            result = &mut call => break result,
        }
    };
    // Progress written before the answer was queued before the answer resolved.
    while let Ok(note) = notes.try_recv() {
        gateway.sse().streams().deliver_progress(&session, note);
    }
    let answer = match result {
        Ok(answer) => answer.body,
        // The client cancelled it: per the cancellation rules no response follows.
        Err(CoreError::Cancelled) => return,
        Err(e) => {
            let failure = HttpError::Core(Some(id.clone()), e);
            let (_, id, err) = failure.parts();
            encode_error(id, &err)
        }
    };
    if !gateway
        .sse()
        .streams()
        .deliver_answer(&session, &id, Bytes::from(answer))
    {
        debug!(?session, "answer for an ended HTTP+SSE session dropped");
    }
}

/// Per-session mode: the session's `initialize`, run by a task of its session (starting a
/// process takes a while, and the session owns that work like any request's): its own
/// process is started and handshaken, and the backend's answer, or the failure, goes to the
/// session's stream.
async fn run_initialize(
    gateway: Arc<Gateway>,
    caller: Arc<Principal>,
    claim: SseInitClaim,
    bytes: Bytes,
    id: RequestId,
) {
    let session = claim.session().clone();
    let answer = match Message::parse(&bytes) {
        Ok(msg) => gateway
            .sse()
            .start_own(&caller, claim, &id, &msg)
            .await
            .unwrap_or_else(|e| {
                let failure = HttpError::Core(Some(id.clone()), e);
                let (_, id, err) = failure.parts();
                encode_error(id, &err)
            }),
        // Parsed once already, so unreachable; still one answer, and the claim released.
        Err(_) => crate::error::stream_task_failed(Some(&id)),
    };
    if !gateway
        .sse()
        .streams()
        .deliver_answer(&session, &id, Bytes::from(answer))
    {
        debug!(
            ?session,
            "initialize answer for an ended HTTP+SSE session dropped"
        );
    }
}

/// A POST for a session this replica does not hold: forwarded to the replica whose stream
/// it is (`ServedElsewhere`, when the endpoint URL names another registered one). Else a
/// response answers a request of this session's own backend (per-session mode) or of the
/// gateway itself (`ask_client`, any mode): in shared mode an unknown session is just another
/// unexpected response; anything else is the 404.
async fn not_held(state: &AppState, uri: &Uri, msg: &Message<'_>, e: CoreError) -> HttpError {
    let gateway = &state.gateway;
    if let Err(elsewhere) = gateway
        .session_store()
        .sse_home(replica_param(uri.query()))
        .await
    {
        return HttpError::Core(msg.id.clone(), elsewhere);
    }
    match msg.kind == MessageKind::Response && !gateway.sse().has_own_backends() {
        true => HttpError::ClientResponse,
        false => HttpError::Core(msg.id.clone(), e),
    }
}

/// The `replica` query parameter an endpoint URL carries with replicas.
fn replica_param(query: Option<&str>) -> Option<&str> {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "replica")
        .map(|(_, v)| v)
}

/// The `session_id` (or `sessionId`) query parameter. Ids are hex, so no percent-decoding is
/// needed: an encoded value simply names no session.
fn session_param(query: Option<&str>) -> Option<&str> {
    let pairs = || {
        query
            .unwrap_or_default()
            .split('&')
            .filter_map(|pair| pair.split_once('='))
    };
    pairs()
        .find(|(k, _)| *k == "session_id")
        .or_else(|| pairs().find(|(k, _)| *k == "sessionId"))
        .map(|(_, v)| v)
}

/// The prefix for the advertised `/messages` URI: the client's `X-Forwarded-Prefix` when the
/// operator trusts it and it is a clean path, else the configured one.
fn endpoint_prefix<'a>(
    config: &'a crate::HttpConfig,
    headers: &HeaderMap,
) -> std::borrow::Cow<'a, str> {
    if config.trust_forwarded_prefix {
        if let Some(raw) = headers.get("x-forwarded-prefix") {
            match raw.to_str().ok().and_then(clean_prefix) {
                Some(p) => return p.into(),
                None => debug!("ignoring an invalid X-Forwarded-Prefix"),
            }
        }
    }
    config.endpoint_prefix.as_str().into()
}

/// Validates and normalises an endpoint prefix: empty, or an absolute path (`/a/b`) of plain
/// path characters, without a trailing slash. Refuses anything that could make the advertised
/// URI leave this origin (`//host`, `\`, a scheme), add a query or fragment, or break the SSE
/// frame.
pub fn clean_prefix(raw: &str) -> Option<String> {
    let p = raw.trim().trim_end_matches('/');
    if p.is_empty() {
        return Some(String::new());
    }
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%/".contains(&b);
    let ok =
        p.len() <= MAX_PREFIX && p.starts_with('/') && !p.starts_with("//") && p.bytes().all(plain);
    ok.then(|| p.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_parameter_in_either_spelling() {
        assert_eq!(session_param(Some("session_id=abc")), Some("abc"));
        assert_eq!(session_param(Some("x=1&sessionId=def")), Some("def"));
        assert_eq!(
            session_param(Some("sessionId=b&session_id=a")),
            Some("a"),
            "snake_case wins"
        );
        assert_eq!(session_param(Some("session_id=")), Some(""));
        assert_eq!(session_param(Some("session=abc")), None);
        assert_eq!(session_param(None), None);
    }

    #[test]
    fn prefixes() {
        assert_eq!(clean_prefix("").as_deref(), Some(""));
        assert_eq!(clean_prefix("/").as_deref(), Some(""));
        assert_eq!(clean_prefix("/gw/").as_deref(), Some("/gw"));
        assert_eq!(
            clean_prefix(" /a/b-c_d.e~f ").as_deref(),
            Some("/a/b-c_d.e~f")
        );
        for bad in [
            "gw",
            "//evil.example",
            "/a?x=1",
            "/a#f",
            "/a\\b",
            "http://x",
            "/a b",
            "/a\nb",
            "/\u{e9}",
        ] {
            assert_eq!(clean_prefix(bad), None, "{bad:?}");
        }
        assert_eq!(clean_prefix(&format!("/{}", "a".repeat(MAX_PREFIX))), None);
    }
}
