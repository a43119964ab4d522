//! Who owns each task (2025-11-25 `tasks/*`, and the Modern Tasks extension's handles) on a
//! shared backend. A task id means something only at the backend that issued it, so each
//! backend has its own [`TaskOwners`] (`registry::BackendTables`): tasks are keyed by
//! (backend, task id).
//!
//! Every task the gateway hands out is owned: by the caller's Legacy session when there is
//! one, otherwise by the principal (issuer and subject) that created it. The anonymous
//! principal exists only on a gateway without authentication, where every caller is that one
//! user: its sessionless tasks are the anonymous principal's, as its MRTR calls and rate limit
//! are (an authenticated principal can never name them). A session's tasks and its principal's
//! stateless tasks are separate scopes: a session sees only its own, a sessionless call only
//! its principal's stateless ones.
//!
//! `tasks/get`, `tasks/result`, `tasks/cancel` (and Modern `tasks/update`) naming a task the
//! caller does not own get exactly the answer an unknown task gets (the gateway's own, before
//! the backend is asked, so nothing distinguishes "someone else's" from "nobody's");
//! `tasks/list` shows only the caller's tasks; `notifications/tasks/status` and messages
//! tagged with `io.modelcontextprotocol/related-task` reach only the owning session's listen
//! stream (a principal-owned task has no stream to go to: dropped, never broadcast).
//!
//! Clients never see a backend's task id. Each recorded task gets a handle minted from the
//! CSPRNG (`sbt-` and 128 bits), bound to its owner and, by the table it lives in, to its
//! backend: answers, listings and status notifications name the handle (`expose`), and a task
//! method naming it is sent to that backend under the backend's own id (`pipeline/tasks.rs`).
//! Two backends handing out the same ids, or a guessed id, name nothing for anyone else.
//! Handles live in the process that minted them, next to the backend process (or upstream
//! session) running the task. With replicas a handle names its replica
//! (`sbt-REPLICA-<128 bits>`), and a task method naming another replica's handle is served
//! there over the hop (`session_store::home`), where the owner check happens as here.

use std::collections::{HashMap, HashSet, VecDeque};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::Value;

use switchboard_upstream::BackendResponse;
use switchboard_wire::{object_member, ResultMarks};

use crate::session::{SessionId, Sessions};
use crate::Principal;

/// `_meta` key tying a message to a task.
pub(crate) const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Task methods whose `taskId` names one task (`tasks/update` is the Modern extension's).
pub(crate) const BY_ID: &[&str] = &["tasks/get", "tasks/result", "tasks/cancel", "tasks/update"];
/// The listing method.
pub(crate) const LIST: &str = "tasks/list";
/// Task methods the Modern Tasks extension does not have (its `tasks/get` inlines the result,
/// and there is no listing): "method not found" for a Modern request.
pub(crate) const MODERN_REMOVED: &[&str] = &["tasks/result", LIST];
/// The Modern Tasks extension's identifier (under `capabilities.extensions`).
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The method a Modern backend may answer with a task handle unasked (Tasks extension).
pub(crate) const MAY_CREATE: &str = "tools/call";
/// The requests a backend may ask a task's client (input inside a task).
pub(crate) const QUESTIONS: &[&str] =
    &["elicitation/create", "sampling/createMessage", "roots/list"];
/// The status notification.
pub(crate) const STATUS: &str = "notifications/tasks/status";

mod expose;
pub(crate) mod questions;
mod request;
pub(crate) mod watch;
pub(crate) use expose::strip_task_support;
pub(crate) use expose::{finished, names_only, one_task_named, renamed, renamed_answer};
pub(crate) use expose::{names_a_task, untagged, Untagged};
pub(crate) use questions::TaskQuestions;
pub(crate) use request::*;
mod refusals;
pub use refusals::unknown_task;
pub(crate) use refusals::{
    ambiguous_answer, ambiguous_task, missing_extension, untracked_on_replicas, untracked_task,
};

/// Who holds the tasks a routed answer creates (`destination::Route::task_holder`), as the
/// task stage's finishing (`finished`) treats them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A session's own process: its task ids are the session's alone, passed as they are.
    Own,
    /// A backend with replicas: it keeps no tasks (a task lives in one process).
    Replicas,
    /// A shared backend: a task it creates reaches its owner under a handle.
    Shared,
}

/// Most tasks remembered at once for all owners together; a new task beyond it makes the
/// principal holding the most forget its oldest (`Table::make_room`). The per-owner and
/// per-principal bounds below keep one owner or principal from getting there alone.
const MAX_TASKS: usize = 100_000;
/// Most tasks remembered per owner: an owner's next task makes it forget its oldest, so an
/// owner that creates tasks without end only loses track of its own.
const MAX_TASKS_PER_OWNER: usize = 1024;
/// Most tasks remembered per principal, over all its owners (its sessions, and itself
/// sessionless): past it, its next task in another owner is not tracked (refused as
/// [`MAX_TASKS`] would be), so one principal opening sessions cannot fill the table alone.
/// Not the anonymous principal's: on a gateway without authentication it is every caller.
const MAX_TASKS_PER_PRINCIPAL: usize = MAX_TASKS / 8;

/// (issuer, subject): whose tasks count together against [`MAX_TASKS_PER_PRINCIPAL`].
type PrincipalKey = std::sync::Arc<(String, String)>;
/// Most retired task ids remembered (see `Table::retired`); the oldest is forgotten first.
const MAX_RETIRED: usize = 100_000;

/// Who may name a task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// A Legacy session (itself owned by one principal).
    Session(String),
    /// A principal calling without a session (Modern, or sessionless Legacy).
    Principal { issuer: String, subject: String },
}

impl Owner {
    /// The owner of tasks `caller` creates or names in `session`: the session, else the
    /// principal (the anonymous one on a gateway without authentication).
    pub(crate) fn of(caller: &Principal, session: Option<&SessionId>) -> Owner {
        match session {
            Some(s) => Owner::Session(s.as_str().to_owned()),
            None => Owner::Principal {
                issuer: caller.issuer.clone(),
                subject: caller.subject.clone(),
            },
        }
    }

    /// A session's owner key (for look-ups by session id alone).
    pub(crate) fn session(id: &str) -> Owner {
        Owner::Session(id.to_owned())
    }
}

/// Task id → owner, and each owner's task ids, oldest first.
#[derive(Debug, Default)]
pub(crate) struct TaskOwners {
    table: Mutex<Table>,
    /// This replica's name, in the handles minted here (with replicas).
    replica: Option<String>,
    /// Woken whenever a task is recorded (`owner_soon`).
    recorded: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// The backend's task id → its owner and the handle the gateway gave the owner.
    owners: HashMap<String, Owned>,
    /// Handle → the backend's task id.
    handles: HashMap<String, String>,
    by_owner: HashMap<Owner, VecDeque<String>>,
    /// How many tracked tasks each principal holds, over all its owners.
    per_principal: HashMap<PrincipalKey, usize>,
    /// Ids no one may be given again: contested (handed out twice), or forgotten while the
    /// backend may still run them (their session ended, their owner's bound evicted them).
    /// Without it, a backend that repeats ids would give the next caller to bring one an
    /// earlier owner's task. Oldest first, at most [`MAX_RETIRED`].
    retired: HashSet<String>,
    retired_order: VecDeque<String>,
}

/// One tracked task: who owns it, and the handle its owner knows it by.
#[derive(Debug)]
struct Owned {
    owner: Owner,
    /// The principal the owner is (or whose session it is).
    principal: PrincipalKey,
    handle: String,
    /// The backend's own name of the tool whose call created it (its result is checked by
    /// that tool's guardrails).
    tool: Option<String>,
}

impl Table {
    /// Forgets `task` (and its handle) if `owner` owns it.
    fn forget(&mut self, owner: &Owner, task: &str) {
        if self.owners.get(task).is_some_and(|o| &o.owner == owner) {
            self.remove(task);
        }
    }

    /// Room for one more task in a full table: the oldest task of the busiest owner of the
    /// principal holding the most is forgotten (and retired), so that a few principals
    /// within their shares, or the anonymous one, cannot keep every other caller's tasks
    /// untracked (review MEDIUM: records are forgotten only with their session or owner).
    /// Scans the owners: only when the table is full.
    fn make_room(&mut self) -> bool {
        let heaviest = (self.per_principal.iter())
            .max_by_key(|(_, held)| **held)
            .map(|(principal, _)| principal.clone());
        let Some(heaviest) = heaviest else {
            return false;
        };
        let owners = &self.owners;
        let of_heaviest = |ids: &&VecDeque<String>| {
            (ids.front())
                .and_then(|id| owners.get(id))
                .is_some_and(|o| o.principal == heaviest)
        };
        let oldest = (self.by_owner.values())
            .filter(of_heaviest)
            .max_by_key(|ids| ids.len())
            .and_then(|ids| ids.front().cloned());
        match oldest {
            Some(task) => {
                self.remove(&task);
                true
            }
            None => false,
        }
    }

    /// Forgets `task` and retires its id: no owner is given it again.
    fn remove(&mut self, task: &str) {
        if let Some(owned) = self.owners.remove(task) {
            self.handles.remove(&owned.handle);
            if let Some(held) = self.per_principal.get_mut(&owned.principal) {
                *held -= 1;
                if *held == 0 {
                    self.per_principal.remove(&owned.principal);
                }
            }
            if let Some(ids) = self.by_owner.get_mut(&owned.owner) {
                ids.retain(|id| id != task);
                if ids.is_empty() {
                    self.by_owner.remove(&owned.owner);
                }
            }
        }
        self.retire(task);
    }

    fn retire(&mut self, task: &str) {
        if !self.retired.insert(task.to_owned()) {
            return;
        }
        self.retired_order.push_back(task.to_owned());
        if self.retired_order.len() > MAX_RETIRED {
            if let Some(oldest) = self.retired_order.pop_front() {
                self.retired.remove(&oldest);
            }
        }
    }

    fn owns(&self, owner: Option<&Owner>, task: &str) -> bool {
        owner.is_some_and(|owner| self.owners.get(task).is_some_and(|o| &o.owner == owner))
    }

    /// The handle `owner` knows `task` by (none for another owner's task).
    fn handle(&self, owner: Option<&Owner>, task: &str) -> Option<&str> {
        let owned = self.owners.get(task)?;
        (Some(&owned.owner) == owner).then_some(owned.handle.as_str())
    }
}

/// Prefix of the task handles the gateway mints (recognisable in logs, like route keys).
const HANDLE_PREFIX: &str = "sbt-";

/// A fresh task handle: 128 bits from the CSPRNG (`route::random_hex`), after the replica
/// that minted it when there are replicas. A handle names a task only together with its
/// owner: nothing about it says which backend, or whose, it is.
fn mint_handle(replica: Option<&str>) -> String {
    match replica {
        Some(r) => format!("{HANDLE_PREFIX}{r}-{}", crate::route::random_hex()),
        None => format!("{HANDLE_PREFIX}{}", crate::route::random_hex()),
    }
}

/// The replica a task handle names (`sbt-REPLICA-…`), unverified: where a request naming it
/// is served (`session_store::home`), never whose task it is.
pub(crate) fn replica_of_handle(handle: &str) -> Option<&str> {
    let (replica, _) = handle.strip_prefix(HANDLE_PREFIX)?.split_once('-')?;
    Some(replica)
}

impl TaskOwners {
    /// An empty table whose handles name `replica` (with replicas).
    pub(crate) fn at_replica(replica: Option<String>) -> Self {
        TaskOwners {
            table: Mutex::default(),
            replica,
            recorded: tokio::sync::Notify::new(),
        }
    }

    /// Records the task a `CreateTaskResult` names, if any: `{task:{taskId}}` (2025-11-25) or
    /// `{resultType:"task", taskId}` (the Modern Tasks extension).
    ///
    /// A task id some other owner already holds is forgotten rather than reassigned: the same
    /// id handed out twice (a backend reusing ids) must not give either owner the other's
    /// task, so neither can name it any more.
    /// `principal`: the owner's (a session's, the one that opened it).
    fn record(
        &self,
        owner: &Owner,
        principal: &(String, String),
        result: &str,
        call: Option<&RawValue>,
    ) {
        let Some(id) = created_task(result) else {
            return;
        };
        let tool = call
            .and_then(|p| object_member(p, "name"))
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        let mut table = self.table.lock();
        match table.owners.get(&id) {
            // Already this owner's: one index row per task.
            Some(o) if &o.owner == owner => return,
            Some(_) => {
                table.remove(&id);
                return;
            }
            None if table.retired.contains(&id) => return,
            None => {}
        }
        // At its bound, a principal's owner that will forget its own oldest task for this one
        // may still record it; any other of its owners may not.
        let held = table.per_principal.get(principal).copied().unwrap_or(0);
        let evicts = (table.by_owner.get(owner)).is_some_and(|m| m.len() >= MAX_TASKS_PER_OWNER);
        let bounded = !crate::principal::is_anonymous(&principal.0, &principal.1);
        if bounded && held >= MAX_TASKS_PER_PRINCIPAL && !evicts {
            return;
        }
        if table.owners.len() >= MAX_TASKS && !evicts && !table.make_room() {
            return;
        }
        let principal = match table.per_principal.get_key_value(principal) {
            Some((key, _)) => key.clone(),
            None => PrincipalKey::new(principal.clone()),
        };
        *table.per_principal.entry(principal.clone()).or_default() += 1;
        let handle = mint_handle(self.replica.as_deref());
        table.handles.insert(handle.clone(), id.clone());
        let owned = Owned {
            owner: owner.clone(),
            principal,
            handle,
            tool,
        };
        table.owners.insert(id.clone(), owned);
        let mine = table.by_owner.entry(owner.clone()).or_default();
        mine.push_back(id);
        let oldest = (mine.len() > MAX_TASKS_PER_OWNER)
            .then(|| mine.pop_front())
            .flatten();
        if let Some(oldest) = oldest {
            table.forget(owner, &oldest);
        }
        drop(table);
        self.recorded.notify_waiters();
    }

    /// The owner of `task` and its handle, waiting up to `within` for a task not recorded
    /// yet: a backend may ask about a task it just created before the answer that created
    /// it has been recorded (both come from one reader, the question right behind). `None`:
    /// not recorded in time, or an id no one may be given.
    pub(crate) async fn owner_soon(
        &self,
        task: &str,
        within: std::time::Duration,
    ) -> Option<(Owner, String)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let recorded = self.recorded.notified();
            tokio::pin!(recorded);
            recorded.as_mut().enable();
            if let Some(found) = self.owner(task) {
                return Some(found);
            }
            if self.table.lock().retired.contains(task) {
                return None;
            }
            if tokio::time::timeout_at(deadline, recorded).await.is_err() {
                return self.owner(task);
            }
        }
    }

    /// The backend's own name of the tool whose call created `task`, if known.
    pub(crate) fn tool_of(&self, task: &str) -> Option<String> {
        self.table.lock().owners.get(task)?.tool.clone()
    }

    /// Whether `owner` owns `task` (no owner owns nothing).
    pub(crate) fn owns(&self, owner: Option<&Owner>, task: &str) -> bool {
        self.table.lock().owns(owner, task)
    }

    /// The owner of `task`, and the handle it knows `task` by.
    pub(crate) fn owner(&self, task: &str) -> Option<(Owner, String)> {
        let table = self.table.lock();
        let owned = table.owners.get(task)?;
        Some((owned.owner.clone(), owned.handle.clone()))
    }

    /// The backend's id of the task `owner` knows as `handle` (`None`: not `owner`'s, or no
    /// such handle — the two look alike).
    pub(crate) fn task_for(&self, owner: Option<&Owner>, handle: &str) -> Option<String> {
        let table = self.table.lock();
        let task = table.handles.get(handle)?;
        table.owns(owner, task).then(|| task.clone())
    }

    /// The handle `owner` knows the backend's `task` by.
    pub(crate) fn handle_for(&self, owner: Option<&Owner>, task: &str) -> Option<String> {
        self.table.lock().handle(owner, task).map(str::to_owned)
    }

    /// The backend's ids of `owner`'s tasks here, oldest first.
    pub(crate) fn tasks_of(&self, owner: &Owner) -> Vec<String> {
        let table = self.table.lock();
        let ids = table.by_owner.get(owner);
        ids.map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `owner` may have tasks here (an index row: possibly of forgotten tasks).
    pub(crate) fn has_any(&self, owner: &Owner) -> bool {
        self.table
            .lock()
            .by_owner
            .get(owner)
            .is_some_and(|ids| !ids.is_empty())
    }

    /// `tasks/list` result with only `owner`'s tasks (none without an owner), each under the
    /// handle its owner knows it by. A result that is not a list becomes an empty one: what
    /// the gateway cannot filter, it does not pass; nor does a member a loose parser would
    /// read as `tasks` or a task's `taskId` (`loosely_named`).
    pub(crate) fn filter_list(&self, owner: Option<&Owner>, result: &str) -> String {
        let mut v: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        loosely_named(&mut v, "tasks");
        let table = self.table.lock();
        match v.get_mut("tasks").and_then(Value::as_array_mut) {
            Some(tasks) => {
                tasks.retain_mut(|t| {
                    loosely_named(t, "taskId");
                    without_related_task(t);
                    let handle = t["taskId"].as_str().and_then(|id| table.handle(owner, id));
                    match handle {
                        Some(h) => {
                            t["taskId"] = Value::String(h.to_owned());
                            true
                        }
                        None => false,
                    }
                });
                v.to_string()
            }
            None => r#"{"tasks":[]}"#.to_owned(),
        }
    }

    /// Forgets everything (the backend restarted: its task ids mean nothing any more, and a
    /// new process may hand the same ids to someone else).
    pub(crate) fn clear(&self) {
        *self.table.lock() = Table::default();
    }

    /// Forgets a session's tasks when it ends (its own index: no scan of everyone's). A
    /// principal's stateless tasks have no end event: only the bounds above (and a backend
    /// restart) forget them.
    pub(crate) fn purge(&self, session: &str) {
        let owner = Owner::session(session);
        let mut table = self.table.lock();
        for task in table.by_owner.remove(&owner).unwrap_or_default() {
            table.forget(&owner, &task);
        }
    }

    /// Entries held: tracked tasks plus per-owner index rows (zero when idle).
    pub(crate) fn len(&self) -> usize {
        let table = self.table.lock();
        table.owners.len() + table.by_owner.len()
    }
}

/// The task id a `CreateTaskResult` names, in either era's shape; none for one that names
/// it ambiguously (`ResultMarks::ambiguous_task`) or names another task beside it
/// ([`names_only`]), which `finished` refuses: not recorded either.
fn created_task(result: &str) -> Option<String> {
    let marks = ResultMarks::of(result);
    if marks.ambiguous_task {
        return None;
    }
    let task = marks.created_task?.into_owned();
    let raw = serde_json::from_str::<&RawValue>(result).ok()?;
    names_only(raw, &task).then_some(task)
}

/// What a request's answer does to the owners: recorded as it creates tasks.
impl TaskOwners {
    /// Records the task a successful answer created as `owner`'s; a session owner's only
    /// while its session lives in `sessions`. `sent`: the request's method and the params
    /// the backend got (a `tools/call`'s names the task's tool).
    pub(crate) fn record_answer(
        &self,
        sessions: &Sessions,
        owner: &Owner,
        answer: &BackendResponse,
        (method, params): (&str, Option<&RawValue>),
    ) {
        let call = params.filter(|_| method == "tools/call");
        self.record_for(sessions, owner, answer.payload(), call);
    }

    /// Records the task `result` (a `CreateTaskResult`) names as `owner`'s; a session
    /// owner's only while its session lives in `sessions`. `call`: the `tools/call` params
    /// the backend got (they name the task's tool).
    pub(crate) fn record_for(
        &self,
        sessions: &Sessions,
        owner: &Owner,
        result: &str,
        call: Option<&RawValue>,
    ) {
        match owner {
            // Under the session's lock: a session that ended meanwhile (its tasks already
            // purged) records nothing that nobody would ever purge.
            Owner::Session(sid) => {
                let recorded = |principal: &(String, String)| {
                    self.record(owner, principal, result, call);
                };
                let _ = sessions.while_live(sid, recorded);
            }
            Owner::Principal { issuer, subject } => {
                let principal = (issuer.clone(), subject.clone());
                self.record(owner, &principal, result, call);
            }
        }
    }

    /// Whether `owner` may send `name` (`tasks/get|result|cancel|list`) with `params` to the
    /// backend: a listing always (its answer is filtered), a request naming one task only
    /// when `owner` owns it.
    pub(crate) fn admits(
        &self,
        owner: Option<&Owner>,
        name: &str,
        params: Option<&RawValue>,
    ) -> bool {
        name == LIST || requested_task(params).is_some_and(|t| self.owns(owner, &t))
    }
}

/// A listed task without a related-task tag (in any spelling of `_meta` or of the tag): its
/// id there would be the backend's own.
fn without_related_task(task: &mut Value) {
    loosely_named(task, "_meta");
    if let Some(meta) = task.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.retain(|k, _| !switchboard_wire::keys_fold_equal(k, META_RELATED_TASK));
    }
}

#[cfg(test)]
mod tests;
