//! JSON-RPC error objects and the error codes Switchboard emits.

use std::borrow::Cow;

use serde::Serialize;

/// Error codes. Standard JSON-RPC codes plus the MCP-specific ones (see mcp-wire.md §3.10).
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i32 = -32700;
    /// The JSON is not a valid request object (also: batches, forbidden ids).
    pub const INVALID_REQUEST: i32 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Internal error (the backend went away, or answered nonsense).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Implementation-defined: the request's deadline passed before the backend answered.
    pub const REQUEST_TIMEOUT: i32 = -32000;
    /// Legacy Streamable HTTP: unknown or expired `Mcp-Session-Id` (TypeScript SDK convention).
    pub const SESSION_NOT_FOUND: i32 = -32001;
    /// Legacy (2025-11-25) resource not found.
    pub const RESOURCE_NOT_FOUND_LEGACY: i32 = -32002;
    /// 2026-07-28: HTTP headers do not match the body.
    pub const HEADER_MISMATCH: i32 = -32020;
    /// 2026-07-28: the request needs a client capability it did not declare.
    pub const MISSING_CLIENT_CAPABILITY: i32 = -32021;
    /// 2026-07-28: protocol version not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

/// A JSON-RPC error object (`{"code":…,"message":…,"data"?:…}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorObject {
    /// One of [`codes`].
    pub code: i32,
    /// Human-readable, short.
    pub message: Cow<'static, str>,
    /// Optional structured detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl ErrorObject {
    /// An error without `data`.
    pub fn new(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// Why an incoming message was refused. Carries the id when it could be read, so the error
/// answer can echo it; `None` means the `id` member must be omitted (never `null`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error:?}")]
pub struct ParseError {
    /// The id to echo, if one could be read and is itself valid.
    pub id: Option<crate::RequestId>,
    /// The JSON-RPC error to answer with.
    pub error: ErrorObject,
}

impl ParseError {
    pub(crate) fn new(id: Option<crate::RequestId>, code: i32, msg: &'static str) -> Self {
        ParseError {
            id,
            error: ErrorObject::new(code, msg),
        }
    }
}
