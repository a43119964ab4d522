//! The API's answer as a `CallToolResult`: JSON as `structuredContent` (checked against the
//! operation's response schema) plus its text; any other 2xx as text; a non-2xx status
//! (redirects included: they are never followed) as an `isError` result naming the status
//! and the body's first bytes. The body is read within a bound and dropped past it.

use std::borrow::Cow;

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

/// The most memory one JSON response may take once parsed (as [`parsed_size`] estimates
/// it): a parsed value takes tens of times its text, hundreds of bytes for each tiny
/// container, and is what a response schema checks.
pub(crate) const MAX_PARSED_BYTES: usize = 128 << 20;

/// The memory the parsed JSON responses held at once may take, every OpenAPI backend
/// together, in KiB: a call waits for room (within its deadline), and holds it until its
/// result is written.
const PARSING_KIB: usize = 3 * (MAX_PARSED_BYTES >> 10);

static PARSING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PARSING_KIB);

/// Room held by a parsed response until its result is written.
pub(crate) type Room = Option<tokio::sync::SemaphorePermit<'static>>;

/// The result for a response with `status`, `content_type` and `body`; `max_result`, the
/// most a result may be (a JSON body is carried twice: as text and as `structuredContent`).
pub(crate) async fn result(
    tool: &Tool,
    status: hyper::StatusCode,
    (content_type, body): (&str, &[u8]),
    max_result: usize,
) -> (Value, Room) {
    if !status.is_success() {
        return (error_result(&failed(status, body)), None);
    }
    if body.is_empty() {
        let text = format!("HTTP {}", status.as_u16());
        return (json!({"content": [{"type": "text", "text": text}]}), None);
    }
    let json = is_json(content_type);
    if body.len().saturating_mul(if json { 2 } else { 1 }) > max_result {
        return (error_result(&too_large(max_result)), None);
    }
    let text = String::from_utf8_lossy(body);
    if !json {
        return (json!({"content": [{"type": "text", "text": text}]}), None);
    }
    let room = match room_for(body, status).await {
        Ok(room) => room,
        Err(why) => return (error_result(&why), None),
    };
    let result = off_the_workers(body.len(), || match parse(body, status) {
        Ok(value) => checked(tool, status, text, value),
        Err(why) => error_result(&why),
    });
    (result, room)
}

/// Answers of at least this many bytes are parsed and checked off the async workers.
const PARSED_IN_PLACE: usize = 256 << 10;

/// `work`, which parses and checks `len` bytes: of [`PARSED_IN_PLACE`] or more, on a
/// multi-threaded runtime, with the worker's other tasks handed to another thread
/// (`block_in_place`), so that one large answer (up to [`MAX_PARSED_BYTES`] parsed, about
/// 0.1 s) does not stall every request queued behind it.
fn off_the_workers<T>(len: usize, work: impl FnOnce() -> T) -> T {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi && len >= PARSED_IN_PLACE {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// A parsed JSON answer as `structuredContent` (beside its `text`), checked against the
/// operation's response schema.
fn checked(tool: &Tool, status: hyper::StatusCode, text: Cow<'_, str>, value: Value) -> Value {
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

/// Room to parse `body`, if [`parsed_size`] finds it within [`MAX_PARSED_BYTES`], once the
/// parses held leave it ([`PARSING_KIB`]); the room is the caller's to hold.
async fn room_for(body: &[u8], status: hyper::StatusCode) -> Result<Room, String> {
    let size = parsed_size(body);
    if size > MAX_PARSED_BYTES {
        return Err(format!(
            "HTTP {}: the API's JSON response is too large to check: parsed, it would take more than {} MiB",
            status.as_u16(),
            MAX_PARSED_BYTES >> 20
        ));
    }
    // At most MAX_PARSED_BYTES in KiB, below PARSING_KIB; the semaphore is never closed.
    let kib = u32::try_from((size >> 10).max(1)).unwrap_or(u32::MAX);
    Ok(PARSING.acquire_many(kib).await.ok())
}

/// `body` parsed; not by `Value`'s own deserializer, which parses a string again as JSON
/// behind one key (`plain`), past the room's estimate.
fn parse(body: &[u8], status: hyper::StatusCode) -> Result<Value, String> {
    switchboard_wire::plain::parse(body).map_err(|_| {
        format!(
            "HTTP {}: the API said its response is JSON, but it is not",
            status.as_u16()
        )
    })
}

/// Bytes a parsed value takes, estimated from above (`Value`s of 80 bytes with ordered
/// maps, vectors doubling): the text, 160 per element or member (`,` `:`), 400 per array
/// (`[`, four slots at first), 600 per object (`{`), counted outside strings. A scan, no
/// allocation.
pub(crate) fn parsed_size(body: &[u8]) -> usize {
    let (mut size, mut in_string, mut escaped) = (body.len() + 160, false, false);
    for &b in body {
        let add = match (in_string, escaped, b) {
            (true, true, _) => {
                escaped = false;
                0
            }
            (true, false, b'\\') => {
                escaped = true;
                0
            }
            (true, false, b'"') => {
                in_string = false;
                0
            }
            (false, _, b'"') => {
                in_string = true;
                0
            }
            (false, _, b',' | b':') => 160,
            (false, _, b'[') => 400,
            (false, _, b'{') => 600,
            _ => 0,
        };
        size = size.saturating_add(add);
    }
    size
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
