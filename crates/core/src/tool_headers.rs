//! Which `tools/call` arguments a client must mirror in `Mcp-Param-*` headers (2026-07-28,
//! SEP-2243): learned from the backend's `tools/list`, cached, and forgotten when the backend
//! says its tools changed. A stdio backend never sees HTTP headers, so the gateway is the one
//! that must check them.
//!
//! Learning is single-flight, bounded in time, and keeps only a complete walk (`flight`).
//! While the backend cannot be walked, calls go unchecked (fail open): a backend whose
//! `tools/list` errors (some implement `tools/call` only) must keep serving, and its
//! designations are unknowable anyway. The failure is logged and retried a second later.

mod flight;

use std::collections::HashMap;
use std::sync::Arc;

use switchboard_wire::headers::{param_headers, ParamHeader};

use crate::resolve::From;
use crate::BackendId;
use crate::Gateway;

/// The call whose arguments the designations are about.
const TOOLS_CALL: &str = "tools/call";

/// Tool name → its header designations (only tools that have any).
type Table = Arc<HashMap<String, Arc<[ParamHeader]>>>;

/// The cache; empty until first needed and after every tools `list_changed`.
pub(crate) type ToolHeaders = flight::SingleFlight<Table>;

/// Pages of `tools/list` read at most (a backend paginating forever must not stall requests).
const MAX_PAGES: usize = 50;

impl Gateway {
    /// The `Mcp-Param-*` designations of `tool` for `caller`; `None` when it has none, is
    /// unknown, hidden from the caller (a hidden tool must answer as a missing one, which has
    /// no designations to check: admission refuses it next), or the backend's tools cannot be
    /// learned right now.
    pub(crate) async fn param_headers(
        &self,
        caller: &crate::Principal,
        tool: &str,
    ) -> Option<Arc<[ParamHeader]>> {
        // The backend the Modern `tools/call` of `tool` would go to, and its name there
        // (aggregating: the merged list's; `None`, unchecked, before it is built — it is
        // built at startup).
        let (backend, name) = match self.vmcp() {
            Some(vmcp) => {
                let view = vmcp.current(crate::catalog::Kind::Tools)?;
                let (backend, original) = view.all.lookup(tool)?;
                (backend.clone(), original.to_owned())
            }
            None => {
                let route = self.resolve(From::Modern, TOOLS_CALL, None).ok()??;
                (route.backend, tool.to_owned())
            }
        };
        let tables = self.registry.tables(&backend);
        let table = tables
            .tool_headers
            .get(self.learn_tool_headers(&backend))
            .await?;
        let spec = table.get(&name).cloned()?;
        // Judged only for the few tools that designate headers: the common call is judged
        // once, by admission.
        self.visible_tool(caller, tool).then_some(spec)
    }

    /// Whether `caller`'s lists show `tool` (always, without a policy).
    fn visible_tool(&self, caller: &crate::Principal, tool: &str) -> bool {
        if !self.config.access.has_policy() {
            return true;
        }
        let target = crate::access::Target::Tool(tool.to_owned());
        let origins = self.origins();
        let origin = origins.and_then(|o| o.of_item(&target));
        let composite = origins.is_some_and(|o| o.composite(tool));
        (origins.is_none() || origin.is_some() || composite)
            && self
                .config
                .access
                .allows(caller, "call_tool", &target, origin.as_ref())
    }

    /// Walks every page of `backend`'s `tools/list`. Any failure fails the whole walk: a
    /// partial table would silently skip the checks of the tools it misses.
    async fn learn_tool_headers(&self, backend: &BackendId) -> Result<Table, String> {
        let mut table = HashMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .list_page(backend, "tools/list", cursor.as_deref())
                .await?;
            for tool in page["tools"].as_array().into_iter().flatten() {
                let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema"))
                else {
                    continue;
                };
                let spec = param_headers(schema);
                if !spec.is_empty() {
                    table.insert(name.to_owned(), Arc::from(spec));
                }
            }
            cursor = page["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                return Ok(Arc::new(table));
            }
        }
        Err(format!("tools/list has more than {MAX_PAGES} pages"))
    }
}
