//! What a guarded request is about: the backend and tool behind the name it uses (in the
//! merged list when aggregating), a task's tool for its `tasks/result`, and a tool's
//! `outputSchema`, as `Guardrails::scope` needs them.

use std::sync::Arc;

use serde_json::Value;
use switchboard_wire::object_member;

use super::{Guardrails, Scope, Target};
use crate::catalog::{Kind, View};
use crate::Exchange;

/// The methods guardrails check (a task's and a completion's answers: every rule; a
/// `tasks/update`'s `inputResponses` on the way in).
const GUARDED: [&str; 9] = [
    "tools/call",
    "resources/read",
    "prompts/get",
    "tasks/result",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
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

/// Whether guardrails check `method`'s requests or answers.
pub(crate) fn checks(method: Option<&str>) -> bool {
    method.is_some_and(|m| GUARDED.contains(&m))
}

/// What the guardrails judged a request's target to be (the pipeline's stage 3½), for the
/// route to confirm (stage 5, [`Checked::confirm`], beside admission's own judgment): the
/// merged lists can be rebuilt, and a reload can replace the guardrails and add backends,
/// between the two. Only for a method guardrails check ([`checks`]).
pub(crate) struct Checked<'a> {
    /// The guardrails in force now (a reload replaces them).
    in_force: &'a arc_swap::ArcSwapOption<Guardrails>,
    /// The ones that checked the request (`None`: none were configured).
    by: Option<Arc<Guardrails>>,
    /// The item whose rules checked it, found by the name the request uses; `None` when
    /// every configured rule did (a name the merged lists did not hold), none did (no
    /// guardrails), or its route is not chosen by that name (a task's, a completion's).
    item: Option<Item>,
}

/// A listed item, as [`Checked`] judged it: its backend, and its own name there when routing
/// renames it (a tool or prompt exposed under another name; never a resource URI, which
/// routes as sent, whatever the case of its scheme).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Item {
    backend: String,
    renamed: Option<String>,
}

impl Item {
    /// Whether a route to `name` at `backend` reaches this item.
    fn reached(&self, backend: &crate::BackendId, name: &crate::destination::Name) -> bool {
        use crate::destination::Name;
        let renamed = match name {
            Name::AsClient => None,
            Name::Renamed(o) | Name::RenamedRef(o) => Some(o.as_ref()),
        };
        self.backend == backend.as_str() && self.renamed.as_deref() == renamed
    }
}

impl std::fmt::Debug for Checked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("guarded", &self.by.is_some())
            .field("item", &self.item)
            .finish_non_exhaustive()
    }
}

impl<'a> Checked<'a> {
    /// A request checked by `by` (the guardrails it holds; `None`, none configured), judged
    /// to be about `item`.
    pub(crate) fn new(
        in_force: &'a arc_swap::ArcSwapOption<Guardrails>,
        by: Option<Arc<Guardrails>>,
        item: Option<Item>,
    ) -> Self {
        Checked { in_force, by, item }
    }

    /// Whether routing to `name` at `backend` reaches what the rules that checked the
    /// request were chosen for: the guardrails that checked it are still the ones in force
    /// (a reload in between may have added the routed backend, or replaced it under the same
    /// name, with rules of its own), and a judged item is the one routed to (the merged lists
    /// were rebuilt in between otherwise: another item's rules checked it). Otherwise the
    /// caller retries, checked by what is in force then.
    pub(crate) fn confirm(
        &self,
        backend: &crate::BackendId,
        name: &crate::destination::Name,
    ) -> Result<(), crate::CoreError> {
        let held = match (&self.by, &*self.in_force.load()) {
            (Some(by), Some(now)) => Arc::ptr_eq(by, now),
            (by, now) => by.is_none() && now.is_none(),
        };
        let reached = (self.item.as_ref()).is_none_or(|item| item.reached(backend, name));
        match held && reached {
            true => Ok(()),
            false => Err(crate::CoreError::ChangedMeanwhile),
        }
    }
}

/// The guardrails covering a request's target (the scope: `None`, the fast path, when none
/// do), and the item they judged it to be ([`Checked`]); `None` when it is not a method they
/// check. The target: its backend and tool's own name (from the merged list when
/// aggregating; a `tasks/result`'s from its task), the name clients use, and the tool's
/// `outputSchema`.
pub(crate) fn scope_of<'g>(
    guards: &'g Guardrails,
    ex: &Exchange<'_>,
    at: Lookup<'_>,
) -> Option<(Option<Item>, Option<Scope<'g>>)> {
    let method = ex.msg.method.filter(|m| GUARDED.contains(m))?;
    let name = match method {
        "resources/read" => ex.msg.param("uri"),
        _ => ex.msg.param("name"),
    }
    .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
    let view = at.merged.and_then(|current| current(kind_of(method)));
    let list = view.as_ref().map(|v| &v.all);
    // A task's result, and its update (the answers to its questions), are checked as its
    // tool's, when the task's tool is known (else by every rule, `names_no_tool`).
    let task = matches!(method, "tasks/result" | "tasks/update").then(|| {
        let owner = crate::tasks::Owner::of(ex.caller, ex.session());
        task_target(at.registry, Some(&owner), ex.msg.params, list)
    });
    let (backend, original, name, by_name) = match (at.merged.is_some(), task.flatten()) {
        (_, Some((backend, original, exposed))) => {
            (Some(backend), Some(original), Some(exposed), false)
        }
        _ if names_no_tool(method) => (None, None, name, false),
        (true, None) => {
            let (backend, original) = target_in(list, name.as_deref());
            (backend, original, name, true)
        }
        (false, None) => (Some(at.primary.to_string()), name.clone(), name, true),
    };
    let target = Target {
        backend: backend.as_deref().unwrap_or(""),
        original: original.as_deref(),
        exposed: name.as_deref(),
        method,
    };
    let scope = guards.scope(target).map(|mut scope| {
        scope.output_schema = output_schema(list, method, name.as_deref());
        scope
    });
    let item = match (by_name, backend, original, name) {
        (true, Some(backend), Some(original), Some(exposed)) => Some(Item {
            backend,
            renamed: (method != "resources/read" && original != exposed).then_some(original),
        }),
        _ => None,
    };
    Some((item, scope))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arc_swap::ArcSwapOption;

    use super::{Checked, Item};
    use crate::destination::Name;
    use crate::guardrails::Guardrails;
    use crate::{BackendId, CoreError};

    fn id(name: &str) -> BackendId {
        BackendId::try_from(name).expect("a backend name")
    }

    fn item(backend: &str, renamed: Option<&str>) -> Option<Item> {
        Some(Item {
            backend: backend.into(),
            renamed: renamed.map(str::to_owned),
        })
    }

    fn changed(r: Result<(), CoreError>) -> bool {
        matches!(r, Err(CoreError::ChangedMeanwhile))
    }

    /// A judged item is confirmed only by a route to that same item: its backend, renamed to
    /// its own name there exactly when it was judged to be renamed.
    #[test]
    fn a_judged_item_must_be_the_one_routed_to() {
        let in_force = ArcSwapOption::new(Some(Arc::new(Guardrails::default())));
        let checked = Checked::new(&in_force, in_force.load_full(), item("a", Some("search")));
        let renamed = Name::Renamed("search".into());
        assert!(checked.confirm(&id("a"), &renamed).is_ok());
        assert!(changed(checked.confirm(&id("b"), &renamed)));
        assert!(changed(checked.confirm(&id("a"), &Name::AsClient)));
        let other = Name::Renamed("find".into());
        assert!(changed(checked.confirm(&id("a"), &other)));
        let bare = Checked::new(&in_force, in_force.load_full(), item("a", None));
        assert!(bare.confirm(&id("a"), &Name::AsClient).is_ok());
        assert!(changed(bare.confirm(&id("a"), &renamed)));
    }

    /// Guardrails replaced between the check and the route: refused even for the same item
    /// (a reload may have replaced its backend under the same name, with rules of its own).
    #[test]
    fn a_judged_item_is_not_confirmed_under_replaced_guardrails() {
        let in_force = ArcSwapOption::new(Some(Arc::new(Guardrails::default())));
        let bare = Checked::new(&in_force, in_force.load_full(), item("a", None));
        in_force.store(Some(Arc::new(Guardrails::default())));
        assert!(changed(bare.confirm(&id("a"), &Name::AsClient)));
    }

    /// Without an item (every rule checked it, or none), the route is confirmed only while
    /// the guardrails that checked it are still the ones in force.
    #[test]
    fn without_an_item_the_guardrails_must_still_be_in_force() {
        let in_force = ArcSwapOption::new(Some(Arc::new(Guardrails::default())));
        let every_rule = Checked::new(&in_force, in_force.load_full(), None);
        assert!(every_rule.confirm(&id("x"), &Name::AsClient).is_ok());
        in_force.store(Some(Arc::new(Guardrails::default())));
        assert!(changed(every_rule.confirm(&id("x"), &Name::AsClient)));
        in_force.store(None);
        assert!(changed(every_rule.confirm(&id("x"), &Name::AsClient)));

        let none = Checked::new(&in_force, None, None);
        assert!(none.confirm(&id("x"), &Name::AsClient).is_ok());
        in_force.store(Some(Arc::new(Guardrails::default())));
        assert!(changed(none.confirm(&id("x"), &Name::AsClient)));
    }
}
