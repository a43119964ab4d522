//! Distributed traces (OpenTelemetry), off by default (`--otlp-endpoint`). One span per client
//! request (kind server) and one per backend call (kind client), named and attributed as the
//! OpenTelemetry MCP conventions say (`{mcp.method.name} {target}`, `mcp.method.name`,
//! `gen_ai.tool.name`, ...). W3C trace context travels in `params._meta`: a client's
//! `traceparent` (and `tracestate`) is the parent of the request's span, and the backend gets
//! the backend call's own `traceparent` in place of the client's, so one trace runs from the
//! client through the gateway into the server.
//!
//! The request's span is carried to the backend call as the current OpenTelemetry context of
//! the request's future (`FutureExt::with_context`), so no routing signature changes for it.
//! Off, none of this runs: [`Traces`] is `None` on the gateway and every hook is one branch.
//!
//! The exporter (OTLP/HTTP) is the binary's: it installs the global tracer provider before
//! the gateway is built; this module only uses the API.

use std::borrow::Cow;
use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{global, Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::value::RawValue;

use switchboard_wire::{object_member, with_member, with_members, Message};

use crate::BackendId;
use crate::CoreError;

/// The `_meta` keys of W3C trace context.
const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";
/// A `_meta` trace header longer than this is ignored (W3C bounds `tracestate` at 512).
const MAX_HEADER: usize = 1024;
/// Client-chosen text (ids, method names, error text) is clipped to this in spans: the SDK
/// bounds attribute counts, not lengths, and spans wait in the export queue.
const MAX_TEXT: usize = 256;

/// The gateway's tracer, when traces are on.
pub(crate) struct Traces {
    tracer: global::BoxedTracer,
    propagator: TraceContextPropagator,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Traces")
    }
}

impl Traces {
    /// The tracer of the globally installed provider.
    pub(crate) fn new() -> Self {
        Traces {
            tracer: global::tracer("switchboard"),
            propagator: TraceContextPropagator::new(),
        }
    }

    /// The context of a client request's span: a child of the client's `traceparent` when
    /// `_meta` has a valid one, else a new trace.
    pub(crate) fn request(&self, msg: &Message<'_>, era: &'static str) -> Context {
        let parent = self.propagator.extract(&MetaHeaders::read(msg.meta));
        let method = clip(msg.method.unwrap_or_default());
        let target = target_of(msg);
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method.clone()),
            KeyValue::new("switchboard.era", era),
        ];
        if let Some(id) = &msg.id {
            attributes.push(KeyValue::new("jsonrpc.request.id", clip(id.as_json())));
        }
        attributes.extend(target_attributes(&method, target.as_deref()));
        let span = self
            .tracer
            .span_builder(span_name(&method, target.as_deref()))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        parent.with_span(span)
    }

    /// The context of a backend call's span, a child of the current context (the request's).
    pub(crate) fn backend_call(&self, method: &str, backend: &BackendId) -> Context {
        let parent = Context::current();
        let span = self
            .tracer
            .span_builder(Cow::Owned(clip(method)))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("mcp.method.name", clip(method)),
                KeyValue::new("switchboard.backend", backend.as_str().to_owned()),
            ])
            .start_with_context(&self.tracer, &parent);
        parent.with_span(span)
    }

    /// `params` with the current span's trace context in `_meta` (replacing the client's), or
    /// `None` when there is no valid span, no params, or `params` is not an object.
    pub(crate) fn inject(&self, params: Option<&RawValue>) -> Option<Box<RawValue>> {
        let cx = Context::current();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut headers = HashMap::new();
        self.propagator
            .inject_context(&cx, &mut MetaInjector(&mut headers));
        let traceparent = headers.remove(TRACEPARENT)?;
        // A request without params keeps none: not every server takes `_meta` on `ping`.
        let params = params?;
        let traceparent = json_string(&traceparent);
        // The client's own `tracestate` never passes: only the propagated one, and only when
        // it is printable ASCII (the SDK lets control characters through).
        let state = headers
            .remove(TRACESTATE)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(|s| json_string(&s));
        let mut set = vec![(TRACEPARENT, traceparent.as_str())];
        if let Some(state) = &state {
            set.push((TRACESTATE, state.as_str()));
        }
        let meta = match object_member(params, "_meta") {
            Some(meta) => with_members(meta, &set, |k| k != TRACESTATE)?,
            None => with_members(&empty_object()?, &set, |_| true)?,
        };
        with_member(params, "_meta", meta.get())
    }
}

/// Ends the span of `cx`, marked failed when `outcome` is an error.
pub(crate) fn finish<T>(cx: &Context, outcome: &Result<T, CoreError>) {
    let span = cx.span();
    if let Err(e) = outcome {
        span.set_attribute(KeyValue::new("error.type", error_type(e)));
        span.set_status(Status::error(clip(&e.to_string())));
    }
    span.end();
}

/// A bounded, fixed vocabulary for `error.type`.
fn error_type(e: &CoreError) -> &'static str {
    match e {
        CoreError::Timeout(_) | CoreError::TimeoutOf(..) => "timeout",
        CoreError::Forbidden(_) => "forbidden",
        CoreError::RateLimited(_) => "rate_limited",
        CoreError::UnknownName(..) | CoreError::InvalidParams(_) => "invalid_params",
        CoreError::Backend(_) | CoreError::OfBackend(..) | CoreError::Unavailable { .. } => {
            "backend"
        }
        CoreError::Cancelled => "cancelled",
        _ => "other",
    }
}

/// The name or URI a request is about, for its span's name and attributes. A URI without
/// user info or query (`shown_url`): a caller's credential there must not reach the
/// collector.
fn target_of(msg: &Message<'_>) -> Option<String> {
    let params = msg.params?;
    if let Some(raw) = object_member(params, "name") {
        let name: String = serde_json::from_str(raw.get()).ok()?;
        return Some(clip(&name));
    }
    let uri: String = serde_json::from_str(object_member(params, "uri")?.get()).ok()?;
    Some(clip(&switchboard_upstream::remote::shown_url(&uri)))
}

fn clip(text: &str) -> String {
    text.chars().take(MAX_TEXT).collect()
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

fn empty_object() -> Option<Box<RawValue>> {
    RawValue::from_string("{}".to_owned()).ok()
}

fn span_name(method: &str, target: Option<&str>) -> Cow<'static, str> {
    match target {
        Some(t) => Cow::Owned(format!("{method} {t}")),
        None => Cow::Owned(method.to_owned()),
    }
}

fn target_attributes(method: &str, target: Option<&str>) -> Vec<KeyValue> {
    let Some(target) = target else {
        return Vec::new();
    };
    match method {
        "tools/call" => vec![
            KeyValue::new("gen_ai.tool.name", target.to_owned()),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
        ],
        "prompts/get" => vec![KeyValue::new("gen_ai.prompt.name", target.to_owned())],
        m if m.starts_with("resources/") => {
            vec![KeyValue::new("mcp.resource.uri", target.to_owned())]
        }
        _ => Vec::new(),
    }
}

/// `_meta`'s string-valued trace headers, read for the propagator.
struct MetaHeaders(HashMap<&'static str, String>);

impl MetaHeaders {
    fn read(meta: Option<&RawValue>) -> Self {
        let mut found = HashMap::new();
        for key in [TRACEPARENT, TRACESTATE] {
            let value = meta
                .and_then(|m| object_member(m, key))
                .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
                .filter(|v| v.len() <= MAX_HEADER);
            if let Some(v) = value {
                found.insert(key, v);
            }
        }
        MetaHeaders(found)
    }
}

impl Extractor for MetaHeaders {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().copied().collect()
    }
}

struct MetaInjector<'a>(&'a mut HashMap<String, String>);

impl Injector for MetaInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}
