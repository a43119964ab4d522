//! What a request or an answer says about tasks: whether it asks for one or names one,
//! what a Modern backend's answer created, the Tasks extension's declarations.

use std::borrow::Cow;

use serde_json::value::RawValue;
use serde_json::Value;

use switchboard_upstream::BackendResponse;
use switchboard_wire::{codes, object_member, ErrorObject, ResultMarks};

use super::{Owner, BY_ID, EXTENSION, LIST, MAY_CREATE, META_RELATED_TASK};
use crate::Exchange;
use crate::Principal;

/// Whose task a Modern backend's answer created, if any: one the request asked for (as
/// `owner`, already known), or a handle the backend returned unasked to a `tools/call` (the
/// Tasks extension allows it), whose owner is learned only then.
pub(crate) fn created_by<'a>(
    caller: &Principal,
    (owner, asked): (Option<&'a Owner>, bool),
    name: &str,
    answer: &BackendResponse,
    marks: &ResultMarks<'_>,
) -> Option<Cow<'a, Owner>> {
    if answer.is_error() {
        return None;
    }
    if asked {
        owner.map(Cow::Borrowed)
    } else if name == MAY_CREATE && marks.created_task.is_some() {
        Some(Cow::Owned(Owner::of(caller, None)))
    } else {
        None
    }
}

/// Whether a Modern request declares the Tasks extension in its client capabilities
/// (`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`).
pub(crate) fn extension_declared(params: Option<&RawValue>) -> bool {
    let caps = params
        .and_then(|p| object_member(p, "_meta"))
        .and_then(|m| object_member(m, switchboard_wire::classify::META_CLIENT_CAPABILITIES))
        .and_then(|c| object_member(c, "extensions"))
        .and_then(|e| object_member(e, EXTENSION));
    caps.is_some_and(|v| v.get().trim() != "null")
}

/// The extension's task status notification (`subscriptions/listen`, `notifications.taskIds`),
/// which the gateway does not offer.
pub(crate) const NOTIFICATION: &str = "notifications/tasks";

/// What is wrong with a `tasks/update`'s `inputResponses` (an object whose every member is a
/// result object), as the -32602 answer; `None`: nothing. Judged on the request alone, so
/// before (and saying nothing about) whose the task is.
pub(crate) fn unusable_responses(params: Option<&RawValue>) -> Option<ErrorObject> {
    let responses = params
        .and_then(|p| object_member(p, "inputResponses"))
        .and_then(|r| serde_json::from_str::<serde_json::Map<String, Value>>(r.get()).ok());
    let message = match responses {
        None => "Invalid params: inputResponses must be an object",
        Some(r) if r.values().all(Value::is_object) => return None,
        Some(_) => "Invalid params: each of inputResponses must be a result object",
    };
    Some(ErrorObject::new(codes::INVALID_PARAMS, message))
}

/// `object` without the members a loose parser reads as `key` (another case, a folding
/// character, a tail after U+0000: `keys_fold_equal`) but `key` itself.
pub(crate) fn loosely_named(object: &mut Value, key: &str) {
    if let Some(members) = object.as_object_mut() {
        members.retain(|k, _| k == key || !switchboard_wire::keys_fold_equal(k, key));
    }
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

/// The task a `tasks/get|result|cancel|update` request names: its one string `taskId`. A
/// request naming it twice gets `None` (so the unknown-task answer): the gateway checks one
/// value and a backend whose parser keeps the first duplicate would act on the other.
pub(crate) fn requested_task(params: Option<&RawValue>) -> Option<String> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct TaskIds(Vec<Option<String>>);
    impl<'de> Visitor<'de> for TaskIds {
        type Value = Vec<Option<String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "taskId" {
                    let v: &RawValue = map.next_value()?;
                    self.0.push(serde_json::from_str(v.get()).ok());
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(self.0)
        }
    }
    let mut de = serde_json::Deserializer::from_str(params?.get());
    let mut ids = de.deserialize_map(TaskIds(Vec::new())).ok()?;
    match ids.len() {
        1 => ids.pop().flatten(),
        _ => None,
    }
}

/// Whether a request with this method names tasks, whatever its params.
pub(crate) fn concerns_tasks(method: &str) -> bool {
    method == LIST || BY_ID.contains(&method)
}

/// What a request asks of tasks, judged once per request: whether it is task-augmented
/// (`params.task`), and its owner where one is needed (task-augmented requests, and a Modern
/// request's task methods; `None` for any other request).
#[derive(Debug)]
pub(crate) struct TaskAsk {
    pub(crate) asked: bool,
    pub(crate) owner: Option<Owner>,
}

impl TaskAsk {
    pub(crate) fn of(ex: &Exchange<'_>) -> Self {
        let asked = is_task_request(ex.msg.params);
        let task_method = ex.is_modern() && ex.msg.method.is_some_and(concerns_tasks);
        let owner = (asked || task_method).then(|| Owner::of(ex.caller, ex.session()));
        TaskAsk { asked, owner }
    }
}

/// Whether a task-augmented request asked for a task (`params.task`).
pub(crate) fn is_task_request(params: Option<&RawValue>) -> bool {
    params.is_some_and(|p| switchboard_wire::has_member(p.get(), &["task"]))
}
