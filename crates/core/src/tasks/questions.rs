//! A shared Legacy backend's questions about a task whose owner has no session: a Modern
//! client's (or a sessionless caller's) 2025-11-25 task asking for input with requests tagged
//! `io.modelcontextprotocol/related-task`. Nothing can carry such a request to its owner as it
//! comes, so the gateway holds it here, per task (by the backend's own id): the owner's
//! `tasks/get` shows it as the Tasks extension's `inputRequests`, and its `tasks/update`
//! (`inputResponses`) answers the backend's request under the backend's own id.
//!
//! A question is held only for a task the table of the same backend says has a principal
//! owner (`dispatch`), after the guardrails checked it; its answer goes only to the backend
//! that asked. Bounds: [`MAX_PER_TASK`] questions per task, [`MAX_TASKS`] tasks with
//! questions; a question beyond them, or held longer than [`MAX_AGE`], is answered to the
//! backend with an error instead (never left waiting for ever).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use switchboard_upstream::Upstream;
use switchboard_wire::{codes, encode_error, encode_result, ErrorObject, RequestId};

/// Most questions held for one task (a backend asking more gets errors for the rest).
const MAX_PER_TASK: usize = crate::MAX_ASKS;
/// Most tasks with questions held at once, over all owners of one backend.
const MAX_TASKS: usize = 10_000;
/// How long a question waits for its owner's answer before the backend is told none came.
const MAX_AGE: Duration = Duration::from_secs(600);

/// Why a question was not held (the backend is answered with this error at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotHeld {
    /// The task already has [`MAX_PER_TASK`] questions waiting.
    TooManyForTask,
    /// [`MAX_TASKS`] tasks already have questions waiting.
    TooManyTasks,
}

impl NotHeld {
    /// The error the backend gets for its request.
    pub(crate) fn error(self) -> ErrorObject {
        let message = match self {
            NotHeld::TooManyForTask => "Too many questions waiting for this task's client",
            NotHeld::TooManyTasks => "Too many tasks are waiting for their clients' input",
        };
        ErrorObject::new(codes::INTERNAL_ERROR, message)
    }
}

/// An answer to the backend's questions that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadAnswer {
    /// An answer that is not a result object (the key it was given for).
    NotAnObject(String),
}

/// One backend's held questions (`registry::BackendTables`).
#[derive(Debug, Default)]
pub(crate) struct TaskQuestions {
    by_task: Mutex<HashMap<String, Held>>,
    /// Questions waiting for their task to be recorded (`dispatch`).
    waiting: Arc<AtomicUsize>,
}

/// One question waiting for its task's record; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One task's questions, oldest first, and the backend that asked them.
#[derive(Debug)]
struct Held {
    backend: Upstream,
    questions: Vec<Question>,
    /// The next key minted for this task (`q1`, `q2`, …): keys are the gateway's own, so the
    /// backend's request ids never reach the client.
    next: u32,
}

#[derive(Debug)]
struct Question {
    key: String,
    /// The backend's id for its request, answered under it.
    id: RequestId,
    /// `{method, params}` as the owner sees it (params checked, the task named by its handle).
    request: Value,
    since: Instant,
}

impl TaskQuestions {
    /// A place for one question waiting for its task's record; `None` when `most` already
    /// wait.
    pub(crate) fn waiting(&self, most: usize) -> Option<Waiting> {
        let taken = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            });
        taken.ok().map(|_| Waiting(Arc::clone(&self.waiting)))
    }

    /// Holds the backend's request `id` (`method` with `params`, already as the owner may see
    /// them) about `task`, to be shown on the owner's next `tasks/get`; `backend` gets the
    /// answer.
    pub(crate) fn hold(
        &self,
        task: &str,
        backend: &Upstream,
        (id, method, params): (&RequestId, &str, Option<&RawValue>),
    ) -> Result<(), NotHeld> {
        let mut by_task = self.by_task.lock();
        expire(&mut by_task);
        if !by_task.contains_key(task) && by_task.len() >= MAX_TASKS {
            return Err(NotHeld::TooManyTasks);
        }
        let held = by_task.entry(task.to_owned()).or_insert_with(|| Held {
            backend: backend.clone(),
            questions: Vec::new(),
            next: 1,
        });
        if held.questions.len() >= MAX_PER_TASK {
            return Err(NotHeld::TooManyForTask);
        }
        let params = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .unwrap_or_else(|| Value::Object(Map::new()));
        let mut request = Map::new();
        request.insert("method".into(), Value::String(method.to_owned()));
        request.insert("params".into(), params);
        held.questions.push(Question {
            key: format!("q{}", held.next),
            id: id.clone(),
            request: Value::Object(request),
            since: Instant::now(),
        });
        held.next = held.next.saturating_add(1);
        Ok(())
    }

    /// The task's waiting questions as the extension's `inputRequests` (key → `{method,
    /// params}`); `None` when none wait.
    pub(crate) fn pending(&self, task: &str) -> Option<Value> {
        let mut by_task = self.by_task.lock();
        expire(&mut by_task);
        let held = by_task.get(task)?;
        let requests: Map<String, Value> = (held.questions.iter())
            .map(|q| (q.key.clone(), q.request.clone()))
            .collect();
        (!requests.is_empty()).then_some(Value::Object(requests))
    }

    /// Answers the task's questions named in `responses` (key → the result object), each to
    /// the backend under its own id; keys that name no waiting question are ignored, as the
    /// extension says. Nothing is answered when any answer is unusable.
    pub(crate) fn answer(
        &self,
        task: &str,
        responses: &Map<String, Value>,
    ) -> Result<(), BadAnswer> {
        let mut by_task = self.by_task.lock();
        let Some(held) = by_task.get_mut(task) else {
            return Ok(());
        };
        let named = |q: &Question| responses.get(&q.key);
        if let Some(q) = held
            .questions
            .iter()
            .find(|q| named(q).is_some_and(|a| !a.is_object()))
        {
            return Err(BadAnswer::NotAnObject(q.key.clone()));
        }
        let backend = held.backend.clone();
        held.questions.retain(|q| match named(q) {
            Some(answer) => {
                let line = encode_result(&q.id, &answer.to_string());
                let _ = backend.try_send_line(line);
                false
            }
            None => true,
        });
        if held.questions.is_empty() {
            by_task.remove(task);
        }
        Ok(())
    }

    /// Forgets the task's questions (it ended, or was cancelled), telling the backend no
    /// answer will come.
    pub(crate) fn end(&self, task: &str) {
        let held = self.by_task.lock().remove(task);
        if let Some(held) = held {
            refuse_all(held, "The task ended before its client answered");
        }
    }
}

/// Forgets every question held longer than [`MAX_AGE`], telling the backend.
fn expire(by_task: &mut HashMap<String, Held>) {
    let now = Instant::now();
    let stale = |q: &Question| now.duration_since(q.since) > MAX_AGE;
    if !by_task.values().any(|h| h.questions.iter().any(stale)) {
        return;
    }
    for held in by_task.values_mut() {
        let backend = held.backend.clone();
        held.questions.retain(|q| {
            if !stale(q) {
                return true;
            }
            let err = ErrorObject::new(codes::INTERNAL_ERROR, "The client did not answer in time");
            let _ = backend.try_send_line(encode_error(Some(&q.id), &err));
            false
        });
    }
    by_task.retain(|_, h| !h.questions.is_empty());
}

fn refuse_all(held: Held, why: &'static str) {
    let err = ErrorObject::new(codes::INTERNAL_ERROR, why);
    for q in &held.questions {
        let _ = held.backend.try_send_line(encode_error(Some(&q.id), &err));
    }
}
