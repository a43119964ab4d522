//! The gateway's own Legacy session with a shared backend.
//!
//! The gateway initializes the backend once, before serving, and answers every client's
//! `initialize` itself from what it learned here — so a strict backend sees exactly one
//! handshake however many clients connect.

use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::info;

use switchboard_upstream::StdioHandle;
use switchboard_wire::{encode_notification, encode_request, method, version};

use crate::route::RouteKey;
use crate::CoreError;

/// What the backend said about itself in its `initialize` result.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// The version the backend agreed to speak with the gateway.
    pub protocol_version: String,
    /// The backend's capabilities object, offered to clients as the gateway's own.
    pub capabilities: Value,
    /// The backend's `serverInfo`.
    pub server_info: Value,
    /// The backend's `instructions`, if any.
    pub instructions: Option<Value>,
}

/// An initialized shared backend.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Where requests go.
    pub handle: StdioHandle,
    /// What the backend declared.
    pub info: BackendInfo,
}

impl Backend {
    /// Performs the Legacy handshake with the backend: `initialize`, then `initialized`.
    pub async fn initialize(handle: StdioHandle, deadline: Duration) -> Result<Backend, CoreError> {
        let params = json!({
            "protocolVersion": version::LATEST_LEGACY,
            // Shared mode cannot attribute sampling, elicitation or roots to a client, so the
            // gateway declares none of them.
            "capabilities": {},
            "clientInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
        });
        let params = RawValue::from_string(params.to_string())
            .map_err(|e| CoreError::BackendInit(e.to_string()))?;
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), method::INITIALIZE, Some(&params));
        let call = handle.call(key.as_str(), line).await?;
        let answer = tokio::time::timeout(deadline, call).await.map_err(|_| {
            CoreError::BackendInit(format!("no answer to initialize within {deadline:?}"))
        })??;
        if answer.is_error() {
            return Err(CoreError::BackendInit(format!(
                "backend refused initialize: {}",
                answer.payload()
            )));
        }
        let info = parse_info(answer.payload())?;
        handle
            .send_line(encode_notification(method::INITIALIZED, None))
            .await?;
        info!(
            version = %info.protocol_version,
            server = %info.server_info,
            "backend initialized"
        );
        Ok(Backend { handle, info })
    }
}

fn parse_info(result: &str) -> Result<BackendInfo, CoreError> {
    let bad = |what: &str| CoreError::BackendInit(format!("initialize result {what}"));
    let mut v: Value = serde_json::from_str(result).map_err(|_| bad("is not JSON"))?;
    let obj = v.as_object_mut().ok_or_else(|| bad("is not an object"))?;
    let protocol_version = obj
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("has no protocolVersion"))?
        .to_owned();
    let capabilities = obj
        .remove("capabilities")
        .filter(Value::is_object)
        .ok_or_else(|| bad("has no capabilities object"))?;
    let server_info = obj
        .remove("serverInfo")
        .filter(Value::is_object)
        .ok_or_else(|| bad("has no serverInfo object"))?;
    Ok(BackendInfo {
        protocol_version,
        capabilities,
        server_info,
        instructions: obj.remove("instructions"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_result_and_refuses_broken_ones() {
        let ok = r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"x","version":"1"},"instructions":"hi"}"#;
        let info = parse_info(ok).unwrap();
        assert_eq!(info.protocol_version, "2025-06-18");
        assert_eq!(info.instructions, Some(json!("hi")));
        for bad in [
            "[]",
            "{}",
            r#"{"protocolVersion":"x","capabilities":[],"serverInfo":{}}"#,
            "nope",
        ] {
            assert!(parse_info(bad).is_err(), "{bad}");
        }
    }
}
