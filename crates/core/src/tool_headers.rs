//! Which `tools/call` arguments a client must mirror in `Mcp-Param-*` headers (2026-07-28,
//! SEP-2243), and which tools a Legacy backend runs as tasks: learned from the backend's
//! `tools/list`, cached, and forgotten when the backend says its tools changed. A stdio
//! backend never sees HTTP headers, so the gateway is the one that must check them.
//!
//! Learning is single-flight, bounded in time, and keeps only a complete walk (`flight`).
//! While the backend cannot be walked, calls go unchecked (fail open): a backend whose
//! `tools/list` errors (some implement `tools/call` only) must keep serving, and its
//! designations are unknowable anyway. The failure is logged and retried a second later.

mod flight;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use switchboard_wire::headers::{param_headers, ParamHeader};

/// The call whose arguments the designations are about.
pub(crate) const TOOLS_CALL: &str = "tools/call";

/// The list the designations are learned from.
pub(crate) const TOOLS_LIST: &str = "tools/list";

/// What one walk of a backend's `tools/list` taught the gateway.
#[derive(Debug, Default)]
struct Learned {
    /// Tool name → its header designations (only tools that have any).
    headers: HashMap<String, Arc<[ParamHeader]>>,
    /// Tools a Legacy backend runs as 2025-11-25 tasks (`execution.taskSupport` `optional`
    /// or `required`): a Modern client declaring the Tasks extension gets a task of them.
    tasks: HashSet<String>,
}

type Table = Arc<Learned>;

/// Pages of `tools/list` read at most (a backend paginating forever must not stall requests).
const MAX_PAGES: usize = 50;

/// One backend's designations (`registry::BackendTables`): empty until first needed and
/// after every tools `list_changed`.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders {
    cache: flight::SingleFlight<Table>,
}

impl ToolHeaders {
    /// The designations of the backend's tool `name` (its own name); `None` when it has
    /// none, is unknown, or the backend's tools cannot be learned right now. Learned, when
    /// nobody holds or is learning them, by walking the backend's `tools/list`, `fetch` reading
    /// the page at a cursor.
    pub(crate) async fn of<F, P>(&self, name: &str, fetch: F) -> Option<Arc<[ParamHeader]>>
    where
        F: Fn(Option<String>) -> P,
        P: Future<Output = Result<Value, String>>,
    {
        let table = self.cache.get(walk(fetch)).await?;
        table.headers.get(name).cloned()
    }

    /// Whether the backend's tool `name` (its own name) runs as a 2025-11-25 task; `false`
    /// when it does not, is unknown, or the backend's tools cannot be learned right now.
    pub(crate) async fn runs_as_task<F, P>(&self, name: &str, fetch: F) -> bool
    where
        F: Fn(Option<String>) -> P,
        P: Future<Output = Result<Value, String>>,
    {
        let table = self.cache.get(walk(fetch)).await;
        table.is_some_and(|t| t.tasks.contains(name))
    }

    /// Forgets the designations (the backend's tools changed), and any walk in progress.
    pub(crate) fn invalidate(&self) {
        self.cache.invalidate();
    }
}

/// Walks every page of a backend's `tools/list` (`fetch` reads the one at a cursor). Any
/// failure fails the whole walk: a partial table would silently skip the checks of the tools
/// it misses.
async fn walk<F, P>(fetch: F) -> Result<Table, String>
where
    F: Fn(Option<String>) -> P,
    P: Future<Output = Result<Value, String>>,
{
    let mut table = Learned::default();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = fetch(cursor.take()).await?;
        for tool in page["tools"].as_array().into_iter().flatten() {
            let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema"))
            else {
                continue;
            };
            let spec = param_headers(schema);
            if !spec.is_empty() {
                table.headers.insert(name.to_owned(), Arc::from(spec));
            }
            let support = tool["execution"]["taskSupport"].as_str();
            if matches!(support, Some("optional" | "required")) {
                table.tasks.insert(name.to_owned());
            }
        }
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok(Arc::new(table));
        }
    }
    Err(format!("tools/list has more than {MAX_PAGES} pages"))
}
