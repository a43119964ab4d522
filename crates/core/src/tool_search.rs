//! Tool search for large catalogs (`aggregation.toolSearch`): instead of every backend's
//! tools, `tools/list` shows two tools of the gateway's own, in both eras. `find_tools` ranks
//! the tools the *caller* may call against a query (BM25, `bm25`); `call_tool` calls one of
//! them by name.
//!
//! `call_tool` is unwrapped before admission (`Gateway::handle`, `pipeline.rs`): the
//! inner `tools/call` is what the policy judges, the rate limits count, the audit line records
//! and routing resolves, exactly as if the client had sent it. Only the answer to a forbidden
//! inner name differs from a direct call: it is the unknown-tool answer, so `call_tool` cannot
//! tell a hidden tool from a missing one. `find_tools` is the gateway's, not a backend's: it
//! needs the permission to list tools, and shows only what the caller may call.
//!
//! While tool search is on, the two names shadow any backend tool of the same name (it cannot
//! be called), and a direct `tools/call` of a forbidden tool gets the unknown-tool answer too
//! (else `call_tool`'s masking would protect nothing); a denied call then also counts against
//! the caller's rate limits, as an unknown one does (`access`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use switchboard_wire::{encode_result, object_member, with_members, Message, RequestId};

use crate::access::{Origins, Target};
use crate::catalog::View;
use crate::Principal;
use crate::{Access, CoreError};

mod bm25;

/// The two tools the gateway lists instead of the catalog.
pub(crate) const FIND_TOOLS: &str = "find_tools";
pub(crate) const CALL_TOOL: &str = "call_tool";
const TOOLS_CALL: &str = "tools/call";

/// Results of one search, unless the caller asks for fewer (or more, up to the cap).
const DEFAULT_LIMIT: usize = 10;
const MAX_LIMIT: usize = 50;
/// A longer query is refused: queries are words, not documents.
const MAX_QUERY_BYTES: usize = 2048;

/// Tool search state: the index over the current merged tool list, rebuilt when the list is.
#[derive(Debug, Default)]
pub(crate) struct ToolSearch {
    index: parking_lot::Mutex<Option<(Arc<View>, Arc<bm25::Index>)>>,
}

impl ToolSearch {
    /// The index of `view` plus `extra` (the composites; asked for only when the index is
    /// built). Built once per merged list; the lock is never held across an await, and
    /// building a few thousand tools' index takes a few milliseconds.
    fn index_of(
        &self,
        view: &Arc<View>,
        extra: impl FnOnce() -> Vec<(Arc<str>, Value)>,
    ) -> Arc<bm25::Index> {
        let mut cached = self.index.lock();
        if let Some((built_for, index)) = cached.as_ref() {
            if Arc::ptr_eq(built_for, view) {
                return index.clone();
            }
        }
        let mut parsed: Vec<(Arc<str>, Value)> = view
            .visible
            .entries()
            .iter()
            .map(|e| {
                let item = serde_json::from_str(e.item.get()).unwrap_or(Value::Null);
                (e.exposed.clone(), item)
            })
            .collect();
        parsed.extend(extra());
        let index = Arc::new(bm25::Index::build(parsed.iter().map(|(n, v)| (n, v))));
        *cached = Some((view.clone(), index.clone()));
        index
    }
}

/// Whether `name` is one of the gateway's own tools while tool search is on.
pub(crate) fn is_own_tool(name: &str) -> bool {
    name == FIND_TOOLS || name == CALL_TOOL
}

/// A `call_tool` request rewritten as the `tools/call` it wraps.
#[derive(Debug)]
pub(crate) struct Unwrapped {
    /// The inner request, a whole JSON-RPC message with the outer id and `_meta`.
    pub(crate) body: Vec<u8>,
}

/// A `tools/call` answer while tool search is on, with a policy refusal turned into the
/// unknown-tool answer: neither `call_tool` nor a direct call tells a forbidden tool from a
/// missing one.
pub(crate) fn masked<T>(msg: &Message<'_>, answer: Result<T, CoreError>) -> Result<T, CoreError> {
    match answer {
        Err(CoreError::Forbidden(_)) if msg.method == Some(TOOLS_CALL) => {
            let name = msg.params.and_then(|p| string_member(p, "name"));
            Err(CoreError::UnknownName(
                "tool",
                crate::error::clip(name.as_deref().unwrap_or_default()),
            ))
        }
        other => other,
    }
}

#[derive(Serialize)]
struct Inner<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    method: &'static str,
    params: &'a RawValue,
}

/// What `find_tools` searches and judges with: the merged tool list (`view`, awaited only
/// for a well-formed query), the composites (asked for after it), and the caller's judges.
pub(crate) struct Searched<'a, V> {
    pub(crate) view: V,
    pub(crate) composites: &'a (dyn Fn() -> Vec<(Arc<str>, Value)> + Sync),
    pub(crate) origins: Option<&'a dyn Origins>,
    pub(crate) access: &'a Access,
}

/// `msg` as the `tools/call` it wraps, when it is a well-formed `call_tool` call (its
/// `arguments.name` a string naming another tool) and tool search is on. Anything else is
/// `None`: routed as it is (a malformed `call_tool` is answered by
/// [`ToolSearch::own_tool_call`]).
pub(crate) fn unwrap_call_tool(msg: &Message<'_>) -> Option<Unwrapped> {
    let (Some(TOOLS_CALL), Some(id), Some(params)) = (msg.method, &msg.id, msg.params) else {
        return None;
    };
    if string_member(params, "name").as_deref() != Some(CALL_TOOL) {
        return None;
    }
    let args = object_member(params, "arguments")?;
    let name = string_member(args, "name").filter(|n| n != CALL_TOOL)?;
    let id = RawValue::from_string(id.as_json().to_string()).ok()?;
    // Every other member of the outer params (`_meta`, `task`, an MRTR retry's
    // `inputResponses` and `requestState`) belongs to the inner call as it is.
    let name_json = serde_json::to_string(&name).ok()?;
    let mut set = vec![("name", name_json.as_str())];
    let inner_args = object_member(args, "arguments");
    if let Some(a) = inner_args {
        set.push(("arguments", a.get()));
    }
    let params = with_members(params, &set, |k| k != "arguments")?;
    let inner = Inner {
        jsonrpc: "2.0",
        id: &id,
        method: TOOLS_CALL,
        params: &params,
    };
    let body = serde_json::to_vec(&inner).ok()?;
    Some(Unwrapped { body })
}

/// `tools/list` while tool search is on: the two tools, one page (`list_ttl`: the merged
/// lists' TTL, a Modern answer's `ttlMs`).
pub(crate) fn own_tool_list(
    id: &RequestId,
    cursor: Option<&str>,
    modern: bool,
    list_ttl: Option<Duration>,
) -> Result<Vec<u8>, CoreError> {
    if cursor.is_some() {
        // This list has one page: no cursor was ever issued for it.
        return Err(CoreError::InvalidParams("cursor"));
    }
    let mut result = json!({ "tools": [find_tools_tool(), call_tool_tool()] });
    if modern {
        let ttl = list_ttl.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        result["resultType"] = json!("complete");
        result["ttlMs"] = json!(ttl);
        result["cacheScope"] = json!("private");
    }
    Ok(encode_result(id, &result.to_string()))
}

impl ToolSearch {
    /// A `tools/call` of `find_tools` (or a malformed `call_tool`), answered by the gateway;
    /// `None` for any other call.
    pub(crate) async fn own_tool_call<V>(
        &self,
        caller: &Principal,
        msg: &Message<'_>,
        modern: bool,
        searched: Searched<'_, V>,
    ) -> Option<Result<Vec<u8>, CoreError>>
    where
        V: Future<Output = Result<Arc<View>, CoreError>>,
    {
        let (Some(TOOLS_CALL), Some(id)) = (msg.method, &msg.id) else {
            return None;
        };
        let name = msg.params.and_then(|p| string_member(p, "name"))?;
        match name.as_str() {
            CALL_TOOL => Some(Err(CoreError::InvalidParams(
                "call_tool: arguments.name must be the name of another tool",
            ))),
            FIND_TOOLS => Some(
                self.find_tools(caller, id, msg.params, modern, searched)
                    .await,
            ),
            _ => None,
        }
    }

    async fn find_tools<V>(
        &self,
        caller: &Principal,
        id: &RequestId,
        params: Option<&RawValue>,
        modern: bool,
        searched: Searched<'_, V>,
    ) -> Result<Vec<u8>, CoreError>
    where
        V: Future<Output = Result<Arc<View>, CoreError>>,
    {
        let args = params.and_then(|p| object_member(p, "arguments"));
        let query = args.and_then(|a| string_member(a, "query"));
        let Some(query) = query.filter(|q| !q.trim().is_empty() && q.len() <= MAX_QUERY_BYTES)
        else {
            let text =
                format!("find_tools needs a non-empty `query` of at most {MAX_QUERY_BYTES} bytes");
            return Ok(tool_result(
                id,
                &json!({"content": [{"type": "text", "text": text}], "isError": true}),
                modern,
            ));
        };
        let limit = args
            .and_then(|a| object_member(a, "limit"))
            .and_then(|l| serde_json::from_str::<u64>(l.get()).ok())
            .map_or(DEFAULT_LIMIT, |l| (l as usize).clamp(1, MAX_LIMIT));
        let view = searched.view.await?;
        // Listed once per search (not per hit): the index and the answer read the same.
        let composites = (searched.composites)();
        let index = self.index_of(&view, || composites.clone());
        let (origins, access) = (searched.origins, searched.access);
        let found: Vec<String> = index
            .search(&query)
            .into_iter()
            .filter(|(name, _)| may_call(access, caller, name, origins))
            .filter_map(|(name, _)| definition(&view, &composites, &name))
            .take(limit)
            .collect();
        let tools = format!("[{}]", found.join(","));
        let result = format!(
            r#"{{"content":[{{"type":"text","text":{}}}],"structuredContent":{{"tools":{tools}}}{}}}"#,
            json!(tools),
            if modern {
                r#","resultType":"complete""#
            } else {
                ""
            }
        );
        Ok(encode_result(id, &result))
    }
}

/// Whether `caller` may call the listed tool `exposed` (as list filtering decides it).
fn may_call(
    access: &Access,
    caller: &Principal,
    exposed: &str,
    origins: Option<&dyn Origins>,
) -> bool {
    let target = Target::Tool(exposed.to_owned());
    // A composite is the gateway's own, whatever a backend lists under its name (its
    // call runs the composite): judged first, without an origin, as list filtering does.
    let composite = origins.is_some_and(|o| o.composite(exposed));
    let origin = origins
        .filter(|_| !composite)
        .and_then(|o| o.of_item(&target));
    access.allows_listed(caller, &target, origin.as_ref(), composite)
}

/// The listed definition of the tool `exposed` (a backend's, or a composite), as JSON.
fn definition(view: &View, composites: &[(Arc<str>, Value)], exposed: &str) -> Option<String> {
    if let Some(e) = view
        .visible
        .entries()
        .iter()
        .find(|e| &*e.exposed == exposed)
    {
        return Some(e.item.get().to_owned());
    }
    composites
        .iter()
        .find(|(name, _)| &**name == exposed)
        .map(|(_, listed)| listed.to_string())
}

fn tool_result(id: &RequestId, result: &Value, modern: bool) -> Vec<u8> {
    let mut result = result.clone();
    if modern {
        result["resultType"] = json!("complete");
    }
    encode_result(id, &result.to_string())
}

fn string_member(obj: &RawValue, key: &str) -> Option<String> {
    object_member(obj, key).and_then(|v| serde_json::from_str::<String>(v.get()).ok())
}

fn find_tools_tool() -> Value {
    json!({
        "name": FIND_TOOLS,
        "title": "Find tools",
        "description": "Search the tools available to you by what you want to do. Returns the \
            best-matching tools' definitions (name, description, input schema), best first; \
            call one with call_tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What you want to do, in a few words"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                    "description": format!("Most tools returned (default {DEFAULT_LIMIT})")}
            },
            "required": ["query"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {"tools": {"type": "array", "items": {"type": "object"}}},
            "required": ["tools"]
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    })
}

fn call_tool_tool() -> Value {
    json!({
        "name": CALL_TOOL,
        "title": "Call a tool",
        "description": "Call a tool found with find_tools, by its name, with its arguments.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as find_tools gave it"},
                "arguments": {"type": "object", "description": "The tool's arguments"}
            },
            "required": ["name"]
        }
    })
}
