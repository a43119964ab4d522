//! 2025-11-25 tasks of a Legacy client on a Modern backend, bridged onto the Tasks extension
//! (`io.modelcontextprotocol/tasks`). A task-augmented `tools/call` goes out declaring the
//! extension; the backend's flat `CreateTaskResult` (`resultType:"task"`) becomes the Legacy
//! `{task}` and is recorded as the caller's (the pipeline then gives the client a handle).
//! `tasks/get` and `tasks/cancel` become the extension's (its `DetailedTask` shown as a Legacy
//! `Task`); `tasks/result`, which the extension does not have, is the gateway polling
//! `tasks/get` until the task ends: input the task asks for (`inputRequests`) is asked of the
//! client on its session, tagged with the task's handle, and handed to the backend with
//! `tasks/update`. `tasks/list`, which the extension does not have either, is the gateway's
//! own: the caller's recorded tasks there, each by `tasks/get`.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use switchboard_wire::classify::META_CLIENT_CAPABILITIES;
use switchboard_wire::{codes, encode_error, encode_result, restore_response};
use switchboard_wire::{ErrorObject, RequestId};

use switchboard_upstream::BackendResponse;

use super::Adapters;
use crate::progress::Vetted;
use crate::resolve::Route;
use crate::send::Outgoing;
use crate::tasks::{Owner, EXTENSION, META_RELATED_TASK};
use crate::{CoreError, Exchange};

/// Shortest and longest wait between two polls of a task (the backend's `pollIntervalMs`,
/// bounded).
const POLL_MS: (u64, u64) = (20, 1000);

/// `params` declaring the Tasks extension among its client capabilities (in `_meta`).
pub(super) fn declaring_extension(params: &RawValue) -> Option<Box<RawValue>> {
    let mut v: Value = serde_json::from_str(params.get()).ok()?;
    let caps = v
        .get_mut("_meta")?
        .as_object_mut()?
        .entry(META_CLIENT_CAPABILITIES)
        .or_insert_with(|| json!({}));
    let extensions = caps
        .as_object_mut()?
        .entry("extensions")
        .or_insert(json!({}));
    extensions
        .as_object_mut()?
        .insert(EXTENSION.into(), json!({}));
    RawValue::from_string(v.to_string()).ok()
}

/// A Legacy `Task` from the extension's task (flat `CreateTaskResult` or `DetailedTask`).
fn legacy_task(task: &Value) -> Value {
    let header = super::bridged_tasks::task_header(
        task,
        ("ttlMs", "ttl"),
        ("pollIntervalMs", "pollInterval"),
    );
    Value::Object(header)
}

/// A Modern backend's answer to a task-augmented call, as a Legacy client gets it: a created
/// task as `{task}` (`Some`), anything else unchanged (`None`).
fn legacy_created(result: &str) -> Option<String> {
    let v: Value = serde_json::from_str(result).ok()?;
    (v["resultType"] == "task").then(|| json!({ "task": legacy_task(&v) }).to_string())
}

impl Adapters<'_> {
    /// A Modern backend's answer to a Legacy client's call (`asked`: task-augmented), as
    /// the client gets it: a task it created recorded as the caller's and shown as `{task}`.
    pub(super) fn legacy_call_answer(
        &self,
        call: &Exchange<'_>,
        (id, asked): (&RequestId, bool),
        route: &Route,
        answer: &BackendResponse,
    ) -> Vec<u8> {
        let created = (asked && !answer.is_error())
            .then(|| legacy_created(answer.payload()))
            .flatten();
        match created {
            Some(task) => {
                let owner = Owner::of(call.caller, call.session());
                let renamed = route.name.apply(call.msg.params);
                let sent = renamed.as_deref().or(call.msg.params);
                self.record_created(route, &owner, &task, sent);
                encode_result(id, &task)
            }
            None => super::legacy_answer(id, answer),
        }
    }

    /// Records the task a bridged call created (`result`: the Legacy `{task}`) as `owner`'s;
    /// a session owner's only while its session lives.
    /// `call`: the params the backend got (they name the task's tool, whose guardrails
    /// check its result).
    fn record_created(&self, route: &Route, owner: &Owner, result: &str, call: Option<&RawValue>) {
        let tables = self.sender.registry.tables(&route.backend);
        (tables.tasks).record_for(&self.sender.registry.sessions, owner, result, call);
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel` from a Legacy client for a task on a
    /// Modern backend (`taskId` already the backend's own: the pipeline's handle route). A
    /// task the caller does not own gets the unknown-task answer, the backend not asked.
    pub(super) async fn legacy_task_method(
        &self,
        call: &Exchange<'_>,
        (id, name): (&RequestId, &str),
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let owner = Owner::of(call.caller, call.session());
        let tables = self.sender.registry.tables(&route.backend);
        let task = crate::tasks::requested_task(call.msg.params)
            .filter(|t| tables.tasks.owns(Some(&owner), t));
        let Some(task) = task else {
            return Ok(encode_error(Some(id), &crate::tasks::unknown_task()));
        };
        let ask = TaskCall {
            call,
            id,
            route,
            task: &task,
        };
        let answer = match name {
            "tasks/get" => self.extension(&ask, "tasks/get", None).await?,
            "tasks/cancel" => match self.extension(&ask, "tasks/cancel", None).await? {
                Ok(_) => self.extension(&ask, "tasks/get", None).await?,
                Err(refused) => Err(refused),
            },
            _ => {
                let handle = tables.tasks.handle_for(Some(&owner), &task);
                return self
                    .poll_to_end(&ask, handle.as_deref().unwrap_or(&task))
                    .await;
            }
        };
        Ok(match answer {
            Ok(detailed) => encode_result(id, &legacy_task(&detailed).to_string()),
            Err(refused) => refused,
        })
    }

    /// `tasks/list` of a Legacy client's tasks on a Modern backend (the extension has no
    /// listing): each task of the caller's the gateway recorded there, by the extension's
    /// `tasks/get`, as a Legacy `Task` under its handle (one the backend no longer knows is
    /// left out). One page: the gateway's own list gives no cursor and takes none.
    pub(super) async fn legacy_task_list(
        &self,
        call: &Exchange<'_>,
        id: &RequestId,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        if call.msg.param("cursor").is_some() {
            let err = ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: unknown cursor");
            return Ok(encode_error(Some(id), &err));
        }
        let owner = Owner::of(call.caller, call.session());
        let tables = self.sender.registry.tables(&route.backend);
        let mut tasks = Vec::new();
        for task in tables.tasks.tasks_of(&owner) {
            let ask = TaskCall {
                call,
                id,
                route,
                task: &task,
            };
            if let Ok(detailed) = self.extension(&ask, "tasks/get", None).await? {
                tasks.push(legacy_task(&detailed));
            }
        }
        let list = json!({ "tasks": tasks }).to_string();
        Ok(encode_result(
            id,
            &tables.tasks.filter_list(Some(&owner), &list),
        ))
    }

    /// One extension method on the task (`inputResponses` for `tasks/update`): its result, or
    /// the backend's error as the client's answer.
    async fn extension(
        &self,
        ask: &TaskCall<'_>,
        method: &str,
        responses: Option<Value>,
    ) -> Result<Result<Value, Vec<u8>>, CoreError> {
        let mut meta = crate::backend::gateway_envelope();
        meta[META_CLIENT_CAPABILITIES] = json!({"extensions": {EXTENSION: {}}});
        let mut params = json!({"taskId": ask.task, "_meta": meta});
        if let Some(responses) = responses {
            params["inputResponses"] = responses;
        }
        let params = RawValue::from_string(params.to_string())
            .map_err(|_| CoreError::InvalidParams("params"))?;
        let answer = self
            .sender
            .send(Outgoing {
                session: ask.call.session(),
                id: ask.id,
                name: method,
                params: Some(&params),
                stream: ask.call.stream.clone(),
                listen: None,
                route: ask.route,
                credential: ask.call.caller.credential.as_ref(),
            })
            .await?;
        if answer.is_error() {
            return Ok(Err(restore_response(
                ask.id,
                answer.member(),
                answer.payload(),
            )));
        }
        let result = serde_json::from_str(answer.payload());
        result.map(Ok).map_err(|_| CoreError::UnexpectedResponse)
    }

    /// `tasks/result`: polls the task until it ends (within the request deadline), asking
    /// the client for the input it needs meanwhile; its result, or its error.
    async fn poll_to_end(&self, ask: &TaskCall<'_>, handle: &str) -> Result<Vec<u8>, CoreError> {
        let limit = self.sender.max_request_time;
        match tokio::time::timeout(limit, self.polled(ask, handle)).await {
            Ok(answer) => answer,
            Err(_) => Err(CoreError::Timeout(limit)),
        }
    }

    async fn polled(&self, ask: &TaskCall<'_>, handle: &str) -> Result<Vec<u8>, CoreError> {
        let id = ask.id;
        loop {
            let detailed = match self.extension(ask, "tasks/get", None).await? {
                Ok(d) => d,
                Err(refused) => return Ok(refused),
            };
            match detailed["status"].as_str() {
                Some("completed") => {
                    let mut result = detailed["result"].clone();
                    if let Some(m) = result.as_object_mut() {
                        m.remove("resultType");
                        tag_related(m, ask.task);
                    }
                    return Ok(encode_result(id, &result.to_string()));
                }
                Some("failed") => return Ok(encode_error(Some(id), &error_of(&detailed))),
                Some("cancelled") => {
                    let err = ErrorObject::new(codes::INTERNAL_ERROR, "The task was cancelled");
                    return Ok(encode_error(Some(id), &err));
                }
                Some("input_required") => {
                    let requests = detailed["inputRequests"].clone();
                    let responses = match self.ask_client(ask, handle, &requests).await? {
                        Ok(r) => r,
                        Err(refused) => return Ok(refused),
                    };
                    if let Err(refused) =
                        self.extension(ask, "tasks/update", Some(responses)).await?
                    {
                        return Ok(refused);
                    }
                }
                _ => {
                    let poll = detailed["pollIntervalMs"].as_u64().unwrap_or(POLL_MS.0);
                    let wait = poll.clamp(POLL_MS.0, POLL_MS.1);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
            }
        }
    }

    /// Each of the task's `inputRequests` asked of the Legacy client on its session (tagged
    /// with the task's handle): the answers by key, or the client's refusal as the answer.
    async fn ask_client(
        &self,
        ask: &TaskCall<'_>,
        handle: &str,
        requests: &Value,
    ) -> Result<Result<Value, Vec<u8>>, CoreError> {
        let Some(sid) = ask.call.session() else {
            return Err(CoreError::NoClientStream);
        };
        let requests = requests.as_object().cloned().unwrap_or_default();
        if requests.len() > crate::MAX_ASKS {
            let err = ErrorObject::new(codes::INTERNAL_ERROR, "too many inputRequests");
            return Ok(Err(encode_error(Some(ask.id), &err)));
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            let method = request["method"].as_str().unwrap_or_default().to_owned();
            if !matches!(
                method.as_str(),
                "elicitation/create" | "sampling/createMessage" | "roots/list"
            ) {
                let err =
                    ErrorObject::new(codes::INTERNAL_ERROR, "an inputRequest cannot be relayed");
                return Ok(Err(encode_error(Some(ask.id), &err)));
            }
            let mut params = request.get("params").cloned().unwrap_or(json!({}));
            if let Some(p) = params.as_object_mut() {
                tag_related(p, handle);
            }
            let params = RawValue::from_string(params.to_string()).ok();
            // The backend's question is checked by the guardrails before the client sees it;
            // refused, that is the `tasks/result`'s answer.
            let params = match self
                .sender
                .registry
                .progress
                .vet(&method, params.as_deref())
            {
                Vetted::Pass => params,
                Vetted::Replaced(p) => Some(p),
                Vetted::Refused(guardrail) => {
                    let err = crate::guardrails::refusal(&guardrail);
                    return Ok(Err(encode_error(Some(ask.id), &err)));
                }
            };
            let stream = ask.call.stream.as_ref();
            match self
                .asks
                .ask(sid, stream, &method, params.as_deref())
                .await?
            {
                Ok(answer) => {
                    // Reaches the backend (in `tasks/update`) only as its request rules
                    // allow; refused, that is the `tasks/result`'s answer.
                    let progress = &self.sender.registry.progress;
                    let answer = match progress.vet_answer(ask.route.backend.as_str(), &answer) {
                        Vetted::Pass => answer,
                        Vetted::Replaced(new) => new,
                        Vetted::Refused(guardrail) => {
                            let err = crate::guardrails::refusal(&guardrail);
                            return Ok(Err(encode_error(Some(ask.id), &err)));
                        }
                    };
                    let answer = serde_json::from_str(answer.get()).unwrap_or(Value::Null);
                    responses.insert(key, answer);
                }
                Err(error) => return Ok(Err(restore_response(ask.id, "error", error.get()))),
            }
        }
        Ok(Ok(Value::Object(responses)))
    }
}

/// The task method being bridged: the client's request, its id, where the task is, and the
/// backend's id for it.
struct TaskCall<'a> {
    call: &'a Exchange<'a>,
    id: &'a RequestId,
    route: &'a Route,
    task: &'a str,
}

/// Tags `object` with the related task `task` in its `_meta` (a backend's `_meta` that is no
/// object is replaced: indexing into it would panic).
fn tag_related(object: &mut Map<String, Value>, task: &str) {
    let meta = object.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_RELATED_TASK.into(), json!({ "taskId": task }));
    }
}

/// A failed task's error (its `error`), as a JSON-RPC error object.
fn error_of(detailed: &Value) -> ErrorObject {
    let error = &detailed["error"];
    let code = error["code"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok())
        .unwrap_or(codes::INTERNAL_ERROR);
    let message = error["message"]
        .as_str()
        .unwrap_or("The task failed")
        .to_owned();
    let err = ErrorObject::new(code, message);
    match error.get("data") {
        Some(data) => err.with_data(data.clone()),
        None => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_meta_that_is_no_object_is_replaced_not_indexed() {
        let mut result = json!({"content": [], "_meta": "x"});
        let m = result.as_object_mut().unwrap();
        tag_related(m, "h");
        assert_eq!(result["_meta"], json!({META_RELATED_TASK: {"taskId": "h"}}));
        let mut kept = json!({"_meta": {"k": 1}});
        tag_related(kept.as_object_mut().unwrap(), "h");
        assert_eq!(kept["_meta"]["k"], 1);
    }
}
