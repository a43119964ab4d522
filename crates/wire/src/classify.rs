//! Which protocol era a request speaks, decided per request (mcp-wire.md §3.2, §4.2).
//!
//! The body is the source of truth: `params._meta["io.modelcontextprotocol/protocolVersion"]`
//! makes a request Modern (2026-07-28, stateless). The `MCP-Protocol-Version` header is a
//! mirror for intermediaries and must agree with the body. Truth table:
//!
//! | body version claim | header            | method            | result                      |
//! |--------------------|-------------------|-------------------|-----------------------------|
//! | string, known      | absent or equal   | any               | Modern                      |
//! | string, unknown    | absent or equal   | any               | -32022 (supported, requested)|
//! | string             | different         | any               | -32020                      |
//! | not a string       | Modern            | any               | -32020                      |
//! | not a string       | other / absent    | any               | -32602                      |
//! | absent             | Modern            | any               | -32602 (missing envelope)   |
//! | absent             | any               | `server/discover` | -32602 (missing envelope)   |
//! | absent             | Legacy / absent   | other             | Legacy                      |
//!
//! A Modern request must also carry `clientCapabilities` as an object (-32602). Other reserved
//! keys (`logLevel`, `clientInfo`) alone are not a Modern signal: an explicit older header (or
//! none) outranks a stray reserved key. `initialize` without a claim is Legacy.

use serde_json::json;
use serde_json::value::RawValue;

use crate::error::codes;
use crate::{method, version, ErrorObject, Message};

/// `_meta` key: the request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's identity.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: per-request log level.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key (results): the server's identity.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key (listen notifications): the subscription id.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// Prefix of every reserved `_meta` key.
pub const RESERVED_PREFIX: &str = "io.modelcontextprotocol/";

/// The era of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// Session-based (2025-11-25 and older).
    Legacy,
    /// Stateless, with this protocol version.
    Modern(String),
}

/// Classifies a request (or notification) by its body and `MCP-Protocol-Version` header.
pub fn classify(msg: &Message<'_>, header: Option<&str>) -> Result<Era, ErrorObject> {
    let header_modern = header.is_some_and(version::is_modern);
    let Some(claim) = msg.meta(META_PROTOCOL_VERSION) else {
        if header_modern || msg.method == Some(method::DISCOVER) {
            return Err(missing_envelope(META_PROTOCOL_VERSION));
        }
        return Ok(Era::Legacy);
    };
    let Some(claimed) = json_string(claim) else {
        if header_modern {
            return Err(mismatch(
                "MCP-Protocol-Version header does not match the body's protocolVersion",
            ));
        }
        return Err(ErrorObject::new(
            codes::INVALID_PARAMS,
            format!("Invalid params: _meta[\"{META_PROTOCOL_VERSION}\"] must be a string"),
        ));
    };
    if header.is_some_and(|h| h != claimed) {
        return Err(mismatch(
            "MCP-Protocol-Version header does not match the body's protocolVersion",
        ));
    }
    if !version::is_modern(&claimed) {
        return Err(unsupported(&claimed));
    }
    let caps = msg.meta(META_CLIENT_CAPABILITIES);
    if !caps.is_some_and(|c| c.get().starts_with('{')) {
        return Err(missing_envelope(META_CLIENT_CAPABILITIES));
    }
    Ok(Era::Modern(claimed))
}

/// `-32022` with the versions this gateway serves.
pub fn unsupported(requested: &str) -> ErrorObject {
    ErrorObject::new(
        codes::UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
    )
    .with_data(json!({ "supported": version::supported(), "requested": requested }))
}

/// `-32020`.
pub fn mismatch(message: impl Into<std::borrow::Cow<'static, str>>) -> ErrorObject {
    ErrorObject::new(codes::HEADER_MISMATCH, message)
}

fn missing_envelope(key: &str) -> ErrorObject {
    ErrorObject::new(
        codes::INVALID_PARAMS,
        format!("Invalid params: params._meta is missing the required envelope key {key} (or it has the wrong type)"),
    )
}

fn json_string(raw: &RawValue) -> Option<String> {
    raw.get()
        .starts_with('"')
        .then(|| serde_json::from_str(raw.get()).ok())
        .flatten()
}

#[cfg(test)]
mod tests;
