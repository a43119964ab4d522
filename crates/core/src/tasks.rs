//! Ownership of 2025-11-25 tasks (experimental `tasks/*`) in shared mode.
//!
//! A task id returned to one session belongs to that session. `tasks/get`, `tasks/result` and
//! `tasks/cancel` naming a task the caller does not own get exactly the answer an unknown task
//! gets (the gateway's own, so nothing distinguishes "someone else's" from "nobody's");
//! `tasks/list` shows only the caller's tasks; `notifications/tasks/status` and messages tagged
//! with `io.modelcontextprotocol/related-task` reach only the owner's listen stream.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::Value;

use switchboard_wire::{codes, object_member, ErrorObject};

/// `_meta` key tying a message to a task.
pub(crate) const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Task methods whose `taskId` names one task.
pub(crate) const BY_ID: &[&str] = &["tasks/get", "tasks/result", "tasks/cancel"];
/// The listing method.
pub(crate) const LIST: &str = "tasks/list";
/// The status notification.
pub(crate) const STATUS: &str = "notifications/tasks/status";

/// Most tasks remembered at once; beyond it the oldest sessions' tasks are not tracked and so
/// become unreachable (refusing is the safe failure).
const MAX_TASKS: usize = 100_000;

/// Task id → owning session id.
#[derive(Debug, Default)]
pub(crate) struct TaskOwners {
    owners: Mutex<HashMap<String, String>>,
}

impl TaskOwners {
    /// Records the task a `CreateTaskResult` names, if any.
    pub(crate) fn record(&self, session: &str, result: &str) {
        let id = RawValue::from_string(result.to_owned())
            .ok()
            .and_then(|r| object_member(&r, "task").map(|t| t.get().to_owned()))
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|t| t["taskId"].as_str().map(str::to_owned));
        let Some(id) = id else { return };
        let mut owners = self.owners.lock();
        if owners.len() < MAX_TASKS {
            owners.insert(id, session.to_owned());
        }
    }

    /// Whether `session` owns `task`.
    pub(crate) fn owns(&self, session: &str, task: &str) -> bool {
        self.owners.lock().get(task).is_some_and(|o| o == session)
    }

    /// The owner of `task`.
    pub(crate) fn owner(&self, task: &str) -> Option<String> {
        self.owners.lock().get(task).cloned()
    }

    /// `tasks/list` result with only `session`'s tasks. `None` if the result is not a list.
    pub(crate) fn filter_list(&self, session: &str, result: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(result).ok()?;
        let owners = self.owners.lock();
        v.get_mut("tasks")?.as_array_mut()?.retain(|t| {
            t["taskId"]
                .as_str()
                .and_then(|id| owners.get(id))
                .is_some_and(|o| o == session)
        });
        Some(v.to_string())
    }

    /// `tasks/list` result without any task a session owns: what a caller without a session
    /// (a Modern request) may see. `None` if the result is not a list.
    pub(crate) fn hide_owned(&self, result: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(result).ok()?;
        let owners = self.owners.lock();
        v.get_mut("tasks")?.as_array_mut()?.retain(|t| {
            t["taskId"]
                .as_str()
                .is_none_or(|id| !owners.contains_key(id))
        });
        Some(v.to_string())
    }

    /// Forgets everything (the backend restarted: its task ids mean nothing any more, and a
    /// new process may hand the same ids to someone else).
    pub(crate) fn clear(&self) {
        self.owners.lock().clear();
    }

    /// Forgets a session's tasks when it ends.
    pub(crate) fn purge(&self, session: &str) {
        self.owners.lock().retain(|_, o| o != session);
    }

    pub(crate) fn len(&self) -> usize {
        self.owners.lock().len()
    }
}

/// The one answer for a task the caller cannot see, whether it exists or not.
pub(crate) fn unknown_task() -> ErrorObject {
    ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: unknown taskId")
}

/// The task a message concerns: `params.taskId` (status notifications) or the related-task
/// `_meta` tag.
pub(crate) fn task_of(params: Option<&RawValue>) -> Option<String> {
    let params = params?;
    let direct = object_member(params, "taskId");
    let related = object_member(params, "_meta")
        .and_then(|m| object_member(m, META_RELATED_TASK))
        .and_then(|r| object_member(r, "taskId"));
    direct
        .or(related)
        .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
}

/// Whether a task-augmented request asked for a task (`params.task`).
pub(crate) fn is_task_request(params: Option<&RawValue>) -> bool {
    params.and_then(|p| object_member(p, "task")).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ownership_and_filtering() {
        let t = TaskOwners::default();
        t.record("a", r#"{"task":{"taskId":"t1","status":"working"}}"#);
        t.record("b", r#"{"task":{"taskId":"t2","status":"working"}}"#);
        t.record("b", r#"{"content":[]}"#);
        assert!(t.owns("a", "t1") && !t.owns("b", "t1") && !t.owns("a", "nope"));
        let list =
            json!({"tasks":[{"taskId":"t1"},{"taskId":"t2"},{"taskId":"t3"}],"nextCursor":"c"})
                .to_string();
        let a: Value = serde_json::from_str(&t.filter_list("a", &list).unwrap()).unwrap();
        assert_eq!(a, json!({"tasks":[{"taskId":"t1"}],"nextCursor":"c"}));
        t.purge("a");
        assert_eq!(t.len(), 1);
        let p = RawValue::from_string(
            r#"{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}"#.into(),
        )
        .unwrap();
        assert_eq!(task_of(Some(&p)).as_deref(), Some("t2"));
    }
}
