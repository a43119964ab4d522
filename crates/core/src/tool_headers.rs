//! Which `tools/call` arguments a client must mirror in `Mcp-Param-*` headers (2026-07-28,
//! SEP-2243): learned from the backend's `tools/list`, cached, and forgotten when the backend
//! says its tools changed. A stdio backend never sees HTTP headers, so the gateway is the one
//! that must check them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use switchboard_wire::headers::{param_headers, ParamHeader};

use crate::Gateway;

/// Tool name → its header designations (only tools that have any).
type Table = Arc<HashMap<String, Vec<ParamHeader>>>;

/// Pages of `tools/list` read at most (a backend paginating forever must not stall requests).
const MAX_PAGES: usize = 50;

/// The cache; `None` until first needed and after every tools `list_changed`.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders {
    table: Mutex<Option<Table>>,
}

impl ToolHeaders {
    pub(crate) fn invalidate(&self) {
        *self.table.lock() = None;
    }
}

impl Gateway {
    /// The `Mcp-Param-*` designations of `tool` (empty when it has none or is unknown).
    pub async fn param_headers(&self, tool: &str) -> Vec<ParamHeader> {
        let cached = self.registry.tool_headers.table.lock().clone();
        let table = match cached {
            Some(t) => t,
            None => {
                let t = Arc::new(self.learn_tool_headers().await);
                *self.registry.tool_headers.table.lock() = Some(t.clone());
                t
            }
        };
        table.get(tool).cloned().unwrap_or_default()
    }

    async fn learn_tool_headers(&self) -> HashMap<String, Vec<ParamHeader>> {
        let mut table = HashMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = if self.modern_now() {
                json!({ "_meta": crate::backend::gateway_envelope() })
            } else {
                json!({})
            };
            if let Some(c) = &cursor {
                params["cursor"] = json!(c);
            }
            let Ok(answer) = self.internal_call("tools/list", params).await else {
                break;
            };
            if answer.is_error() {
                break;
            }
            let page: Value = serde_json::from_str(answer.payload()).unwrap_or(Value::Null);
            for tool in page["tools"].as_array().into_iter().flatten() {
                let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema"))
                else {
                    continue;
                };
                let spec = param_headers(schema);
                if !spec.is_empty() {
                    table.insert(name.to_owned(), spec);
                }
            }
            cursor = page["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        table
    }
}
