//! A shared Legacy backend's questions about the tasks the gateway runs for Modern clients
//! (`modern::bridged_tasks`): a 2025-11-25 task asking for input with requests tagged
//! `io.modelcontextprotocol/related-task`. Nothing can carry such a request to its owner as it
//! comes, so the gateway holds it here, per task (by the backend's own id): the owner's
//! `tasks/get` shows it as the Tasks extension's `inputRequests`, and its `tasks/update`
//! (`inputResponses`) answers the backend's request under the backend's own id.
//!
//! Only a task the bridge created has questions held: it is expected here, with its owner,
//! before the task is recorded (`expect`); a question about any other task is refused as in
//! shared mode. Questions are shown to, and answered by, that owner only. A backend restart
//! or reload forgets everything (`forget_all`): a new process may give the same ids to
//! someone else. A question is held after the guardrails checked it (`dispatch`).
//!
//! Bounds, per backend: [`MAX_PER_TASK`] questions per task, [`MAX_PER_OWNER`] expected tasks
//! per owner (its oldest forgotten first), [`MAX_TASKS`] in all, [`MAX_BYTES`] of held
//! questions. A question beyond them, or held longer than [`MAX_AGE`], is answered to the
//! backend with an error instead (never left waiting for ever); an expected task idle that
//! long is forgotten.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use switchboard_upstream::Upstream;
use switchboard_wire::{
    codes, encode_error, encode_result, keys_fold_equal, ErrorObject, RequestId,
};

use super::{Owner, META_RELATED_TASK};

/// Most questions held for one task (a backend asking more gets errors for the rest).
const MAX_PER_TASK: usize = crate::MAX_ASKS;
/// Most expected tasks per owner; its next one makes it forget its oldest.
const MAX_PER_OWNER: usize = 256;
/// Most expected tasks at once, over all owners of one backend.
const MAX_TASKS: usize = 10_000;
/// Most bytes of held questions at once, over all tasks of one backend.
const MAX_BYTES: usize = 32 << 20;
/// How long a question waits for its owner's answer (and an expected task with none
/// waiting stays) before the backend is told no answer will come.
const MAX_AGE: Duration = Duration::from_secs(600);
/// Stale entries are looked for at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Why a question was not held (the backend is answered with this error at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotHeld {
    /// Not a task the gateway runs for a sessionless owner: no one could be shown it.
    NotExpected,
    /// The task already has [`MAX_PER_TASK`] questions waiting, or the backend
    /// [`MAX_BYTES`].
    TooMany,
    /// The request names its task in two ways, or its params are unreadable.
    Unreadable,
    /// The task's client did not declare it can answer this request.
    NotDeclared,
}

impl NotHeld {
    /// The error the backend gets for its request.
    pub(crate) fn error(self) -> ErrorObject {
        let message = match self {
            NotHeld::NotExpected => "Method not found: no client can answer this task's request",
            NotHeld::TooMany => "Too many questions waiting for this task's client",
            NotHeld::Unreadable => "Invalid request: the task it concerns is unclear",
            NotHeld::NotDeclared => "The task's client did not declare it can answer this request",
        };
        let code = match self {
            NotHeld::NotExpected => codes::METHOD_NOT_FOUND,
            _ => codes::INTERNAL_ERROR,
        };
        ErrorObject::new(code, message)
    }
}

/// One backend's expected tasks and their held questions (`registry::BackendTables`).
#[derive(Debug, Default)]
pub(crate) struct TaskQuestions {
    inner: Mutex<Inner>,
    /// Questions waiting for their task to be recorded (`dispatch`).
    waiting: Arc<AtomicUsize>,
    /// Bumped by `forget_all`: a question that arrived before (from the process that was
    /// there then) is never held.
    epoch: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    by_task: HashMap<String, Expected>,
    /// Each owner's expected tasks, oldest first.
    by_owner: HashMap<Owner, VecDeque<String>>,
    bytes: usize,
    swept: Option<Instant>,
}

/// A task the bridge runs: whose it is, and the questions its backend asked about it.
#[derive(Debug)]
struct Expected {
    owner: Owner,
    /// The requests its client declared it can answer.
    answers: Vec<&'static str>,
    questions: Vec<Question>,
    /// Where the answers go (set with the first question).
    backend: Option<Upstream>,
    /// The next key minted for this task (`q1`, `q2`, …): keys are the gateway's own, so the
    /// backend's request ids never reach the client.
    next: u32,
    since: Instant,
}

#[derive(Debug)]
struct Question {
    key: String,
    /// The backend's id for its request, answered under it.
    id: RequestId,
    /// `{method, params}` as the owner sees it (params checked, the task named by its handle).
    request: Value,
    bytes: usize,
    since: Instant,
}

/// One question waiting for its task's record; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl TaskQuestions {
    /// The current epoch (see `forget_all`), taken when a question arrives.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

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

    /// `task` is one the bridge runs for `owner`: its questions will be held. Called before
    /// the task is recorded, so a question racing the record finds it expected. `false`: the
    /// backend has [`MAX_TASKS`] expected already (its questions will be refused).
    /// `answers`: the requests the owner's client declared it can answer
    /// (`answerable`); any other is refused to the backend.
    pub(crate) fn expect(&self, task: &str, owner: &Owner, answers: Vec<&'static str>) -> bool {
        let mut inner = self.inner.lock();
        inner.sweep();
        // Full: the longest-idle task with no question waiting makes room (so tasks idle in
        // one owner's hands do not shut out everyone else's); with none, the new one waits.
        if inner.by_task.len() >= MAX_TASKS && !inner.make_room() {
            return false;
        }
        inner.drop_task(task);
        inner.by_task.insert(
            task.to_owned(),
            Expected {
                owner: owner.clone(),
                answers,
                questions: Vec::new(),
                backend: None,
                next: 1,
                since: Instant::now(),
            },
        );
        let mine = inner.by_owner.entry(owner.clone()).or_default();
        mine.push_back(task.to_owned());
        let oldest = (mine.len() > MAX_PER_OWNER)
            .then(|| mine.pop_front())
            .flatten();
        if let Some(oldest) = oldest {
            inner.drop_task(&oldest);
        }
        true
    }

    /// Holds the backend's request `id` (`method` with `params`, as the owner may see them:
    /// naming the task by its `handle`, and by nothing else) about the expected `task`, to be
    /// shown on its owner's next `tasks/get`; `backend` gets the answer.
    pub(crate) fn hold(
        &self,
        (task, handle, epoch): (&str, &str, u64),
        backend: &Upstream,
        (id, method, params): (&RequestId, &str, Option<&RawValue>),
    ) -> Result<(), NotHeld> {
        let params: Value = match params {
            Some(p) if !switchboard_wire::reads_one_way(p) => return Err(NotHeld::Unreadable),
            Some(p) => serde_json::from_str(p.get()).map_err(|_| NotHeld::Unreadable)?,
            None => Value::Object(Map::new()),
        };
        if !names_only(&params, handle) {
            return Err(NotHeld::Unreadable);
        }
        let bytes = params.to_string().len();
        let mut inner = self.inner.lock();
        // Asked by a process the backend has since replaced: its ids mean nothing now.
        if epoch != self.epoch() {
            return Err(NotHeld::NotExpected);
        }
        inner.sweep();
        let room = inner.bytes.saturating_add(bytes) <= MAX_BYTES;
        let Some(expected) = inner.by_task.get_mut(task) else {
            return Err(NotHeld::NotExpected);
        };
        if !expected.answers.contains(&method) {
            return Err(NotHeld::NotDeclared);
        }
        if !room || expected.questions.len() >= MAX_PER_TASK {
            return Err(NotHeld::TooMany);
        }
        let mut request = Map::new();
        request.insert("method".into(), Value::String(method.to_owned()));
        request.insert("params".into(), params);
        // The process that asked last is the one whose questions wait.
        expected.backend = Some(backend.clone());
        expected.questions.push(Question {
            key: format!("q{}", expected.next),
            id: id.clone(),
            request: Value::Object(request),
            bytes,
            since: Instant::now(),
        });
        expected.next = expected.next.saturating_add(1);
        inner.bytes += bytes;
        Ok(())
    }

    /// `owner`'s task's waiting questions as the extension's `inputRequests` (key →
    /// `{method, params}`); `None` when none wait (or the task is not `owner`'s here).
    pub(crate) fn pending(&self, task: &str, owner: &Owner) -> Option<Value> {
        let mut inner = self.inner.lock();
        inner.sweep();
        let expected = inner.by_task.get(task).filter(|e| &e.owner == owner)?;
        let requests: Map<String, Value> = (expected.questions.iter())
            .map(|q| (q.key.clone(), q.request.clone()))
            .collect();
        (!requests.is_empty()).then_some(Value::Object(requests))
    }

    /// Answers `owner`'s task's questions named in `responses` (key → the result object,
    /// each checked to be one before), each to the backend under its own id; keys that name
    /// no waiting question are ignored, as the extension says.
    pub(crate) fn answer(&self, task: &str, owner: &Owner, responses: &Map<String, Value>) {
        let mut inner = self.inner.lock();
        let Some(expected) = inner.by_task.get_mut(task).filter(|e| &e.owner == owner) else {
            return;
        };
        let backend = expected.backend.clone();
        let mut freed = 0;
        expected.questions.retain(|q| match responses.get(&q.key) {
            Some(answer) => {
                if let Some(backend) = &backend {
                    let _ = backend.try_send_line(encode_result(&q.id, &answer.to_string()));
                }
                freed += q.bytes;
                false
            }
            None => true,
        });
        expected.since = Instant::now();
        inner.bytes = inner.bytes.saturating_sub(freed);
    }

    /// Forgets the task (it ended, or was cancelled), telling the backend no answer will come
    /// to the questions still waiting.
    pub(crate) fn end(&self, task: &str) {
        self.inner.lock().drop_task(task);
    }

    /// Refuses the questions held too long (the reaper's clock calls this; `hold` and
    /// `pending` do too).
    pub(crate) fn sweep(&self) {
        self.inner.lock().sweep();
    }

    /// Forgets everything without a word to the backend: it restarted, or was replaced, and
    /// the ids of what was held mean nothing to the process there now.
    pub(crate) fn forget_all(&self) {
        let mut inner = self.inner.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let swept = inner.swept;
        *inner = Inner {
            swept,
            ..Inner::default()
        };
    }
}

impl Inner {
    /// Forgets an expected task with no question waiting: the oldest of the owner holding the
    /// most (so one owner's many tasks give way before anyone else's), else the longest-idle
    /// of all; `false`: every one has a question waiting.
    fn make_room(&mut self) -> bool {
        let idle_of = |inner: &Inner, tasks: &VecDeque<String>| {
            (tasks.iter())
                .find(|t| {
                    inner
                        .by_task
                        .get(*t)
                        .is_some_and(|e| e.questions.is_empty())
                })
                .cloned()
        };
        let busiest = self.by_owner.values().max_by_key(|tasks| tasks.len());
        let idle = busiest.and_then(|tasks| idle_of(self, tasks)).or_else(|| {
            (self.by_task.iter())
                .filter(|(_, e)| e.questions.is_empty())
                .min_by_key(|(_, e)| e.since)
                .map(|(t, _)| t.clone())
        });
        match idle {
            Some(task) => {
                self.drop_task(&task);
                true
            }
            None => false,
        }
    }

    /// Forgets `task` and its owner's index row, refusing its waiting questions.
    fn drop_task(&mut self, task: &str) {
        let Some(expected) = self.by_task.remove(task) else {
            return;
        };
        if let Some(ids) = self.by_owner.get_mut(&expected.owner) {
            ids.retain(|t| t != task);
            if ids.is_empty() {
                self.by_owner.remove(&expected.owner);
            }
        }
        let freed: usize = expected.questions.iter().map(|q| q.bytes).sum();
        self.bytes = self.bytes.saturating_sub(freed);
        refuse(
            &expected,
            &expected.questions,
            "The task ended before its client answered",
        );
    }

    /// At most every [`SWEEP_EVERY`]: questions held longer than [`MAX_AGE`] are refused, and
    /// expected tasks idle that long with none waiting are forgotten.
    fn sweep(&mut self) {
        let now = Instant::now();
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        let stale = |since: Instant| now.duration_since(since) > MAX_AGE;
        let mut freed = 0;
        for expected in self.by_task.values_mut() {
            let (old, kept): (Vec<Question>, Vec<Question>) =
                (expected.questions.drain(..)).partition(|q| stale(q.since));
            expected.questions = kept;
            freed += old.iter().map(|q| q.bytes).sum::<usize>();
            refuse(expected, &old, "The client did not answer in time");
        }
        self.bytes = self.bytes.saturating_sub(freed);
        let idle: Vec<String> = (self.by_task.iter())
            .filter(|(_, e)| e.questions.is_empty() && stale(e.since))
            .map(|(t, _)| t.clone())
            .collect();
        for task in idle {
            self.drop_task(&task);
        }
    }
}

/// The requests a Modern request's client declared it can answer (its `_meta` client
/// capabilities: `elicitation`, `sampling`, `roots`).
pub(crate) fn answerable(params: Option<&RawValue>) -> Vec<&'static str> {
    use switchboard_wire::{classify::META_CLIENT_CAPABILITIES, object_member};
    let caps = params
        .and_then(|p| object_member(p, "_meta"))
        .and_then(|m| object_member(m, META_CLIENT_CAPABILITIES))
        .and_then(|c| serde_json::from_str::<Value>(c.get()).ok())
        .unwrap_or(Value::Null);
    let declared = |k: &str| caps.get(k).is_some_and(Value::is_object);
    [
        ("elicitation", "elicitation/create"),
        ("sampling", "sampling/createMessage"),
        ("roots", "roots/list"),
    ]
    .into_iter()
    .filter(|(cap, _)| declared(cap))
    .map(|(_, method)| method)
    .collect()
}

/// Tells the backend `questions` will get no answer.
fn refuse(expected: &Expected, questions: &[Question], why: &'static str) {
    let Some(backend) = &expected.backend else {
        return;
    };
    let err = ErrorObject::new(codes::INTERNAL_ERROR, why);
    for q in questions {
        let _ = backend.try_send_line(encode_error(Some(&q.id), &err));
    }
}

/// Whether `params`, as the owner will read them, name the task by its `handle` and nothing
/// else: no `taskId` of their own, and no other id left in the related-task tag (a backend
/// repeating the tag with another of its ids would otherwise show that id to the owner), in
/// any spelling a parser reads as those keys: they read one way
/// ([`switchboard_wire::reads_one_way`]: no key repeated, in any case or with escapes).
pub(crate) fn names_only_raw(params: &RawValue, handle: &str) -> bool {
    switchboard_wire::reads_one_way(params)
        && serde_json::from_str::<Value>(params.get()).is_ok_and(|v| names_only(&v, handle))
}

/// [`names_only_raw`] of params read one way (each key spelled once, in any case).
fn names_only(params: &Value, handle: &str) -> bool {
    let tagged = &params["_meta"][META_RELATED_TASK]["taskId"];
    let names_an_id =
        |v: &Value| (v.as_object()).is_some_and(|o| o.keys().any(|k| keys_fold_equal(k, "taskId")));
    // `params.task` in any spelling: a loose parser may read any of them as it.
    let in_a_task = (params.as_object()).is_some_and(|o| {
        o.iter()
            .any(|(k, v)| keys_fold_equal(k, "task") && names_an_id(v))
    });
    !names_an_id(params) && !in_a_task && tagged.as_str() == Some(handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ALL: &[&str] = &["elicitation/create", "sampling/createMessage", "roots/list"];

    /// The owner sees its handle and no id of the backend's, in no spelling and no copy a
    /// parser may read instead.
    #[test]
    fn a_question_names_its_task_by_the_handle_only() {
        let named = |v: Value| names_only_raw(&RawValue::from_string(v.to_string()).unwrap(), "h");
        let tag = |id: &str| json!({META_RELATED_TASK: {"taskId": id}});
        assert!(named(json!({"_meta": tag("h"), "message": "?"})));
        assert!(!named(json!({"_meta": tag("t-9")})));
        assert!(!named(json!({"_meta": tag("h"), "TaskId": "t-9"})));
        assert!(!named(
            json!({"_meta": {META_RELATED_TASK: {"taskId": "h", "TASKID": "t-9"}}})
        ));
        assert!(!named(json!({"_meta": tag("h"), "_Meta": tag("t-9")})));
        assert!(!named(
            json!({"_meta": tag("h"), "task": {"taskId": "t-9"}})
        ));
        assert!(!named(
            json!({"_meta": tag("h"), "Task": {"taskId": "t-9"}})
        ));
        let twice =
            format!(r#"{{"_meta":{{"{META_RELATED_TASK}":{{"taskId":"t-9","taskId":"h"}}}}}}"#);
        assert!(!names_only_raw(&RawValue::from_string(twice).unwrap(), "h"));
    }

    #[tokio::test]
    async fn a_question_the_client_cannot_answer_is_refused() {
        let q = TaskQuestions::default();
        let caps = json!({"_meta": {switchboard_wire::classify::META_CLIENT_CAPABILITIES:
            {"sampling": {}, "roots": null, "elicitation": false}}});
        let caps = RawValue::from_string(caps.to_string()).unwrap();
        assert_eq!(answerable(Some(&caps)), ["sampling/createMessage"]);
        assert!(q.expect("t1", &owner("alice"), answerable(Some(&caps))));
        assert_eq!(ask(&q, "t1", 1), Err(NotHeld::NotDeclared));
        assert_eq!(q.pending("t1", &owner("alice")), None);
    }

    /// A backend handle that takes every line and sends nothing anywhere.
    fn backend() -> Upstream {
        use switchboard_upstream::openapi::{Catalog, OpenApiConfig, OpenApiUpstream};
        let get = json!({"operationId": "ping", "responses": {"200": {"description": "ok"}}});
        let doc = json!({"openapi": "3.0.0", "info": {"title": "t", "version": "1"},
            "paths": {"/ping": {"get": get}}});
        let (catalog, _) = Catalog::from_document(&doc).unwrap();
        let config = OpenApiConfig::new("http://127.0.0.1:9");
        Upstream::OpenApi(OpenApiUpstream::new(Arc::new(catalog), config).unwrap())
    }

    fn owner(name: &str) -> Owner {
        Owner::Principal {
            issuer: "i".into(),
            subject: name.into(),
        }
    }

    fn ask(questions: &TaskQuestions, task: &str, n: u32) -> Result<(), NotHeld> {
        ask_naming(
            questions,
            task,
            json!({"_meta": {META_RELATED_TASK: {"taskId": "h"}}}),
            n,
        )
    }

    fn ask_naming(q: &TaskQuestions, task: &str, params: Value, n: u32) -> Result<(), NotHeld> {
        let raw = RawValue::from_string(params.to_string()).unwrap();
        let id = RequestId::from_string(&format!("b-{n}"));
        q.hold(
            (task, "h", q.epoch()),
            &backend(),
            (&id, "elicitation/create", Some(&raw)),
        )
    }

    #[tokio::test]
    async fn questions_are_held_only_for_expected_tasks_and_shown_to_their_owner() {
        let q = TaskQuestions::default();
        let (alice, bob) = (owner("alice"), owner("bob"));
        assert_eq!(ask(&q, "t1", 1), Err(NotHeld::NotExpected));
        assert!(q.expect("t1", &alice, ALL.to_vec()));
        assert_eq!(ask(&q, "t1", 1), Ok(()));
        let shown = q.pending("t1", &alice).unwrap();
        assert_eq!(shown["q1"]["method"], "elicitation/create", "{shown}");
        assert_eq!(q.pending("t1", &bob), None);
        // Bob's answer reaches nothing; alice's answers the question.
        let answer = json!({"q1": {"action": "accept"}});
        let answer = answer.as_object().unwrap();
        q.answer("t1", &bob, answer);
        assert!(q.pending("t1", &alice).is_some());
        q.answer("t1", &alice, answer);
        assert_eq!(q.pending("t1", &alice), None);
        // A restarted backend's ids mean nothing: all is forgotten, and a question that
        // arrived before the restart is never held.
        assert_eq!(ask(&q, "t1", 2), Ok(()));
        let before = q.epoch();
        q.forget_all();
        assert!(q.expect("t1", &alice, ALL.to_vec()));
        let raw = RawValue::from_string(
            json!({"_meta": {META_RELATED_TASK: {"taskId": "h"}}}).to_string(),
        )
        .unwrap();
        let id = RequestId::from_string("old");
        let late = q.hold(
            ("t1", "h", before),
            &backend(),
            (&id, "roots/list", Some(&raw)),
        );
        assert_eq!(late, Err(NotHeld::NotExpected));
        q.forget_all();
        assert_eq!(q.pending("t1", &alice), None);
        assert_eq!(ask(&q, "t1", 3), Err(NotHeld::NotExpected));
    }

    #[tokio::test]
    async fn a_question_naming_its_task_twice_is_refused() {
        let q = TaskQuestions::default();
        assert!(q.expect("t1", &owner("alice"), ALL.to_vec()));
        let other = json!({"_meta": {META_RELATED_TASK: {"taskId": "backend-9"}}});
        assert_eq!(ask_naming(&q, "t1", other, 1), Err(NotHeld::Unreadable));
        let both = json!({"taskId": "backend-9", "_meta": {META_RELATED_TASK: {"taskId": "h"}}});
        assert_eq!(ask_naming(&q, "t1", both, 2), Err(NotHeld::Unreadable));
        assert_eq!(q.pending("t1", &owner("alice")), None);
    }

    #[tokio::test]
    async fn a_full_table_makes_room_from_the_owner_holding_the_most() {
        let q = TaskQuestions::default();
        let victim = owner("victim");
        for n in 0..20 {
            assert!(q.expect(&format!("v{n}"), &victim, ALL.to_vec()));
        }
        // Many owners fill the table with newer tasks, each up to its own bound.
        for o in 0..40 {
            let attacker = owner(&format!("a{o}"));
            for n in 0..MAX_PER_OWNER {
                assert!(q.expect(&format!("a{o}-{n}"), &attacker, ALL.to_vec()));
            }
        }
        // The victim's older tasks were not the ones to go.
        assert_eq!(ask(&q, "v0", 1), Ok(()));
        assert_eq!(ask(&q, "v19", 2), Ok(()));
    }

    #[tokio::test]
    async fn bounds_hold_per_task_and_per_owner() {
        let q = TaskQuestions::default();
        let alice = owner("alice");
        assert!(q.expect("t0", &alice, ALL.to_vec()));
        for n in 0..MAX_PER_TASK {
            assert_eq!(ask(&q, "t0", n as u32), Ok(()));
        }
        assert_eq!(ask(&q, "t0", 999), Err(NotHeld::TooMany));
        // An owner's next expected task beyond its bound makes it forget its oldest.
        for n in 1..=MAX_PER_OWNER {
            assert!(q.expect(&format!("t{n}"), &alice, ALL.to_vec()));
        }
        assert_eq!(q.pending("t0", &alice), None);
        assert_eq!(ask(&q, "t0", 1000), Err(NotHeld::NotExpected));
        assert_eq!(ask(&q, "t1", 1001), Ok(()));
    }
}
