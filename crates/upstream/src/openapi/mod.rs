//! A REST API as an MCP backend: one tool per operation of its OpenAPI 3.0 or 3.1 document.
//!
//! [`OpenApiUpstream`] is an in-process MCP server behind [`crate::Upstream`]: it answers the
//! gateway's requests as a dual-era server would (`server`), so everything the gateway does
//! with a backend (merging, names, filters, policy, audit, both eras) applies unchanged; a
//! `tools/call` becomes exactly one HTTP request to the operation (`request`), answered with
//! its result (`response`). Arguments are checked against the tool's `inputSchema` first;
//! nothing the spec or a caller says can send a request anywhere but the configured base
//! URL's host (the spec's `servers` are ignored, redirects are not followed).
//!
//! - `spec`: YAML/JSON text → a JSON value, the OpenAPI version, JSON pointers, `$ref` lookup.
//! - `schema`: a schema with its `$ref`s inlined (cycles cut, bounded), 3.0 → JSON Schema.
//! - `tools`: the [`Catalog`]: names, input/output schemas, annotations; [`Skipped`] operations.

mod error;
mod redact;
mod request;
mod response;
mod schema;
mod server;
mod spec;
mod tools;
mod yaml;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub use error::{OpenApiError, SpecError};
pub use spec::{parse, MAX_SPEC_BYTES};
pub use tools::{Catalog, Skipped, Tool};

use crate::answer::Withdraw;
use crate::{BackendResponse, PendingCall};
use request::Base;
use server::Ask;

/// Where the API is and how much of it to accept.
#[derive(Clone)]
pub struct OpenApiConfig {
    /// Every call goes to this URL's scheme and host, under its path.
    pub base_url: String,
    /// Sent on every call (credentials); never logged.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// More values that never come back to a caller, as the headers' do: the `${VAR}`
    /// values written into the base URL's path (a key in the path is common).
    pub secrets: Vec<String>,
    /// Largest response body read; a larger one fails the call.
    pub max_response_bytes: usize,
    /// Largest answer line (a stdio backend's line bound): a call's result that encodes
    /// larger (its text and `structuredContent` both carry the body, and control bytes
    /// grow sixfold as JSON escapes) is answered as a "too large" error result instead.
    pub max_result_bytes: usize,
    /// Deadline of one call, from sending to the whole body.
    pub call_timeout: Duration,
    /// Deadline of establishing a connection.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for OpenApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenApiConfig")
            .field("headers", &self.headers.len())
            .field("secrets", &self.secrets.len())
            .field("max_response_bytes", &self.max_response_bytes)
            .finish_non_exhaustive()
    }
}

impl OpenApiConfig {
    /// Defaults: 16 MiB responses and result lines, 60 s calls, 10 s to connect.
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenApiConfig {
            base_url: base_url.into(),
            headers: Vec::new(),
            secrets: Vec::new(),
            max_response_bytes: 16 * 1024 * 1024,
            max_result_bytes: crate::StdioConfig::DEFAULT_MAX_LINE_BYTES,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A cloneable handle to one OpenAPI backend.
#[derive(Debug, Clone)]
pub struct OpenApiUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Arc<Catalog>,
    base: Base,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The headers' values, as they must never come back in a result.
    redactor: redact::Redactor,
    client: crate::remote::Client,
    limit: usize,
    max_result: usize,
    call_timeout: Duration,
    pending: AtomicUsize,
    /// Cleared when a call could not connect to the API, set by any answer. Nothing else
    /// clears it: a caller's request the API drops or resets says nothing of its health.
    reachable: AtomicBool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenApi")
            .field("tools", &self.catalog.tools.len())
            .field("pending", &self.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl OpenApiUpstream {
    /// The backend for `catalog`, calling the API at `config.base_url`. Connects lazily.
    pub fn new(catalog: Arc<Catalog>, config: OpenApiConfig) -> Result<Self, OpenApiError> {
        let base = Base::parse(&config.base_url)?;
        let mut headers = config.headers;
        for (_, v) in &mut headers {
            v.set_sensitive(true);
        }
        Ok(OpenApiUpstream {
            inner: Arc::new(Inner {
                catalog,
                base,
                redactor: redact::Redactor::new(&headers, &config.secrets),
                headers,
                client: client(config.connect_timeout),
                limit: config.max_response_bytes,
                max_result: config.max_result_bytes,
                call_timeout: config.call_timeout,
                pending: AtomicUsize::new(0),
                reachable: AtomicBool::new(true),
            }),
        })
    }

    /// Answers one JSON-RPC request (its id is `key`) in a task; dropping the returned call
    /// aborts it, and with it the HTTP exchange.
    pub(crate) fn call(&self, key: &str, line: Vec<u8>) -> PendingCall {
        let (tx, rx) = oneshot::channel();
        let inner = self.inner.clone();
        let key = key.to_owned();
        inner.pending.fetch_add(1, Ordering::Relaxed);
        let guard = PendingGuard(inner.clone());
        let task = tokio::spawn(async move {
            let _guard = guard;
            let answer = inner.answer(&key, &line).await;
            let _ = tx.send(Ok(answer));
        });
        PendingCall::new(rx, Withdraw::Task(task.abort_handle()))
    }

    /// Calls in flight.
    pub fn pending_len(&self) -> usize {
        self.inner.pending.load(Ordering::Relaxed)
    }

    /// Whether the last call reached the API.
    pub fn is_reachable(&self) -> bool {
        self.inner.reachable.load(Ordering::Relaxed)
    }

    /// The tools it serves.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }
}

struct PendingGuard(Arc<Inner>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

fn client(connect_timeout: Duration) -> crate::remote::Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(crate::remote::MAX_IDLE_CONNECTIONS)
        .build(crate::remote::connector(connect_timeout))
}

impl Inner {
    async fn answer(&self, key: &str, line: &[u8]) -> BackendResponse {
        let id = json!(key);
        let Ok(request) = switchboard_wire::plain::parse(line) else {
            let e = json!({"code": switchboard_wire::codes::PARSE_ERROR, "message": "Parse error"});
            return encode(&id, "error", &e);
        };
        let method = request["method"].as_str().unwrap_or("");
        let params = request.get("params").cloned().unwrap_or(json!({}));
        let id = request.get("id").cloned().unwrap_or(id);
        let (answer, call) = match server::ask(&self.catalog, method, &params) {
            Ask::Now(answer) => (answer, None),
            Ask::Call { tool, args } => {
                let (result, room) = self.tool_call(&tool, &args).await;
                (Ok(result), Some(room))
            }
        };
        // A parsed answer's room is held until its result is written (`response::Room`).
        let (call, _room) = (call.is_some(), call.flatten());
        let decorated = |mut result: Value| {
            if server::is_modern(method, &params) {
                server::decorate(&self.catalog, method, &mut result);
            }
            result
        };
        let result = match answer {
            Ok(result) => decorated(result),
            Err(e) => return encode(&id, "error", &e.to_value()),
        };
        // Only a call's result carries what the API said; the rest is bounded by the spec.
        let limit = if call { self.max_result } else { usize::MAX };
        match bounded_json(&result, limit) {
            // Not passed on: no reader of the gateway's would read it as written (see
            // `switchboard_wire::holds_reserved_key`).
            Some(body) if switchboard_wire::holds_reserved_key(&body) => {
                let refused = response::error_result(RESERVED_KEY);
                encode(&id, "result", &decorated(refused))
            }
            Some(body) => encode_text(&id, "result", body),
            None => {
                let too_large = response::error_result(&response::too_large(limit));
                encode(&id, "result", &decorated(too_large))
            }
        }
    }

    /// One `tools/call`: arguments checked, the request built (or refused), sent, answered;
    /// with the room its parsed answer holds.
    async fn tool_call(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
    ) -> (Value, response::Room) {
        let refused = |text: &str| (response::error_result(text), None);
        let Some(tool) = self.catalog.get(name) else {
            return refused(&format!("Unknown tool: {name}"));
        };
        let instance = Value::Object(args.clone());
        if let Err(e) = tool.input.validate(&instance) {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                "arguments".to_owned()
            } else {
                at
            };
            return refused(&format!("invalid arguments: {at}: {}", e.masked()));
        }
        let request = match request::build(&self.base, &tool.op, args, &self.headers) {
            Ok(r) => r,
            Err(e) => return refused(&format!("refused before sending: {e}")),
        };
        let exchange = self.exchange(tool, request);
        match tokio::time::timeout(self.call_timeout, exchange).await {
            Ok(Ok(answered)) => answered,
            Ok(Err(e)) => refused(&e.to_string()),
            Err(_) => refused(&format!(
                "the API did not answer within {} s",
                self.call_timeout.as_secs_f64()
            )),
        }
    }

    async fn exchange(
        &self,
        tool: &Tool,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<(Value, response::Room), OpenApiError> {
        // The request was built from the base URL's own scheme and authority: never another.
        debug_assert_eq!(request.uri().authority(), Some(&self.base.authority));
        let sent = self.client.request(request).await;
        let response = sent.map_err(|e| {
            if e.is_connect() {
                self.reachable.store(false, Ordering::Relaxed);
            }
            OpenApiError::Transport(crate::remote::error_chain(&e))
        })?;
        self.reachable.store(true, Ordering::Relaxed);
        let status = response.status();
        let content_type = response::content_type(response.headers());
        let mut body = response.into_body();
        let bytes = response::read_bounded(&mut body, self.limit).await?;
        // An API that echoes its request would hand the configured credential back.
        let bytes = self.redactor.apply(bytes);
        tracing::debug!(tool = %tool.name, status = status.as_u16(), bytes = bytes.len(), "openapi call answered");
        let response = (content_type.as_str(), &bytes[..]);
        Ok(response::result(tool, status, response, self.max_result).await)
    }
}

/// One JSON-RPC response, and where its `member` sits in it.
fn encode(id: &Value, member: &'static str, payload: &Value) -> BackendResponse {
    let body = serde_json::to_string(payload).unwrap_or_else(|_| "null".into());
    encode_text(id, member, body)
}

/// What a call gets when the API's answer (or the spec's part of a list) holds the object key
/// that serde_json's `Value` reads as JSON to parse again.
const RESERVED_KEY: &str =
    "the answer holds the object key $serde_json::private::RawValue, which the gateway does not pass";

/// `value` as JSON text, or `None` as soon as it passes `limit` bytes (never built whole).
fn bounded_json(value: &Value, limit: usize) -> Option<String> {
    struct Bounded(Vec<u8>, usize);
    impl std::io::Write for Bounded {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + data.len() > self.1 {
                return Err(std::io::Error::other("past the bound"));
            }
            self.0.extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new(), limit);
    serde_json::to_writer(&mut out, value).ok()?;
    String::from_utf8(out.0).ok()
}

/// [`encode`] with the payload already JSON text.
fn encode_text(id: &Value, member: &'static str, body: String) -> BackendResponse {
    let id = serde_json::to_string(id).unwrap_or_else(|_| "null".into());
    let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"{member}":"#);
    let range = head.len()..head.len() + body.len();
    let line = format!("{head}{body}}}");
    BackendResponse::new(Bytes::from(line), range, member == "error")
}

/// Whether `url` can be a base URL (absolute `http(s)` with a host, no query).
pub fn check_base_url(url: &str) -> Result<(), OpenApiError> {
    Base::parse(url).map(|_| ())
}

/// Reads a spec from a regular file, at most [`MAX_SPEC_BYTES`] of it. Opened without
/// blocking (a FIFO with no writer, or a device, would otherwise hang or never end) and
/// checked once open, so a file swapped in after a look is checked too.
pub fn read_file(path: &std::path::Path) -> Result<Value, OpenApiError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let read = |why: String| OpenApiError::Read {
        source_name: path.display().to_string(),
        why,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| read(e.to_string()))?;
    let meta = file.metadata().map_err(|e| read(e.to_string()))?;
    if !meta.is_file() {
        return Err(read("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read(e.to_string()))?;
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(read(format!("larger than {MAX_SPEC_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| read("not UTF-8 text".into()))?;
    Ok(parse(&text)?)
}

/// Fetches a spec's text from an `http(s)` URL (a 200 answer within `deadline`; redirects are
/// not followed). `shown` names it in errors (the URL as configured, never an expanded
/// secret). [`parse`] it off the async runtime: a hostile spec costs CPU up to its bounds.
pub async fn fetch(url: &str, shown: &str, deadline: Duration) -> Result<String, OpenApiError> {
    let read = |why: String| OpenApiError::Read {
        source_name: shown.to_owned(),
        why,
    };
    let uri = crate::remote::url::parse(url).map_err(|_| read("not an http(s) URL".into()))?;
    let request = hyper::Request::get(uri)
        .header(
            hyper::header::ACCEPT,
            "application/json, application/yaml, */*",
        )
        .body(Full::new(Bytes::new()))
        .map_err(|_| read("not a valid request".into()))?;
    let get = async {
        let response = client(deadline)
            .request(request)
            .await
            .map_err(|e| read(crate::remote::error_chain(&e)))?;
        if response.status() != hyper::StatusCode::OK {
            return Err(read(format!("HTTP {}", response.status().as_u16())));
        }
        let mut body = response.into_body();
        response::read_bounded(&mut body, MAX_SPEC_BYTES)
            .await
            .map_err(|e| read(e.to_string()))
    };
    let bytes = tokio::time::timeout(deadline, get)
        .await
        .map_err(|_| read("timed out".into()))??;
    String::from_utf8(bytes.to_vec()).map_err(|_| read("not UTF-8 text".into()))
}

#[cfg(test)]
mod tests;
