//! What the remote adapter needs to know about a line it sends: its method, name, Modern
//! version and arguments (for the mirror headers), and whether it is the handshake.

use hyper::header::{HeaderName, HeaderValue};

use switchboard_wire::classify::META_PROTOCOL_VERSION;
use switchboard_wire::{method, object_member, Message};

/// What the adapter needs to know about a line it sends (its own encoding, parsed once more:
/// a remote exchange costs a round trip, so one envelope scan is noise).
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub(super) method: Option<String>,
    /// `params.name` / `params.uri`, for `Mcp-Name`.
    pub(super) name: Option<String>,
    /// The Modern version the request's `_meta` names, if it is a Modern request.
    pub(super) modern_version: Option<String>,
    pub(super) modern: bool,
    /// A `tools/call`'s raw `arguments`.
    pub(super) arguments: Option<String>,
    pub(super) initialize: bool,
    pub(super) initialized: bool,
    /// A `notifications/cancelled`'s `requestId` (a key of the gateway's, a string).
    pub(super) cancels: Option<String>,
}

impl Facts {
    pub(super) fn of(line: &[u8]) -> Facts {
        let Ok(msg) = Message::parse(line) else {
            return Facts::default();
        };
        let Some(name) = msg.method else {
            return Facts::default();
        };
        let text = |v: Option<&serde_json::value::RawValue>| {
            v.and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        };
        let modern_version = text(
            msg.params
                .and_then(|p| object_member(p, "_meta"))
                .and_then(|m| object_member(m, META_PROTOCOL_VERSION)),
        )
        .filter(|v| switchboard_wire::version::is_modern(v));
        let member = match name {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" => Some("uri"),
            // The Tasks extension's: the backend's own task id (the gateway renamed it).
            "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
            _ => None,
        };
        let arguments = (name == "tools/call")
            .then(|| msg.param("arguments").map(|a| a.get().to_owned()))
            .flatten();
        Facts {
            arguments,
            name: text(member.and_then(|m| msg.param(m))),
            modern: modern_version.is_some(),
            modern_version,
            cancels: text(
                (name == method::CANCELLED)
                    .then(|| msg.param("requestId"))
                    .flatten(),
            ),
            initialize: name == method::INITIALIZE,
            initialized: name == method::INITIALIZED,
            method: Some(name.to_owned()),
        }
    }

    /// The standard request headers: `Mcp-Method` and `Mcp-Name` on every request and
    /// notification of either era (a Legacy server ignores them; a Modern or dual-era one
    /// checks them on everything it is sent, the Legacy handshake included), and
    /// `MCP-Protocol-Version` on a Modern one (a Legacy session's comes with the session).
    pub(super) fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::with_capacity(3);
        let mut push = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(&switchboard_wire::headers::encode_value(value)) {
                out.push((HeaderName::from_static(name), v));
            }
        };
        if let Some(version) = &self.modern_version {
            push("mcp-protocol-version", version);
        }
        if let Some(m) = &self.method {
            push("mcp-method", m);
        }
        if let Some(n) = &self.name {
            push("mcp-name", n);
        }
        out
    }
}

/// The `protocolVersion` of an `initialize` result.
pub(super) fn negotiated_version(result: &str) -> Option<String> {
    let raw = serde_json::from_str::<&serde_json::value::RawValue>(result).ok()?;
    serde_json::from_str(object_member(raw, "protocolVersion")?.get()).ok()
}
