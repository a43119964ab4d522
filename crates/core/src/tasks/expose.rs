//! Task ids in messages, swapped between the backend's own id and the handle the gateway gave
//! the task's owner: where a task id sits in a result or a notification's params (`taskId`,
//! `task.taskId`, the related-task `_meta` tag). Everything else in the object passes
//! untouched, byte for byte (members are kept raw, in their order).

use serde_json::value::RawValue;
use serde_json::Value;

use switchboard_wire::{encode_error, encode_result, keys_fold_equal, object_member};
use switchboard_wire::{retain_members, with_member};
use switchboard_wire::{Message, ResultMarks};

use super::{Holder, TaskAsk, META_RELATED_TASK};
use crate::Answer;

/// The task stage's finishing of a routed answer of either era, whatever its adapter: a
/// `tools/list` of a backend that keeps no tasks says none of its tools runs as one
/// (`tools_as_offered`), and a task the answer created is given to its owner under a handle
/// (`handle_for` records it in the backend's table). One the gateway could not record (or
/// rename) is an error: the backend's own id never reaches a client (a session's own process
/// excepted, whose ids are the session's alone).
pub(crate) fn finished(
    holder: Holder,
    (name, task): (&str, &TaskAsk),
    answer: Answer,
    handle_for: impl FnOnce(&str) -> Option<String>,
) -> Answer {
    let answer = tools_as_offered(holder, name, answer);
    if !(task.asked || name == super::MAY_CREATE) {
        return answer;
    }
    let created = match created_in(&answer.body) {
        Created::Nothing => return answer,
        Created::Task(task) => task,
        Created::Ambiguous if holder == Holder::Own => return answer,
        Created::Ambiguous => return refused(&answer, &super::ambiguous_task()),
    };
    let err = match holder {
        Holder::Own => return answer,
        // A task lives in one of a replicated backend's processes, and its follow-ups could
        // reach any of them: not handed out (`refuse_on_replicas` refuses asking for one).
        Holder::Replicas => super::untracked_on_replicas(),
        // The created task's id must be the only one the answer names (a second id, in
        // `_meta`'s tag or a loose spelling, would reach the client unrenamed); such a task
        // was not recorded either (`TaskOwners::record`).
        Holder::Shared if !created_alone(&answer.body, &created) => super::ambiguous_task(),
        Holder::Shared => {
            let renamed = handle_for(&created)
                .and_then(|handle| renamed_answer(&answer.body, &created, &handle));
            if let Some(body) = renamed {
                return Answer { body, ..answer };
            }
            super::untracked_task()
        }
    };
    refused(&answer, &err)
}

/// The answer to a handle's `tasks/get|cancel|update` (a task's state), named by the handle
/// (`renamed_answer` done): refused when it names any task but `handle` where a task id sits
/// (`PLACES`, in any spelling a loose parser reads: `keys_fold_equal`), or names one
/// ambiguously (`ResultMarks::ambiguous_task`, or any key repeated: `reads_one_way`), where
/// a loose or first-copy parser would read some other id of the backend's. `tasks/result`
/// (the call's own result) is left as it is.
pub(crate) fn one_task_named(name: &str, handle: &str, answer: Answer) -> Answer {
    if name == "tasks/result" || answer.error_code.is_some() {
        return answer;
    }
    match Message::parse(&answer.body).ok().and_then(|m| m.result) {
        Some(result) if !names_only(result, handle) => refused(&answer, &super::ambiguous_answer()),
        _ => answer,
    }
}

/// Whether `object` (a result, or a notification's params) names no task but `task` where a
/// task id sits (`PLACES`, each key in any spelling a loose parser reads: `keys_fold_equal`),
/// and names none ambiguously (`ResultMarks::ambiguous_task`, or any key repeated anywhere,
/// a tag naming two ids, say: `reads_one_way`), so that no parser reads another id there.
pub(crate) fn names_only(object: &RawValue, task: &str) -> bool {
    let parsed: Value = serde_json::from_str(object.get()).unwrap_or(Value::Null);
    let others = PLACES.iter().any(|path| {
        let mut ids = Vec::new();
        ids_at(&parsed, path, &mut ids);
        ids.iter().any(|id| id.as_str() != Some(task))
    });
    !others
        && switchboard_wire::reads_one_way(object)
        && !ResultMarks::of(object.get()).ambiguous_task
}

/// Whether `params` (a message passed on as it is: a progress note, a listen's notification)
/// names a task where a parser may read one: any value where a task id sits (`PLACES`), each
/// step's key in any spelling, every copy of a repeated key seen (the raw members, not a
/// parse that keeps the last). Most name none, said by a byte search without parsing.
pub(crate) fn names_a_task(params: &RawValue) -> bool {
    may_name_a_task(params.get().as_bytes())
        && PLACES.iter().any(|path| names_at(params.get(), path))
}

/// Whether the raw object `object` has any value at `path`, each step's key in any spelling
/// a loose parser reads, every copy of a repeated key looked into. An object whose members
/// cannot be read (a key that is a lone surrogate, which a backend's JSON may hold and a
/// client's parser reads) may name anything: it counts as naming a task.
fn names_at(object: &str, path: &[&str]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return true;
    };
    match members(object) {
        Some(members) => {
            (members.iter()).any(|(k, v)| keys_fold_equal(k, first) && names_at(v.get(), rest))
        }
        None => object.trim_start().starts_with('{'),
    }
}

/// A message the gateway passes on to a caller that holds no handle to rename its task ids
/// to (a progress note), rid of them.
pub(crate) enum Untagged {
    /// It names no task: as it is.
    Untouched,
    /// Without the task ids: `taskId` and `task` in any spelling, `_meta` in any spelling
    /// but its own, and the related-task tag in `_meta` in any spelling.
    Stripped(Box<RawValue>),
    /// Still naming one after that (in a place a note does not have: `result`), or not
    /// rewritable: not passed on.
    Unreadable,
}

/// [`Untagged`] for `params`.
pub(crate) fn untagged(params: &RawValue) -> Untagged {
    if !names_a_task(params) {
        return Untagged::Untouched;
    }
    let names = |k: &str| {
        keys_fold_equal(k, "taskId")
            || keys_fold_equal(k, "task")
            || (k != "_meta" && keys_fold_equal(k, "_meta"))
    };
    let Some(top) = retain_members(params, |k| !names(k)) else {
        return Untagged::Unreadable;
    };
    let stripped = match object_member(&top, "_meta") {
        None => Some(top),
        Some(meta) => retain_members(meta, |k| !keys_fold_equal(k, META_RELATED_TASK))
            .and_then(|m| with_member(&top, "_meta", m.get())),
    };
    match stripped {
        Some(p) if !names_a_task(&p) => Untagged::Stripped(p),
        _ => Untagged::Unreadable,
    }
}

/// Every value at `path` in `value`, each step's key in any spelling a loose parser reads.
fn ids_at<'v>(value: &'v Value, path: &[&str], out: &mut Vec<&'v Value>) {
    let Some((first, rest)) = path.split_first() else {
        out.push(value);
        return;
    };
    let Some(members) = value.as_object() else {
        return;
    };
    for (_, v) in members.iter().filter(|(k, _)| keys_fold_equal(k, first)) {
        ids_at(v, rest, out);
    }
}

/// `answer` replaced by the error `err`, under its id.
fn refused(answer: &Answer, err: &switchboard_wire::ErrorObject) -> Answer {
    let id = Message::parse(&answer.body).ok().and_then(|m| m.id);
    Answer {
        body: encode_error(id.as_ref(), err),
        error_code: Some(i64::from(err.code)),
    }
}

/// A `tools/list` answer as a backend that keeps no tasks (one with replicas) offers its
/// tools: none says it runs as a task (`execution.taskSupport` removed), as neither its
/// capabilities nor a call to it do (`BackendInfo::without_tasks`, `refuse_on_replicas`).
/// Any other answer, and every answer of a backend that keeps tasks, is left unread.
fn tools_as_offered(holder: Holder, name: &str, answer: Answer) -> Answer {
    if name != crate::tool_headers::TOOLS_LIST || holder != Holder::Replicas {
        return answer;
    }
    match without_task_support(&answer.body) {
        Some(body) => Answer { body, ..answer },
        None => answer,
    }
}

/// The places a task id sits in a result or params object.
const PLACES: &[&[&str]] = &[
    &["taskId"],
    &["task", "taskId"],
    &["_meta", META_RELATED_TASK, "taskId"],
    // A Modern `tasks/get`'s inlined result, tagged with its task.
    &["result", "_meta", META_RELATED_TASK, "taskId"],
];

/// `object` with task id `from` replaced by `to` wherever a task id sits; `None` when there
/// was nothing to replace (or `object` is not a JSON object).
pub(crate) fn renamed(object: &str, from: &str, to: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for path in PLACES {
        let current = out.as_deref().unwrap_or(object);
        if let Some(next) = renamed_at(current, path, from, to) {
            out = Some(next);
        }
    }
    out
}

/// A JSON-RPC answer `body` whose result names task `from`, naming `to` instead (the id
/// restored as it was); `None` when it names no such task (an error, or nothing to replace).
pub(crate) fn renamed_answer(body: &[u8], from: &str, to: &str) -> Option<Vec<u8>> {
    let msg = Message::parse(body).ok()?;
    let (id, result) = (msg.id.as_ref()?, msg.result?);
    let result = renamed(result.get(), from, to)?;
    Some(encode_result(id, &result))
}

/// Whether the answer `body`, which created `task`, names no other task ([`names_only`]).
fn created_alone(body: &[u8], task: &str) -> bool {
    (Message::parse(body).ok().and_then(|m| m.result)).is_some_and(|r| names_only(r, task))
}

/// What a successful answer says it created.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// No task.
    Nothing,
    /// This task (the backend's own id).
    Task(String),
    /// A task named in a way parsers may read differently (`ResultMarks::ambiguous_task`):
    /// never passed on.
    Ambiguous,
}

/// The task a successful answer `body` created (either era's shape).
pub(crate) fn created_in(body: &[u8]) -> Created {
    if !may_name_a_task(body) {
        return Created::Nothing;
    }
    let Some(result) = Message::parse(body).ok().and_then(|m| m.result) else {
        return Created::Nothing;
    };
    let marks = ResultMarks::of(result.get());
    match (marks.ambiguous_task, marks.created_task) {
        (true, _) => Created::Ambiguous,
        (false, Some(task)) => Created::Task(task.into_owned()),
        (false, None) => Created::Nothing,
    }
}

/// Whether an answer could name a task at all, without parsing it (most answers create
/// nothing): `task` in any ASCII case (found from its `k`, the rarer letter), or a spelling
/// only a parse reads: a `\u` escape, or U+017F / U+212A, which loose parsers fold to `s` /
/// `k`. Two vectorised passes, no searcher to build.
fn may_name_a_task(body: &[u8]) -> bool {
    let ascii = memchr::memchr3_iter(b'k', b'K', b'\\', body).any(|at| match body.get(at) {
        Some(b'\\') => body.get(at + 1) == Some(&b'u'),
        _ => (at.checked_sub(3))
            .and_then(|from| body.get(from..at))
            .is_some_and(|tas| tas.eq_ignore_ascii_case(b"tas")),
    });
    ascii
        || memchr::memchr2_iter(0xC5, 0xE2, body).any(|at| {
            body.get(at..at + 2) == Some("\u{17f}".as_bytes())
                || body.get(at..at + 3) == Some("\u{212a}".as_bytes())
        })
}

/// The member of a tool's `execution` that says whether it runs as a 2025-11-25 task.
const TASK_SUPPORT: &str = "taskSupport";

/// Tools of a `tools/list` (parsed) without `execution.taskSupport` (in any spelling a
/// case-insensitive parser would read): a backend that keeps no tasks (one with replicas:
/// `destination::Route::keeps_tasks`) runs none of its tools as a task.
pub(crate) fn strip_task_support(tools: &mut [Value]) {
    for tool in tools {
        if let Some(execution) = tool.get_mut("execution").and_then(Value::as_object_mut) {
            execution.retain(|k, _| !keys_fold_equal(k, TASK_SUPPORT));
        }
    }
}

/// A `tools/list` answer `body` (either era) whose tools carry no `execution.taskSupport`,
/// [`strip_task_support`] on the raw answer: every other byte of each tool kept, the id
/// restored as it was. `None`: no result with a `tools` array (an error), left as it is.
pub(crate) fn without_task_support(body: &[u8]) -> Option<Vec<u8>> {
    let msg = Message::parse(body).ok()?;
    let (id, result) = (msg.id.as_ref()?, msg.result?);
    let tools = object_member(result, "tools")?;
    let tools: Vec<&RawValue> = serde_json::from_str(tools.get()).ok()?;
    let mut out = String::with_capacity(body.len());
    out.push('[');
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Every duplicate `execution` becomes the one without it (a parser reading the
        // first must not find it there either).
        let stripped = object_member(tool, "execution")
            .and_then(|e| retain_members(e, |k| !keys_fold_equal(k, TASK_SUPPORT)))
            .and_then(|e| with_member(tool, "execution", e.get()));
        out.push_str(stripped.as_deref().unwrap_or(tool).get());
    }
    out.push(']');
    let result = with_member(result, "tools", &out)?;
    Some(encode_result(id, result.get()))
}

/// `object` with the string at `path` replaced by `to` when it is `from`. Each step matches
/// its key in any spelling a loose parser reads as it (`keys_fold_equal`): a backend's id in
/// `_meta.<related-task>.TaskId` is swapped too, never left for a client to read.
fn renamed_at(object: &str, path: &[&str], from: &str, to: &str) -> Option<String> {
    let (first, rest) = path.split_first()?;
    let mut members = members(object)?;
    let mut changed = false;
    for (key, value) in members.iter_mut() {
        if !keys_fold_equal(key, first) {
            continue;
        }
        let replacement = match rest {
            // Compared decoded: an id the backend wrote with escapes is still that id.
            [] => (serde_json::from_str::<String>(value.get()).ok().as_deref() == Some(from))
                .then(|| serde_json::to_string(to).ok())
                .flatten(),
            _ => renamed_at(value.get(), rest, from, to),
        };
        if let Some(new) = replacement.and_then(|r| RawValue::from_string(r).ok()) {
            *value = new;
            changed = true;
        }
    }
    changed.then(|| joined(&members))
}

/// An object's members, raw and in order; `None` for anything but an object.
fn members(object: &str) -> Option<Vec<(String, Box<RawValue>)>> {
    use serde::de::{Deserializer as _, MapAccess, Visitor};
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(String, Box<RawValue>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(object);
    de.deserialize_map(Members).ok()
}

fn joined(members: &[(String, Box<RawValue>)]) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // A key read from JSON always serializes.
        out.push_str(&serde_json::to_string(key).unwrap_or_default());
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests;
