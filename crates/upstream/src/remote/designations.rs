//! The `x-mcp-header` designations of a remote's tools (SEP-2243), learned from the Modern
//! `tools/list` answers one upstream handle carried: what a Modern `tools/call` must send as
//! `Mcp-Param-*` headers, and which tools were dropped for invalid designations.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use tracing::warn;

use switchboard_wire::headers::{invalid_designation, param_headers, param_values, ParamHeader};

use super::facts::Facts;
use crate::UpstreamError;

/// Most tools whose designations are remembered.
const MAX_DESIGNATED: usize = 4096;

/// One handle's designations, bounded by [`MAX_DESIGNATED`].
#[derive(Debug, Default)]
pub(super) struct Designations {
    /// Tool → its `x-mcp-header` designations: a remote checks `Mcp-Param-*`, and the
    /// gateway must send them.
    table: Mutex<HashMap<String, Arc<[ParamHeader]>>>,
    /// Tool → why its `x-mcp-header` designations are invalid: such a tool is dropped from
    /// the list and never called (SEP-2243: a client MUST reject it).
    rejected: Mutex<HashMap<String, String>>,
}

impl Designations {
    /// `Mcp-Param-*` for a Modern `tools/call`, from the designations learned so far; refused
    /// when a designated argument is spelled another way (`headers::param_values`).
    pub(super) fn headers(
        &self,
        facts: &Facts,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, switchboard_wire::ErrorObject> {
        if !facts.modern {
            return Ok(Vec::new());
        }
        let spec = facts
            .name
            .as_ref()
            .and_then(|tool| self.table.lock().get(tool).cloned());
        let (Some(spec), Some(args)) = (spec, facts.arguments.as_deref()) else {
            return Ok(Vec::new());
        };
        // Taken as absent, arguments that do not read as values would send no header.
        let args: serde_json::Value = serde_json::from_str(args).map_err(|_| {
            switchboard_wire::ErrorObject::new(
                switchboard_wire::codes::INVALID_PARAMS,
                "Invalid params: the arguments cannot be mirrored in their Mcp-Param-* headers",
            )
        })?;
        Ok(param_values(Some(&args), &spec)?
            .into_iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_str(&value).ok()?,
                ))
            })
            .collect())
    }

    /// A Modern `tools/list` answer: the designations of its tools learned, and the tools
    /// whose designations are invalid dropped from it (with a warning) and remembered, so a
    /// call of one is refused here (see [`Designations::refuse_rejected`]).
    pub(super) fn screen(
        &self,
        answer: super::RemoteResponse,
        id: &str,
    ) -> Result<super::RemoteResponse, UpstreamError> {
        let Ok(mut message) = serde_json::from_slice::<serde_json::Value>(answer.line()) else {
            return Ok(answer);
        };
        let Some(tools) = message
            .pointer_mut("/result/tools")
            .and_then(serde_json::Value::as_array_mut)
        else {
            return Ok(answer);
        };
        let before = tools.len();
        {
            let mut table = self.table.lock();
            let mut rejected = self.rejected.lock();
            tools.retain(|tool| {
                let Some(name) = tool.get("name").and_then(serde_json::Value::as_str) else {
                    return true;
                };
                let schema = tool.get("inputSchema");
                if let Some(why) = schema.and_then(invalid_designation) {
                    warn!(tool = name, reason = %why, "remote tool dropped: invalid x-mcp-header");
                    table.remove(name);
                    if rejected.len() < MAX_DESIGNATED || rejected.contains_key(name) {
                        rejected.insert(name.to_owned(), why);
                    }
                    return false;
                }
                rejected.remove(name);
                let spec = schema.map(param_headers).unwrap_or_default();
                if spec.is_empty() {
                    table.remove(name);
                } else if table.len() < MAX_DESIGNATED || table.contains_key(name) {
                    table.insert(name.to_owned(), spec.into());
                }
                true
            });
        }
        if tools.len() == before {
            return Ok(answer);
        }
        let line = Bytes::from(message.to_string());
        let status = hyper::StatusCode::from_u16(answer.status()).unwrap_or(hyper::StatusCode::OK);
        super::answer_from(line, id, status).map_err(UpstreamError::Remote)
    }

    /// The answer to a Modern `tools/call` of a tool dropped for invalid designations: the
    /// error a server gives for a tool it does not have; the remote never sees the call.
    pub(super) fn refuse_rejected(
        &self,
        facts: &Facts,
        id: &str,
    ) -> Option<Result<super::RemoteResponse, UpstreamError>> {
        if !facts.modern || facts.method.as_deref() != Some("tools/call") {
            return None;
        }
        let tool = facts.name.as_deref()?;
        let why = self.rejected.lock().get(tool).cloned()?;
        let error = switchboard_wire::ErrorObject::new(
            switchboard_wire::codes::INVALID_PARAMS,
            format!("Unknown tool: {tool} (dropped by the gateway: {why})"),
        );
        Some(super::upstream::refused(id, &error))
    }
}
