//! Ownership of 2025-11-25 tasks (experimental `tasks/*`) in shared mode.
//!
//! A task id returned to one session belongs to that session. `tasks/get`, `tasks/result` and
//! `tasks/cancel` naming a task the caller does not own get exactly the answer an unknown task
//! gets (the gateway's own, so nothing distinguishes "someone else's" from "nobody's");
//! `tasks/list` shows only the caller's tasks; `notifications/tasks/status` and messages tagged
//! with `io.modelcontextprotocol/related-task` reach only the owner's listen stream.

use std::collections::{HashMap, VecDeque};

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

/// Most tasks remembered at once for all sessions together; beyond it new tasks are not
/// tracked and so are unreachable (refusing is the safe failure). The per-session bound below
/// keeps one session from getting there alone.
const MAX_TASKS: usize = 100_000;
/// Most tasks remembered per session: a session's next task makes it forget its oldest, so a
/// session that creates tasks without end only loses track of its own.
const MAX_TASKS_PER_SESSION: usize = 1024;

/// Task id → owning session id, and each session's task ids, oldest first.
#[derive(Debug, Default)]
pub(crate) struct TaskOwners {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    owners: HashMap<String, String>,
    by_session: HashMap<String, VecDeque<String>>,
}

impl Table {
    /// Forgets `task` if `session` owns it.
    fn forget(&mut self, session: &str, task: &str) {
        if self.owners.get(task).is_some_and(|o| o == session) {
            self.owners.remove(task);
        }
    }
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
        let mut table = self.table.lock();
        if table.owners.get(&id).is_some_and(|o| o == session) {
            return; // Already this session's: one index row per task.
        }
        if table.owners.len() >= MAX_TASKS && !table.owners.contains_key(&id) {
            return;
        }
        table.owners.insert(id.clone(), session.to_owned());
        let mine = table.by_session.entry(session.to_owned()).or_default();
        mine.push_back(id);
        let oldest = (mine.len() > MAX_TASKS_PER_SESSION)
            .then(|| mine.pop_front())
            .flatten();
        if let Some(oldest) = oldest {
            table.forget(session, &oldest);
        }
    }

    /// Whether `session` owns `task`.
    pub(crate) fn owns(&self, session: &str, task: &str) -> bool {
        self.table
            .lock()
            .owners
            .get(task)
            .is_some_and(|o| o == session)
    }

    /// The owner of `task`.
    pub(crate) fn owner(&self, task: &str) -> Option<String> {
        self.table.lock().owners.get(task).cloned()
    }

    /// `tasks/list` result with only `session`'s tasks. `None` if the result is not a list.
    pub(crate) fn filter_list(&self, session: &str, result: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(result).ok()?;
        let table = self.table.lock();
        v.get_mut("tasks")?.as_array_mut()?.retain(|t| {
            t["taskId"]
                .as_str()
                .and_then(|id| table.owners.get(id))
                .is_some_and(|o| o == session)
        });
        Some(v.to_string())
    }

    /// `tasks/list` result without any task a session owns: what a caller without a session
    /// (a Modern request) may see. `None` if the result is not a list.
    pub(crate) fn hide_owned(&self, result: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(result).ok()?;
        let table = self.table.lock();
        v.get_mut("tasks")?.as_array_mut()?.retain(|t| {
            t["taskId"]
                .as_str()
                .is_none_or(|id| !table.owners.contains_key(id))
        });
        Some(v.to_string())
    }

    /// Forgets everything (the backend restarted: its task ids mean nothing any more, and a
    /// new process may hand the same ids to someone else).
    pub(crate) fn clear(&self) {
        *self.table.lock() = Table::default();
    }

    /// Forgets a session's tasks when it ends (its own index: no scan of everyone's).
    pub(crate) fn purge(&self, session: &str) {
        let mut table = self.table.lock();
        for task in table.by_session.remove(session).unwrap_or_default() {
            table.forget(session, &task);
        }
    }

    /// Entries held: tracked tasks plus per-session index rows (zero when idle).
    pub(crate) fn len(&self) -> usize {
        let table = self.table.lock();
        table.owners.len() + table.by_session.len()
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
        assert_eq!(t.len(), 2, "b's task and b's index row");
        t.purge("b");
        assert_eq!(t.len(), 0);
        let p = RawValue::from_string(
            r#"{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}"#.into(),
        )
        .unwrap();
        assert_eq!(task_of(Some(&p)).as_deref(), Some("t2"));
    }

    /// A session that creates tasks without end forgets its own oldest ones; another
    /// session's tasks stay reachable.
    #[test]
    fn one_session_cannot_crowd_out_anothers_tasks() {
        let t = TaskOwners::default();
        let task = |id: &str| format!(r#"{{"task":{{"taskId":"{id}","status":"working"}}}}"#);
        t.record("victim", &task("v1"));
        t.record("victim", &task("v1"));
        assert_eq!(t.len(), 2, "a task recorded twice is indexed once");
        for i in 0..MAX_TASKS_PER_SESSION + 10 {
            t.record("greedy", &task(&format!("g{i}")));
        }
        assert!(t.owns("victim", "v1"));
        assert!(
            !t.owns("greedy", "g0"),
            "the greedy session's oldest is forgotten"
        );
        let newest = format!("g{}", MAX_TASKS_PER_SESSION + 9);
        assert!(t.owns("greedy", &newest));
        assert_eq!(t.len(), 1 + MAX_TASKS_PER_SESSION + 2);
        t.purge("greedy");
        t.purge("victim");
        assert_eq!(t.len(), 0);
    }
}
