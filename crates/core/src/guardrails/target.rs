//! What a guarded request is about: the backend and tool behind the name it uses (in the
//! merged list when aggregating), a task's tool for its `tasks/result`, and a tool's
//! `outputSchema`, as `Guardrails::scope` needs them.

use serde_json::Value;
use switchboard_wire::object_member;

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
