//! What a guarded request is about: the backend and tool behind the name it uses (in the
//! merged list when aggregating), a task's tool for its `tasks/result`, and a tool's
//! `outputSchema`, as `Guardrails::scope` needs them.

use std::sync::Arc;

use serde_json::Value;
use switchboard_wire::object_member;

use super::{Guardrails, Scope, Target};
use crate::catalog::{Kind, View};
use crate::Exchange;

/// The methods guardrails check (a task's and a completion's answers: every rule).
const GUARDED: [&str; 8] = [
    "tools/call",
    "resources/read",
    "prompts/get",
    "tasks/result",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "completion/complete",
];

/// Where a guarded request's target is looked up.
pub(crate) struct Lookup<'a> {
    /// The backends' task tables (a `tasks/result`'s task names its tool).
    pub(crate) registry: &'a crate::registry::Registry,
    /// Aggregating: the merged list of a kind as it is now (`None`: one backend).
    pub(crate) merged: Option<&'a dyn Fn(Kind) -> Option<Arc<View>>>,
    /// The one backend, when not aggregating.
    pub(crate) primary: &'a crate::BackendId,
}

/// The guardrails covering a request's target (`None`, the fast path: none do, or it is not
/// a method they check): its backend and tool's own name (from the merged list when
/// aggregating; a `tasks/result`'s from its task), the name clients use, and the tool's
/// `outputSchema`.
pub(crate) fn scope_of<'g>(
    guards: &'g Guardrails,
    ex: &Exchange<'_>,
    at: Lookup<'_>,
) -> Option<Scope<'g>> {
    let method = ex.msg.method.filter(|m| GUARDED.contains(m))?;
    let name = match method {
        "resources/read" => ex.msg.param("uri"),
        _ => ex.msg.param("name"),
    }
    .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
    let view = at.merged.and_then(|current| current(kind_of(method)));
    let list = view.as_ref().map(|v| &v.all);
    // A task's result is checked as its tool's, when the task's tool is known.
    let task = (method == "tasks/result").then(|| {
        let owner = crate::tasks::Owner::of(ex.caller, ex.session());
        task_target(at.registry, Some(&owner), ex.msg.params, list)
    });
    let (backend, original, name) = match (at.merged.is_some(), task.flatten()) {
        (_, Some((backend, original, exposed))) => (Some(backend), Some(original), Some(exposed)),
        _ if names_no_tool(method) => (None, None, name),
        (true, None) => {
            let (backend, original) = target_in(list, name.as_deref());
            (backend, original, name)
        }
        (false, None) => (Some(at.primary.to_string()), name.clone(), name),
    };
    let target = Target {
        backend: backend.as_deref().unwrap_or(""),
        original: original.as_deref(),
        exposed: name.as_deref(),
        method,
    };
    let mut scope = guards.scope(target)?;
    scope.output_schema = output_schema(list, method, name.as_deref());
    Some(scope)
}

/// Whether a guarded method's answer names no tool the gateway could look up: a task's
/// (`tasks/get`, `tasks/list`, `tasks/cancel`, and a `tasks/result` whose task's tool is not
/// known here, [`task_target`]) and a completion's. Every configured rule applies to them
/// (`Guardrails::scope` with no backend), whatever its level or `tools`.
pub(crate) fn names_no_tool(method: &str) -> bool {
    method.starts_with("tasks/") || method == "completion/complete"
}

/// What a `tasks/result` is the answer of: the task's backend, and the tool whose call
/// created it (its own name, and the name clients use: in `tools`, the merged list, when
/// aggregating). `None` when the task or its tool is not known here.
pub(crate) fn task_target(
    registry: &crate::registry::Registry,
    owner: Option<&crate::tasks::Owner>,
    params: Option<&serde_json::value::RawValue>,
    tools: Option<&crate::catalog::Merged>,
) -> Option<(String, String, String)> {
    let handle = crate::tasks::requested_task(params)?;
    let (backend, task) = registry.find_task(owner, &handle)?;
    let original = registry.tables(&backend).tasks.tool_of(&task)?;
    let exposed = match tools {
        Some(list) => (list.entries().iter())
            .find(|e| e.backend == backend && *e.original == *original)?
            .exposed
            .to_string(),
        None => original.clone(),
    };
    Some((backend.to_string(), original, exposed))
}

/// The merged list a guarded request's name is found in.
pub(crate) fn kind_of(method: &str) -> crate::catalog::Kind {
    match method {
        "resources/read" => crate::catalog::Kind::Resources,
        "prompts/get" => crate::catalog::Kind::Prompts,
        _ => crate::catalog::Kind::Tools,
    }
}

/// The backend and original name behind an exposed name in a merged list.
pub(crate) fn target_in(
    list: Option<&crate::catalog::Merged>,
    name: Option<&str>,
) -> (Option<String>, Option<String>) {
    match list.zip(name).and_then(|(l, n)| l.entry(n)) {
        Some(entry) => (
            Some(entry.backend.to_string()),
            Some(entry.original.to_string()),
        ),
        None => (None, None),
    }
}

/// A tool's `outputSchema` from its merged-list entry.
pub(crate) fn output_schema(
    list: Option<&crate::catalog::Merged>,
    method: &str,
    name: Option<&str>,
) -> Option<Value> {
    if method != "tools/call" {
        return None;
    }
    let entry = list?.entry(name?)?;
    let schema = object_member(&entry.item, "outputSchema")?;
    serde_json::from_str(schema.get()).ok()
}
