//! The API's answer as a `CallToolResult`: JSON as `structuredContent` (checked against the
//! operation's response schema) plus its text; any other 2xx as text; a non-2xx status
//! (redirects included: they are never followed) as an `isError` result naming the status
//! and the body's first bytes. The body is read within a bound and dropped past it.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::header::CONTENT_TYPE;
use serde_json::{json, Value};

use super::error::OpenApiError;
use super::tools::{is_json, Tool};

/// How much of an error body the result shows.
const ERROR_EXCERPT: usize = 1024;

/// The body, refused as soon as it passes `limit`.
pub(crate) async fn read_bounded(
    body: &mut hyper::body::Incoming,
    limit: usize,
) -> Result<Bytes, OpenApiError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| OpenApiError::Transport(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > limit {
                return Err(OpenApiError::TooLarge { limit });
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(buf.freeze())
}

/// An `isError` result saying `text`.
pub(crate) fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The result for a response with `status`, `content_type` and `body`.
pub(crate) fn result(
    tool: &Tool,
    status: hyper::StatusCode,
    content_type: &str,
    body: &[u8],
) -> Value {
    if !status.is_success() {
        return error_result(&failed(status, body));
    }
    let text = String::from_utf8_lossy(body);
    if body.is_empty() {
        return json!({"content": [{"type": "text", "text": format!("HTTP {}", status.as_u16())}]});
    }
    if !is_json(content_type) {
        return json!({"content": [{"type": "text", "text": text}]});
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return error_result(&format!(
            "HTTP {}: the API said its response is JSON, but it is not",
            status.as_u16()
        ));
    };
    let structured = match (tool.wrapped, value) {
        (false, Value::Object(map)) => Value::Object(map),
        (_, other) => json!({"result": other}),
    };
    if let Some(check) = &tool.output {
        if let Err(e) = check.validate(&structured) {
            return error_result(&format!(
                "HTTP {}: the response does not match the operation's response schema at {}: {}",
                status.as_u16(),
                e.instance_path(),
                e.masked()
            ));
        }
    }
    json!({"content": [{"type": "text", "text": text}], "structuredContent": structured})
}

fn failed(status: hyper::StatusCode, body: &[u8]) -> String {
    let reason = status.canonical_reason().unwrap_or("");
    let head = if status.is_redirection() {
        " (redirects are not followed)"
    } else {
        ""
    };
    let mut cut = body.len().min(ERROR_EXCERPT);
    while cut > 0 && std::str::from_utf8(&body[..cut]).is_err() {
        cut -= 1;
    }
    let excerpt = String::from_utf8_lossy(&body[..cut]);
    let more = if body.len() > cut { " …" } else { "" };
    format!("HTTP {} {reason}{head}: {excerpt}{more}", status.as_u16())
}

/// The media type of a response, as sent.
pub(crate) fn content_type(headers: &hyper::HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}
