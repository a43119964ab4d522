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

/// Most values (elements, members and their names, scalars) one JSON response may hold: a
/// parsed value takes tens of times its text's size, and is what a response schema checks.
pub(crate) const MAX_JSON_VALUES: usize = 1 << 20;

/// Values the JSON responses being parsed at once may hold, every OpenAPI backend together:
/// what bounds the memory parsing takes (a call waits for room, within its deadline).
const PARSING_VALUES: usize = 4 * MAX_JSON_VALUES;

static PARSING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PARSING_VALUES);

/// The result for a response with `status`, `content_type` and `body`; `max_result`, the
/// most a result may be (a JSON body is carried twice: as text and as `structuredContent`).
pub(crate) async fn result(
    tool: &Tool,
    status: hyper::StatusCode,
    (content_type, body): (&str, &[u8]),
    max_result: usize,
) -> Value {
    if !status.is_success() {
        return error_result(&failed(status, body));
    }
    if body.is_empty() {
        return json!({"content": [{"type": "text", "text": format!("HTTP {}", status.as_u16())}]});
    }
    let json = is_json(content_type);
    if body.len().saturating_mul(if json { 2 } else { 1 }) > max_result {
        return error_result(&too_large(max_result));
    }
    let text = String::from_utf8_lossy(body);
    if !json {
        return json!({"content": [{"type": "text", "text": text}]});
    }
    let value = match parse(body, status).await {
        Ok(value) => value,
        Err(why) => return error_result(&why),
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

/// What a result past `max_result` says (the same words as a result found too large once
/// built).
pub(crate) fn too_large(max_result: usize) -> String {
    format!("the API's response is too large: as a result it would be more than {max_result} bytes")
}

/// `body` parsed, if it holds at most [`MAX_JSON_VALUES`] values, once the parses under way
/// leave room for them ([`PARSING_VALUES`]).
async fn parse(body: &[u8], status: hyper::StatusCode) -> Result<Value, String> {
    let values = values_in(body);
    if values > MAX_JSON_VALUES {
        return Err(format!(
            "HTTP {}: the API's JSON response holds more than {MAX_JSON_VALUES} values",
            status.as_u16()
        ));
    }
    // `values` ≤ MAX_JSON_VALUES < PARSING_VALUES, and the semaphore is never closed.
    let permits = u32::try_from(values.max(1)).unwrap_or(u32::MAX);
    let _room = PARSING.acquire_many(permits).await;
    serde_json::from_slice::<Value>(body).map_err(|_| {
        format!(
            "HTTP {}: the API said its response is JSON, but it is not",
            status.as_u16()
        )
    })
}

/// An upper bound on the values JSON text `body` parses into (for a valid text): one per
/// `,` `:` `[` `{` outside strings, and one more. A scan, no allocation.
pub(crate) fn values_in(body: &[u8]) -> usize {
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &b in body {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b',' | b':' | b'[' | b'{') => values += 1,
            (false, _, _) => {}
        }
    }
    values
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
