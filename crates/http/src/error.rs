//! The one place where failures become HTTP statuses and JSON-RPC error objects.
//!
//! | failure                                   | HTTP | JSON-RPC                    |
//! |-------------------------------------------|------|-----------------------------|
//! | malformed JSON                            | 400  | -32700, no id               |
//! | batch, bad shape, forbidden id            | 400  | -32600 (id when readable)   |
//! | nested deeper than `MAX_CLIENT_DEPTH`     | 400  | -32600, id echoed           |
//! | `_meta.progressToken` not string/number   | 400  | -32602, id echoed           |
//! | client-posted JSON-RPC response           | 400  | -32600, no id               |
//! | duplicate key anywhere (in `params`)      | 400  | -32600 (-32602), id echoed  |
//! | lone surrogate / float overflow anywhere  | 400  | -32700, id echoed unless in it |
//! | repeated `Content-Type`/`Mcp-*`/`Last-Event-ID` | 400 | -32600, no id         |
//! | unknown `MCP-Protocol-Version` (any verb) | 400  | -32600 + supported versions |
//! | `Mcp-Session-Id` missing where required   | 400  | -32600                      |
//! | unknown / expired session                 | 404  | -32001 "Session not found"  |
//! | `Accept` lacks JSON or SSE                | 406  | -32600                      |
//! | body not `application/json`               | 415  | -32600                      |
//! | body over the limit                       | 413  | -32600                      |
//! | GET/other method not offered              | 405  | -32600                      |
//! | `Host`/`Origin` not allowed (rebinding)   | 403  | -32600, no id               |
//! | replica hop header that does not verify   | 403  | -32600, no id               |
//! | replica serving the session not answering | 503  | -32603 + `Retry-After`      |
//! | replica that issued a request's state gone | 400 | -32602, `unknown_request_state` |
//! | no / invalid bearer credential            | 401  | -32600, no id + `WWW-Authenticate` |
//! | denied by the authorization policy        | 403  | 403, id echoed (kind-only message) |
//! | rate limit exhausted                      | 429  | 429 + `data.retryAfterSeconds`, `Retry-After` |
//! | caller's MRTR share in use (`--mrtr-per-principal`) | 429 | 429 + `data.retryAfterSeconds`, `Retry-After` |
//! | session table full                        | 503  | -32603                      |
//! | every dedicated MRTR process in use       | 503  | -32603                      |
//! | every warm Modern partition in use        | 503  | -32603                      |
//! | too many POSTs in flight                  | 503  | -32603, no id               |
//! | backend needs the caller's OAuth consent  | 200  | -32042 + `data.elicitations[]` (URL mode) |
//! | backend gone / write queue full           | 502 / 503 | -32603                 |
//! | backend's circuit breaker open            | 503 (aggregating: 200) | -32603 + `data.retryAfterSeconds`, `Retry-After` |
//! | deadline exceeded                         | 504  | -32000 (SSE: an error frame)|
//! | cancelled by the client / session ended   | 200  | -32800                      |
//! | Modern: header/envelope/version errors    | 400  | -32020/-32021/-32022/-32602 |
//! | Modern: method not found (incl. removed)  | 404  | -32601                      |
//! | Modern: other backend errors              | 200  | as the backend said         |
//! | subscribe/setLevel without a session      | 400  | -32600                      |
//! | per-session: request before `initialize`  | 400  | -32600 (HTTP+SSE: on the stream) |
//! | per-session: HTTP+SSE `initialize` again  | 400  | -32600, id echoed           |
//! | task-augmented, anonymous and sessionless | 400  | -32600, id echoed           |
//! | gateway-validated bad params (log level)  | 200  | -32602                      |
//! | aggregating: unknown or filtered name/URI | 200  | -32602 (URI in `data.uri`)  |
//! | aggregating: one backend failed           | as that failure | its code, "(backend X)" |
//! | aggregating: quarantined tool (`trust`)   | 200  | -32602, `data.backend`/`tool`/`approve` |
//! | `/messages` without `session_id`          | 400  | -32600                      |
//! | HTTP+SSE session at its in-flight limit   | 503  | -32603, id echoed           |
//! | every connection busy (`--max-connections`) | 503 | -32603, no id (connection closed) |

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use switchboard_core::BackendFault;
use switchboard_core::CoreError;
use switchboard_wire::{codes, encode_error, version, ErrorObject, ParseError, RequestId};

/// A request that ends in an error answer.
#[derive(Debug)]
pub(crate) enum HttpError {
    NotAcceptable,
    UnsupportedMediaType,
    PayloadTooLarge(usize),
    Parse(ParseError),
    UnsupportedProtocolVersion(String),
    /// A header the gateway reads was sent more than once (lowercase name).
    DuplicateHeader(String),
    ClientResponse,
    MissingSession,
    /// `POST /messages` (HTTP+SSE) without a `session_id` query parameter.
    MissingSessionParam,
    MethodNotAllowed(&'static str),
    /// A JSON-RPC error the gateway decided itself (classification, Modern header checks).
    Rpc(Option<RequestId>, ErrorObject),
    Forbidden(&'static str),
    /// Too many requests in flight (`--max-in-flight`).
    Busy,
    /// No valid credential: 401 with `WWW-Authenticate` naming the RFC 9728 document.
    Unauthorized {
        metadata_url: String,
        /// A credential was presented but rejected (`error="invalid_token"`).
        invalid_token: bool,
    },
    Core(Option<RequestId>, CoreError),
    /// The replica serving the request's session did not answer the hop (`hop`): retry.
    ReplicaUnreachable(Option<RequestId>),
    /// The replica that issued this request's state (a `requestState`, a question the client
    /// answers) is gone, and the state with it: the client starts the call again.
    ReplicaGone(Option<RequestId>),
}

impl HttpError {
    /// The status, the id to echo, and the JSON-RPC error for this failure.
    pub(crate) fn parts(&self) -> (StatusCode, Option<&RequestId>, ErrorObject) {
        use HttpError as E;
        let invalid = |m: &'static str| ErrorObject::new(codes::INVALID_REQUEST, m);
        match self {
            E::NotAcceptable => (
                StatusCode::NOT_ACCEPTABLE,
                None,
                invalid(
                    "Not Acceptable: Accept must include application/json and text/event-stream",
                ),
            ),
            E::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                invalid("Unsupported Media Type: Content-Type must be application/json"),
            ),
            E::PayloadTooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                invalid("Request body too large").with_data(json!({ "limitBytes": limit })),
            ),
            E::Parse(p) => (StatusCode::BAD_REQUEST, p.id.as_ref(), p.error.clone()),
            E::UnsupportedProtocolVersion(v) => (
                StatusCode::BAD_REQUEST,
                None,
                invalid("Bad Request: unsupported MCP-Protocol-Version")
                    .with_data(json!({ "supported": version::LEGACY, "requested": v })),
            ),
            E::DuplicateHeader(name) => (
                StatusCode::BAD_REQUEST,
                None,
                ErrorObject::new(
                    codes::INVALID_REQUEST,
                    format!("Bad Request: the {name} header must appear at most once"),
                )
                .with_data(json!({ "header": name })),
            ),
            E::ClientResponse => (
                StatusCode::BAD_REQUEST,
                None,
                invalid("Bad Request: no server request is awaiting a response from this client"),
            ),
            E::MissingSession => (
                StatusCode::BAD_REQUEST,
                None,
                invalid("Bad Request: Mcp-Session-Id header is required"),
            ),
            E::MissingSessionParam => (
                StatusCode::BAD_REQUEST,
                None,
                invalid("Bad Request: session_id query parameter is required"),
            ),
            E::MethodNotAllowed(_) => (
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                invalid("Method Not Allowed"),
            ),
            E::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    "Service unavailable: too many requests in flight",
                ),
            ),
            E::Forbidden(m) => (StatusCode::FORBIDDEN, None, invalid(m)),
            E::ReplicaUnreachable(id) => (
                StatusCode::SERVICE_UNAVAILABLE,
                id.as_ref(),
                ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    "Service unavailable: the replica serving this session did not answer; retry",
                ),
            ),
            E::ReplicaGone(id) => (
                StatusCode::BAD_REQUEST,
                id.as_ref(),
                ErrorObject::new(
                    codes::INVALID_PARAMS,
                    "Invalid or expired requestState: the replica that issued it is gone",
                )
                .with_data(json!({ "reason": "unknown_request_state" })),
            ),
            E::Unauthorized { .. } => (
                StatusCode::UNAUTHORIZED,
                None,
                invalid("Unauthorized: a valid bearer token is required"),
            ),
            E::Rpc(id, err) => (status_of(i64::from(err.code)), id.as_ref(), err.clone()),
            E::Core(id, e) => {
                let (status, err) = core_parts(e);
                (status, id.as_ref(), err)
            }
        }
    }
}

/// The whole HTTP answer to a connection refused at the connection bound, written raw before
/// any request is read (so no id) and followed by a close.
pub(crate) static TOO_MANY_CONNECTIONS: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| {
        let body = &*TOO_MANY_CONNECTIONS_BODY;
        let mut out = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    });

/// Its JSON-RPC body (also what an over-the-bound connection asking for anything but
/// `/healthz` gets).
pub(crate) static TOO_MANY_CONNECTIONS_BODY: std::sync::LazyLock<bytes::Bytes> =
    std::sync::LazyLock::new(|| {
        bytes::Bytes::from(encode_error(
            None,
            &ErrorObject::new(
                codes::INTERNAL_ERROR,
                "Service unavailable: too many connections",
            ),
        ))
    });

/// HTTP status of a Modern JSON-RPC error (mcp-wire.md §3.3): the envelope and header codes
/// are 400, method-not-found is 404 (its body tells it from a Legacy 404), anything else is
/// the handler's business and travels with 200.
/// The last event of a streamed request whose task failed inside the gateway (a panic): the
/// stream still ends with exactly one answer, a JSON-RPC internal error, rather than with no
/// answer at all (which a client could mistake for a stream it should resume).
pub(crate) fn stream_task_failed(id: Option<&RequestId>) -> Vec<u8> {
    encode_error(
        id,
        &ErrorObject::new(
            codes::INTERNAL_ERROR,
            "Internal error: the gateway failed while handling this request",
        ),
    )
}

pub(crate) fn status_of(code: i64) -> StatusCode {
    const BAD_REQUEST_CODES: [i32; 6] = [
        codes::HEADER_MISMATCH,
        codes::MISSING_CLIENT_CAPABILITY,
        codes::UNSUPPORTED_PROTOCOL_VERSION,
        codes::INVALID_PARAMS,
        codes::INVALID_REQUEST,
        codes::PARSE_ERROR,
    ];
    if code == i64::from(codes::METHOD_NOT_FOUND) {
        StatusCode::NOT_FOUND
    } else if BAD_REQUEST_CODES.iter().any(|c| i64::from(*c) == code) {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}

/// Answer to a request the client itself cancelled (or whose session ended): the HTTP request
/// still needs exactly one answer. Same value LSP uses; outside JSON-RPC's reserved range.
const REQUEST_CANCELLED: i32 = -32800;

/// JSON-RPC code for a policy denial (HTTP 403), as ToolHive's call gate answers.
pub(crate) const FORBIDDEN: i32 = 403;
/// JSON-RPC code for an exhausted rate limit (HTTP 429).
pub(crate) const RATE_LIMITED: i32 = 429;

/// A backend's failure, by the kind core classified it as.
fn backend_parts(e: &CoreError) -> (StatusCode, ErrorObject) {
    let internal = |m: String| ErrorObject::new(codes::INTERNAL_ERROR, m);
    // Per-user OAuth: the caller must authorize the gateway at the backend's authorization
    // server. A URL-mode elicitation (URLElicitationRequiredError); its message holds the
    // URL too, for a client that shows errors only.
    if let Some(consent) = e.consent() {
        return (StatusCode::OK, consent_error(consent));
    }
    match e.backend_fault().unwrap_or(BackendFault::Unavailable) {
        BackendFault::RemoteTimeout => (
            StatusCode::GATEWAY_TIMEOUT,
            ErrorObject::new(
                codes::REQUEST_TIMEOUT,
                "Request timed out at the remote server",
            ),
        ),
        BackendFault::Overloaded => (
            StatusCode::SERVICE_UNAVAILABLE,
            internal(format!("Backend overloaded: {e}")),
        ),
        // A caller the backend cannot act for (no token of its own), or a request for an
        // upstream session of someone else's: refused, as a policy denial is.
        BackendFault::NotPermitted => (
            StatusCode::FORBIDDEN,
            ErrorObject::new(FORBIDDEN, e.to_string()),
        ),
        BackendFault::Remote(text) => (
            StatusCode::BAD_GATEWAY,
            internal(format!("Backend unavailable: {text}")),
        ),
        _ => (
            StatusCode::BAD_GATEWAY,
            internal(format!("Backend unavailable: {e}")),
        ),
    }
}

/// JSON-RPC code of URLElicitationRequiredError (MCP 2025-11-25).
pub(crate) const URL_ELICITATION_REQUIRED: i32 = -32042;

/// The error asking for a caller's consent at a backend's authorization server.
fn consent_error(consent: &switchboard_core::oauth::Consent) -> ErrorObject {
    let message = format!(
        "Authorization required: backend {} needs you to authorize access; open {} and retry",
        consent.backend, consent.url
    );
    ErrorObject::new(URL_ELICITATION_REQUIRED, message.clone()).with_data(json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": consent.elicitation_id,
            "url": consent.url,
            "message": format!("Authorize Switchboard to use {} on your behalf", consent.backend),
        }]
    }))
}

/// A Modern (2026-07-28) request's answer when `e` asks for the caller's authorization: an
/// `input_required` result whose input request is a URL-mode elicitation (2026-07-28 has no
/// -32042); the client's retry of the request learns whether it was given.
pub(crate) fn modern_consent(id: Option<&RequestId>, e: &CoreError) -> Option<Vec<u8>> {
    let (id, consent) = (id?, e.consent()?);
    let result = json!({
        "resultType": "input_required",
        "inputRequests": {
            "authorization": {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "url": consent.url,
                    "message": format!(
                        "Authorize Switchboard to use {} on your behalf, then retry",
                        consent.backend
                    ),
                }
            }
        }
    });
    Some(switchboard_wire::encode_result(id, &result.to_string()))
}

fn core_parts(e: &CoreError) -> (StatusCode, ErrorObject) {
    let internal = |m: String| ErrorObject::new(codes::INTERNAL_ERROR, m);
    match e {
        CoreError::Forbidden(m) => (StatusCode::FORBIDDEN, ErrorObject::new(FORBIDDEN, *m)),
        CoreError::ParamHeaders(err) => (status_of(i64::from(err.code)), err.clone()),
        CoreError::RateLimited(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            ErrorObject::new(RATE_LIMITED, "Rate limit exceeded")
                .with_data(json!({ "retryAfterSeconds": secs })),
        ),
        // The caller's own share of the MRTR bridge, not the gateway's capacity.
        CoreError::BridgeShareExhausted { retry_after, .. }
        | CoreError::RelayShareExhausted { retry_after, .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            ErrorObject::new(RATE_LIMITED, e.to_string())
                .with_data(json!({ "retryAfterSeconds": retry_after })),
        ),
        // Reached only where no hop was possible (a forwarded request is never forwarded
        // again): for the client, no replica it can reach holds the session.
        CoreError::SessionNotFound
        | CoreError::ServedElsewhere { .. }
        | CoreError::StreamElsewhere(_) => (
            StatusCode::NOT_FOUND,
            ErrorObject::new(codes::SESSION_NOT_FOUND, "Session not found"),
        ),
        CoreError::TooManySessions(_)
        | CoreError::Store(_)
        | CoreError::SessionBusy(_)
        | CoreError::AnswersUnread(_)
        | CoreError::BridgeFull(_)
        | CoreError::TooManyPartitions(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, internal(e.to_string()))
        }
        // The caller's own quota, not the gateway's capacity: 429, like a rate limit.
        CoreError::TooManyPrincipalSessions(_)
        | CoreError::PartitionShare(_)
        | CoreError::TooManyListens(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            ErrorObject::new(RATE_LIMITED, e.to_string()),
        ),
        CoreError::Timeout(_) => (
            StatusCode::GATEWAY_TIMEOUT,
            ErrorObject::new(codes::REQUEST_TIMEOUT, format!("Request timed out: {e}")),
        ),
        CoreError::Backend(_) | CoreError::BackendInit(_) => backend_parts(e),
        // One backend of several: HTTP 200, as for its other failures (see `OfBackend`).
        CoreError::Unavailable {
            retry_in,
            aggregated,
            ..
        } => (
            if *aggregated {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            },
            internal(e.to_string()).with_data(json!({ "retryAfterSeconds": retry_in })),
        ),
        // A missing resource names its URI in `data` (SEP-2164), as a backend answers it.
        CoreError::UnknownName(what, uri) if what.starts_with("resource") => (
            StatusCode::OK,
            ErrorObject::new(codes::INVALID_PARAMS, format!("Invalid params: {e}"))
                .with_data(json!({ "uri": uri })),
        ),
        CoreError::UnknownName(..) => (
            StatusCode::OK,
            ErrorObject::new(codes::INVALID_PARAMS, format!("Invalid params: {e}")),
        ),
        // Said plainly (unlike a filtered name): the operator's own gate, and the caller (or
        // its operator) must learn what to approve.
        CoreError::Quarantined { backend, tool } => (
            StatusCode::OK,
            ErrorObject::new(codes::INVALID_PARAMS, format!("Invalid params: {e}")).with_data(
                json!({ "backend": backend.as_str(), "tool": tool, "quarantined": true }),
            ),
        ),
        // The same words as one backend's failure (never the backend's own text), naming
        // which backend of the set it was, and HTTP 200: the endpoint is fine, one of its
        // servers is not, and clients treat a 5xx as their transport failing (the Python
        // SDK 1.x ends its session on one, losing every other backend with it).
        CoreError::OfBackend(id, u) => {
            let (_, mut err) = core_parts(&CoreError::Backend(u.clone()));
            err.message = format!("{} (backend {id})", err.message).into();
            (StatusCode::OK, err)
        }
        CoreError::TimeoutOf(id, limit) => {
            let (_, mut err) = core_parts(&CoreError::Timeout(*limit));
            err.message = format!("{} (backend {id})", err.message).into();
            (StatusCode::OK, err)
        }
        // Details (names a backend listed) go to the log, not to every client.
        CoreError::Aggregation(_) | CoreError::ListsNotBuilt => (
            StatusCode::BAD_GATEWAY,
            internal("Backend unavailable: the merged list could not be built".to_owned()),
        ),
        // Nothing was sent; HTTP 200 (a client takes a 5xx for its transport failing).
        CoreError::ChangedMeanwhile => {
            (StatusCode::OK, internal(format!("Request not routed: {e}")))
        }
        CoreError::Unsupported(_) => (
            StatusCode::OK,
            ErrorObject::new(codes::METHOD_NOT_FOUND, format!("Method not found: {e}")),
        ),
        CoreError::Cancelled => (
            StatusCode::OK,
            ErrorObject::new(REQUEST_CANCELLED, "Request cancelled"),
        ),
        CoreError::SessionRequired(_)
        | CoreError::NotInitialized
        | CoreError::AlreadyInitialized => (
            StatusCode::BAD_REQUEST,
            ErrorObject::new(codes::INVALID_REQUEST, format!("Bad Request: {e}")),
        ),
        // The session's own bound, not the gateway's capacity or a rate: nothing to retry.
        CoreError::TooManySubscriptions(_) => (StatusCode::OK, internal(e.to_string())),
        CoreError::InvalidParams(_) => (
            StatusCode::OK,
            ErrorObject::new(codes::INVALID_PARAMS, format!("Invalid params: {e}")),
        ),
        // The spec's error for input the client never declared it can give; HTTP 200 (a
        // Legacy client reads a JSON-RPC error in the body, not a failing transport).
        CoreError::MissingClientCapability(cap) => (
            StatusCode::OK,
            ErrorObject::new(codes::MISSING_CLIENT_CAPABILITY, e.to_string())
                .with_data(json!({ "requiredCapabilities": { *cap: {} } })),
        ),
        CoreError::TooManyClientAsks(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            ErrorObject::new(RATE_LIMITED, e.to_string()),
        ),
        CoreError::NoClientStream => (StatusCode::OK, internal(e.to_string())),
        CoreError::UnexpectedResponse => (
            StatusCode::BAD_REQUEST,
            ErrorObject::new(
                codes::INVALID_REQUEST,
                "Bad Request: unexpected JSON-RPC response",
            ),
        ),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, internal(e.to_string())),
    }
}

/// Why an operator endpoint of the status page (`GET /trust`, `POST /trust/approve`) refused:
/// not JSON-RPC, so a `{"error": TEXT}` body, with the status mapped here like every other
/// failure (415, 413, 400, 403, 404 nothing pending or not aggregating, 409 changed since
/// reviewed; any other core failure as `/mcp` would answer it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpsError {
    #[error("Content-Type must be application/json")]
    NotJson,
    #[error("body too large")]
    TooLarge,
    #[error("expected {{\"backend\": NAME, \"tool\": NAME, \"digest\": DIGEST}}")]
    BadBody,
    #[error("not an approver (trust.approvers)")]
    NotApprover,
    #[error("nothing is pending for that tool")]
    NothingPending,
    #[error("the tool's definition changed again since that digest; review it anew")]
    Changed,
    #[error("{0}")]
    Core(CoreError),
}

impl IntoResponse for OpsError {
    fn into_response(self) -> Response {
        let status = match &self {
            OpsError::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            OpsError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            OpsError::BadBody => StatusCode::BAD_REQUEST,
            OpsError::NotApprover | OpsError::Core(CoreError::Forbidden(_)) => {
                StatusCode::FORBIDDEN
            }
            OpsError::NothingPending | OpsError::Core(CoreError::Unsupported(_)) => {
                StatusCode::NOT_FOUND
            }
            OpsError::Changed => StatusCode::CONFLICT,
            OpsError::Core(e) => core_parts(e).0,
        };
        let body = json!({ "error": self.to_string() }).to_string();
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let (status, id, err) = self.parts();
        let body = encode_error(id, &err);
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        match self {
            HttpError::MethodNotAllowed(allow) => {
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            HttpError::Unauthorized {
                metadata_url,
                invalid_token,
            } => {
                let mut challenge = format!("Bearer resource_metadata=\"{metadata_url}\"");
                if invalid_token {
                    challenge.push_str(", error=\"invalid_token\"");
                }
                if let Ok(v) = HeaderValue::from_str(&challenge) {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
                }
            }
            HttpError::Core(_, CoreError::RateLimited(secs))
            | HttpError::Core(
                _,
                CoreError::BridgeShareExhausted {
                    retry_after: secs, ..
                }
                | CoreError::RelayShareExhausted {
                    retry_after: secs, ..
                },
            ) => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            HttpError::Core(
                _,
                CoreError::Unavailable {
                    retry_in,
                    aggregated: false,
                    ..
                },
            ) => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_in));
            }
            HttpError::ReplicaUnreachable(_) => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(1));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests;
