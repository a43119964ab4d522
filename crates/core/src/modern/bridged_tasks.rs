//! The Tasks extension (`io.modelcontextprotocol/tasks`) for a Modern client of a Legacy
//! backend, on the backend's 2025-11-25 tasks. A `tools/call` declaring the extension, of a
//! tool the backend runs as a task (`execution.taskSupport`, learned with the tools'
//! `Mcp-Param-*` designations in `tool_headers`; or one the client asked as a task), goes out
//! task-augmented; the backend's `{task}` is recorded as the caller's and answered as the
//! extension's flat `CreateTaskResult` (the pipeline names it by its handle).
//!
//! `tasks/get` is the backend's `tasks/get` as a `DetailedTask`: an ended task inlines its
//! outcome (the backend's `tasks/result`, answered at once for an ended task), and a task
//! whose backend asked questions shows them as `inputRequests` (held by `dispatch` in
//! `tasks::TaskQuestions`). `tasks/update` answers those questions to the backend;
//! `tasks/cancel` is the backend's. Ownership was checked before (`modern::refusal`) and is
//! checked again here, before the backend is asked.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use switchboard_upstream::BackendResponse;
use switchboard_wire::classify::META_SERVER_INFO;
use switchboard_wire::{codes, encode_result, object_member, with_member, ErrorObject};
use switchboard_wire::{Message, RequestId};

use super::Adapters;
use crate::resolve::Route;
use crate::send::Outgoing;
use crate::tasks::{Owner, META_RELATED_TASK};
use crate::tool_headers::TOOLS_LIST;
use crate::{Answer, CoreError, Principal};

/// One extension request on a task of a Legacy backend: who asks, its id, where the task is,
/// and the backend's id for it.
struct OnTask<'a> {
    caller: &'a Principal,
    id: &'a RequestId,
    route: &'a Route,
    task: String,
}

impl Adapters<'_> {
    /// Whether a Modern request to a Legacy backend is a call the gateway runs as a task: a
    /// `tools/call` declaring the extension, of a tool the backend runs as one (or asked as
    /// one), on a backend that keeps tasks.
    pub(super) async fn runs_as_task(&self, msg: &Message<'_>, route: &Route) -> bool {
        let declared = crate::tasks::extension_declared(msg.params);
        if msg.method != Some(crate::tasks::MAY_CREATE) || !declared || !route.keeps_tasks() {
            return false;
        }
        if crate::tasks::is_task_request(msg.params) {
            return true;
        }
        // Per-session mode keeps a caller's calls on its own process: the shared one runs a
        // task only when the client asked for one.
        if self.mrtr.spawner.for_backend(&route.backend).is_some() {
            return false;
        }
        let renamed = route.name.apply(msg.params);
        let tool = (renamed.as_deref().or(msg.params))
            .and_then(|p| object_member(p, "name"))
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        let Some(tool) = tool else {
            return false;
        };
        let tables = self.sender.registry.tables(&route.backend);
        let (sender, backends, backend) = (self.sender, self.resolver.backends, &route.backend);
        let fetch = |cursor: Option<String>| async move {
            (sender.list_page(backends, backend, TOOLS_LIST, cursor.as_deref())).await
        };
        tables.tool_headers.runs_as_task(&tool, fetch).await
    }

    /// The call as a task of the caller's: sent task-augmented, the backend's `{task}`
    /// recorded and answered as the extension's `CreateTaskResult`.
    pub(super) async fn task_call(
        &self,
        caller: &Principal,
        (id, msg): (&RequestId, &Message<'_>),
        route: &Route,
    ) -> Result<Answer, CoreError> {
        let stripped = msg.params.and_then(super::strip_reserved);
        let params = stripped.as_deref().or(msg.params);
        let params = params.ok_or(CoreError::InvalidParams("params"))?;
        let augmented;
        let params = match crate::tasks::is_task_request(Some(params)) {
            true => params,
            false => {
                augmented = with_member(params, "task", "{}")
                    .ok_or(CoreError::InvalidParams("params must be an object"))?;
                &augmented
            }
        };
        let on = OnTask {
            caller,
            id,
            route,
            task: String::new(),
        };
        let answer = self.legacy(&on, crate::tasks::MAY_CREATE, params).await?;
        if answer.is_error() {
            return Ok(super::bridge_error(id, &answer));
        }
        let created: Value = serde_json::from_str(answer.payload()).unwrap_or(Value::Null);
        let Some(task) = created.get("task").filter(|t| t.is_object()) else {
            // Not a task after all (the backend ran it at once): its result as it is.
            return Ok(super::complete(
                id,
                "tools/call",
                &answer,
                &self.mrtr.presented,
            ));
        };
        let owner = Owner::of(caller, None);
        let renamed = route.name.apply(Some(params));
        let sent = renamed.as_deref().or(Some(params));
        let tables = self.sender.registry.tables(&route.backend);
        // Expected before it is recorded: a question about it may be on its way already.
        if let Some(id) = task["taskId"].as_str() {
            let answers = crate::tasks::questions::answerable(msg.params);
            tables.questions.expect(id, &owner, answers);
        }
        (tables.tasks).record_for(
            &self.sender.registry.sessions,
            &owner,
            answer.payload(),
            sent,
        );
        let mut flat = extension_task(task);
        flat.insert("resultType".into(), json!("task"));
        Ok(self.answer(id, flat))
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel` of the caller's task on a Legacy backend
    /// (`taskId` already the backend's own: the pipeline's handle route).
    pub(super) async fn task_method(
        &self,
        caller: &Principal,
        (id, name, msg): (&RequestId, &str, &Message<'_>),
        route: &Route,
    ) -> Result<Answer, CoreError> {
        let tables = self.sender.registry.tables(&route.backend);
        let owner = Owner::of(caller, None);
        let task =
            crate::tasks::requested_task(msg.params).filter(|t| tables.tasks.owns(Some(&owner), t));
        let Some(task) = task else {
            return Ok(Answer::error(id, &crate::tasks::unknown_task()));
        };
        let on = OnTask {
            caller,
            id,
            route,
            task,
        };
        match name {
            "tasks/get" => self.task_get(&on).await,
            "tasks/cancel" => {
                let answer = self.legacy_on_task(&on, "tasks/cancel").await?;
                if answer.is_error() {
                    return Ok(refused(id, name, &answer));
                }
                tables.questions.end(&on.task);
                Ok(self.answer(id, Map::new()))
            }
            _ => {
                // Its shape was checked before routing (`modern::refusal`).
                let responses = msg
                    .param("inputResponses")
                    .and_then(|r| serde_json::from_str::<Map<String, Value>>(r.get()).ok())
                    .unwrap_or_default();
                tables.questions.answer(&on.task, &owner, &responses);
                Ok(self.answer(id, Map::new()))
            }
        }
    }

    /// The task as the extension's `DetailedTask`: its outcome inlined once it ended, its
    /// held questions as `inputRequests` while any wait.
    async fn task_get(&self, on: &OnTask<'_>) -> Result<Answer, CoreError> {
        let answer = self.legacy_on_task(on, "tasks/get").await?;
        if answer.is_error() {
            return Ok(refused(on.id, "tasks/get", &answer));
        }
        let legacy: Value = serde_json::from_str(answer.payload()).unwrap_or(Value::Null);
        let mut detailed = extension_task(&legacy);
        let questions = &self.sender.registry.tables(&on.route.backend).questions;
        match legacy["status"].as_str() {
            Some("completed" | "failed") => {
                questions.end(&on.task);
                let outcome = self.legacy_on_task(on, "tasks/result").await?;
                let value: Value = serde_json::from_str(outcome.payload()).unwrap_or(Value::Null);
                match outcome.is_error() {
                    true => detailed.insert("error".into(), failure(&value)),
                    false => detailed.insert("result".into(), inlined(value)),
                };
            }
            Some("cancelled") => questions.end(&on.task),
            status => match questions.pending(&on.task, &Owner::of(on.caller, None)) {
                Some(requests) => {
                    detailed.insert("status".into(), json!("input_required"));
                    detailed.insert("inputRequests".into(), requests);
                }
                // Nothing to answer yet (the question is still on its way): still working.
                None if status == Some("input_required") => {
                    detailed.insert("status".into(), json!("working"));
                }
                None => {}
            },
        }
        Ok(self.answer(on.id, detailed))
    }

    /// A Legacy task method naming the task.
    async fn legacy_on_task(
        &self,
        on: &OnTask<'_>,
        name: &str,
    ) -> Result<BackendResponse, CoreError> {
        let params = RawValue::from_string(json!({ "taskId": on.task }).to_string())
            .map_err(|_| CoreError::InvalidParams("taskId"))?;
        self.legacy(on, name, &params).await
    }

    /// One request to the Legacy backend on the caller's behalf.
    async fn legacy(
        &self,
        on: &OnTask<'_>,
        name: &str,
        params: &RawValue,
    ) -> Result<BackendResponse, CoreError> {
        (self.sender)
            .send(Outgoing {
                session: None,
                id: on.id,
                name,
                params: Some(params),
                stream: None,
                listen: None,
                route: on.route,
                credential: on.caller.credential.as_ref(),
            })
            .await
    }

    /// A Modern result: `members`, `resultType: "complete"` unless they say otherwise, and
    /// the `serverInfo` the gateway presents.
    fn answer(&self, id: &RequestId, mut members: Map<String, Value>) -> Answer {
        members
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
        let info = json!({ META_SERVER_INFO: self.mrtr.presented.server_info });
        members.insert("_meta".into(), info);
        Answer::ok(encode_result(id, &Value::Object(members).to_string()))
    }
}

/// The extension's task (`CreateTaskResult`, `DetailedTask` header) from a Legacy `Task`.
fn extension_task(task: &Value) -> Map<String, Value> {
    task_header(task, ("ttl", "ttlMs"), ("pollInterval", "pollIntervalMs"))
}

/// A task's header in the other era's shape: the members both eras share, and its
/// time-to-live (`null` when absent: unlimited) and poll interval renamed `from` → `to`.
pub(super) fn task_header(
    task: &Value,
    ttl: (&str, &str),
    poll: (&str, &str),
) -> Map<String, Value> {
    let mut out = Map::new();
    for key in [
        "taskId",
        "status",
        "statusMessage",
        "createdAt",
        "lastUpdatedAt",
    ] {
        if let Some(v) = task.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert(
        ttl.1.into(),
        task.get(ttl.0).cloned().unwrap_or(Value::Null),
    );
    if let Some(v) = task.get(poll.0) {
        out.insert(poll.1.into(), v.clone());
    }
    out
}

/// A task's result as the `DetailedTask` inlines it: without the related-task tag (it names
/// the backend's id; the task around it names the task), and with no member a loose parser
/// would read as its `resultType`, `inputRequests` or `requestState` (a Legacy result has
/// none of its own).
fn inlined(mut result: Value) -> Value {
    let Some(members) = result.as_object_mut() else {
        return result;
    };
    members.retain(|k, _| {
        !["resultType", "inputRequests", "requestState"]
            .iter()
            .any(|m| switchboard_wire::keys_fold_equal(k, m))
    });
    if let Some(meta) = members.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(META_RELATED_TASK);
        if meta.is_empty() {
            members.remove("_meta");
        }
    }
    result
}

/// A failed task's error as the `DetailedTask` inlines it: its code, in the gateway's words
/// (the backend's could name its own id for the task).
fn failure(error: &Value) -> Value {
    let code = error["code"]
        .as_i64()
        .unwrap_or(i64::from(codes::INTERNAL_ERROR));
    json!({"code": code, "message": "The task failed"})
}

/// The backend's error for a task method, as the gateway's own words: its message could
/// name the backend's id for the task. Its code is kept (an unknown task's -32602 becomes the
/// gateway's unknown-task answer in `modern::own_tasks_only`).
fn refused(id: &RequestId, method: &str, answer: &BackendResponse) -> Answer {
    let code = serde_json::from_str::<Value>(answer.payload())
        .ok()
        .and_then(|e| e["code"].as_i64())
        .and_then(|c| i32::try_from(c).ok())
        .unwrap_or(codes::INTERNAL_ERROR);
    let message = format!("The backend refused {method} for this task");
    Answer::error(id, &ErrorObject::new(code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_task_becomes_the_extensions_shape() {
        let legacy = json!({"taskId":"t","status":"working","createdAt":"a","lastUpdatedAt":"b",
            "ttl":60000,"pollInterval":200,"extra":1});
        let flat = Value::Object(extension_task(&legacy));
        assert_eq!(
            flat,
            json!({"taskId":"t","status":"working","createdAt":"a","lastUpdatedAt":"b",
                "ttlMs":60000,"pollIntervalMs":200})
        );
        let unlimited = Value::Object(extension_task(&json!({"taskId":"t","ttl":null})));
        assert_eq!(unlimited["ttlMs"], Value::Null);
    }

    #[test]
    fn an_inlined_result_names_no_backend_task() {
        let tagged = json!({"content":[],"_meta":{META_RELATED_TASK:{"taskId":"backend-1"}}});
        assert_eq!(inlined(tagged), json!({"content":[]}));
        let kept = json!({"content":[],"_meta":{META_RELATED_TASK:{"taskId":"b"},"k":1}});
        assert_eq!(inlined(kept), json!({"content":[],"_meta":{"k":1}}));
        let loose = json!({"content":[],"ResultType":"input_required","inputRequests":{},
            "re\u{17f}ultType":"x","requeststate":"s","isError":false});
        assert_eq!(inlined(loose), json!({"content":[],"isError":false}));
    }
}
