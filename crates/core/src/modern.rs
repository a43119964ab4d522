//! Modern (2026-07-28) requests: stateless by construction.
//!
//! Invariant 4: nothing here reads a session id or touches the session store; every request
//! gets a fresh route key and leaves no entry behind when it completes (its progress route and
//! listen registration are guards dropped with the request).
//!
//! Against a Modern backend the request passes through (route key, progress token and listen
//! tag rewritten, nothing else). Against a Legacy-only backend the gateway bridges: it answers
//! `server/discover` itself, serves `subscriptions/listen` from its own registries, strips the
//! reserved `io.modelcontextprotocol/*` keys before the backend, and stamps results with
//! `resultType`, cache hints and `serverInfo`. In per-session mode requests run on the
//! caller's warm partition (`mrtr::partition`), and `tools/call`, `prompts/get` and
//! `resources/read` that declare an input capability go through the MRTR bridge (`mrtr`), so
//! a Legacy backend's requests for input reach the client as `input_required` results.

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use switchboard_upstream::BackendResponse;
use switchboard_wire::classify::{META_SERVER_INFO, RESERVED_PREFIX};
use switchboard_wire::{
    codes, encode_result, keys_fold_equal, method, object_member, restore_response, retain_members,
    version, with_member, with_members, ErrorObject, Message, RequestId,
};

use crate::client_ask::ClientAsks;
use crate::mrtr::{Calls, PartitionKey};
use crate::registry::Registry;
use crate::resolve::{From, Resolver, Route};
use crate::send::{Outgoing, Sender};
use crate::{Answer, CoreError};

mod bridged_tasks;
mod from_legacy;
mod legacy_tasks;
mod listen;
mod pass;

pub(crate) use listen::honoured;
pub(crate) use listen::listen_needs_stream;

/// The Modern listen method.
pub(crate) const LISTEN: &str = "subscriptions/listen";

/// Methods that do not exist in 2026-07-28: answered 404/-32601 by the gateway.
pub(crate) const REMOVED: &[&str] = &[
    method::INITIALIZE,
    method::PING,
    method::SET_LEVEL,
    method::SUBSCRIBE,
    method::UNSUBSCRIBE,
];

/// Whether `name` is a method 2026-07-28 removed.
pub(crate) fn removed(name: &str) -> bool {
    REMOVED.contains(&name)
}

/// The Modern answer to a method the gateway does not serve: 404 with -32601 (the status the
/// HTTP layer gives that code), the method as `data` (bounded: the client wrote it).
pub(crate) fn method_not_found(id: &RequestId, name: &str) -> Answer {
    let name: String = name.chars().take(128).collect();
    let err = ErrorObject::new(codes::METHOD_NOT_FOUND, "Method not found").with_data(json!(name));
    Answer::error(id, &err)
}

/// Results that carry cache hints (SEP-2549).
const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// `tasks/list` for a stateless caller shows only its principal's stateless tasks, and a
/// backend's "invalid task" answer is replaced by the gateway's own, so another owner's
/// task and a task that does not exist look exactly alike (the route's backend's task
/// owners in `registry`).
pub(crate) fn own_tasks_only(
    registry: &Registry,
    owner: Option<&crate::tasks::Owner>,
    msg: &Message<'_>,
    answer: Answer,
    route: &Route,
) -> Answer {
    let by_id = msg.method.is_some_and(|m| crate::tasks::BY_ID.contains(&m));
    if let (true, Some(code), Some(id)) = (by_id, answer.error_code, msg.id.as_ref()) {
        if code == i64::from(codes::INVALID_PARAMS) {
            return Answer::error(id, &crate::tasks::unknown_task());
        }
    }
    let (Some(crate::tasks::LIST), None, Some(id)) =
        (msg.method, answer.error_code, msg.id.as_ref())
    else {
        return answer;
    };
    let result = serde_json::from_slice::<Value>(&answer.body)
        .map(|v| v["result"].to_string())
        .unwrap_or_default();
    let tables = registry.tables(&route.backend);
    Answer {
        body: encode_result(id, &tables.tasks.filter_list(owner, &result)),
        error_code: None,
    }
}

/// What the gateway answers a routed Modern request before any adapter: a task method
/// naming a task that is not the caller's principal's (a session's task, another
/// principal's and a missing one look alike; task owners in `registry`), a task-augmented
/// request from a caller who could own no task, and a method 2026-07-28 removed. `None`:
/// the request goes on.
pub(crate) fn refusal(
    registry: &Registry,
    task: &crate::tasks::TaskAsk,
    msg: &Message<'_>,
    route: &Route,
) -> Result<Option<Answer>, CoreError> {
    let (Some(id), Some(name)) = (msg.id.as_ref(), msg.method) else {
        return Err(CoreError::UnexpectedResponse);
    };
    // The Tasks extension has no `tasks/result` or `tasks/list`, and its task methods exist
    // only for a request that declares it: both answers depend on nothing but the request,
    // so they come before (and say nothing about) whose the task is.
    if crate::tasks::MODERN_REMOVED.contains(&name) {
        return Ok(Some(method_not_found(id, name)));
    }
    if crate::tasks::BY_ID.contains(&name) && !crate::tasks::extension_declared(msg.params) {
        return Ok(Some(Answer::error(id, &crate::tasks::missing_extension())));
    }
    if let Some(err) = (name == "tasks/update")
        .then(|| crate::tasks::unusable_responses(msg.params))
        .flatten()
    {
        return Ok(Some(Answer::error(id, &err)));
    }
    if crate::tasks::BY_ID.contains(&name) {
        let requested = crate::tasks::requested_task(msg.params);
        let tables = registry.tables(&route.backend);
        if !requested.is_some_and(|t| tables.tasks.owns(task.owner.as_ref(), &t)) {
            return Ok(Some(Answer::error(id, &crate::tasks::unknown_task())));
        }
    }
    if removed(name) {
        return Ok(Some(method_not_found(id, name)));
    }
    Ok(None)
}

/// Whether a Modern request passes straight through to its backend (of `backends`): always
/// to a Modern-only one, to a dual one unless it stopped answering Modern requests (then it
/// is bridged like a Legacy one).
pub(crate) fn passes(backends: &crate::Backends, route: &Route) -> Result<bool, CoreError> {
    let entry = route.entry(backends)?;
    Ok(entry.modern_now() || !entry.info().era.legacy)
}

/// The Modern adapters (and a Legacy client's onto a Modern backend) at work on one request:
/// what they read, start and send through, given explicitly (the gateway builds one per
/// request).
pub(crate) struct Adapters<'a> {
    /// Reaches the backends.
    pub(crate) sender: &'a Sender,
    /// The backend set, the merged lists, and where a request goes on a partition.
    pub(crate) resolver: Resolver<'a>,
    /// The MRTR bridge (partitions, dedicated calls, sealed `requestState`s) and what it
    /// reads: the registry, the per-session spawner, the background set, what the gateway
    /// presents, whether a policy watches listens.
    pub(crate) mrtr: Calls<'a>,
    /// A Legacy client's questions (`relay`).
    pub(crate) asks: &'a ClientAsks,
}

impl Adapters<'_> {
    /// The bridge adapter: a Modern request onto a Legacy backend. The gateway answers
    /// `server/discover` and serves `subscriptions/listen` itself; in per-session mode calls
    /// run on the caller's partition, and calls that may need client input go through MRTR.
    pub(crate) async fn bridge(
        &self,
        caller: &crate::Principal,
        (owner, asked_task): (Option<&crate::tasks::Owner>, bool),
        msg: &Message<'_>,
        stream: Option<mpsc::Sender<Bytes>>,
        route: &Route,
    ) -> Result<Answer, CoreError> {
        let (Some(id), Some(name)) = (msg.id.as_ref(), msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let entry = route.entry(self.resolver.backends)?;
        // The Tasks extension on the backend's 2025-11-25 tasks (`bridged_tasks`): on the
        // shared process, where the gateway tracks their owners.
        match name {
            "tasks/get" | "tasks/update" | "tasks/cancel" if route.keeps_tasks() => {
                return self.task_method(caller, (id, name, msg), route).await
            }
            crate::tasks::MAY_CREATE if self.runs_as_task(msg, route).await => {
                return self.task_call(caller, (id, msg), route).await
            }
            _ => {}
        }
        // Sessions get an upstream of their own on this backend: Modern callers one per
        // principal (a partition), never the shared process.
        let own_backends = self.mrtr.spawner.for_backend(&route.backend).is_some();
        match name {
            method::DISCOVER => Ok(discover(id, entry.info())),
            // Per-session mode: the caller's partition is the process its calls change.
            LISTEN if own_backends => match stream {
                Some(stream) => {
                    (self.mrtr)
                        .partition_listen(caller, (id, msg), stream, route)
                        .await
                }
                None => Ok(listen_needs_stream(id)),
            },
            LISTEN => self.bridged_listen(caller, id, msg, stream, route).await,
            // Per-session mode: calls that may need client input go through the MRTR bridge
            // (`mrtr`); shared mode cannot attribute a backend's requests.
            // (A call asking for logs too: its log level is set on a process of its own.)
            _ if crate::mrtr::applies(self.mrtr.spawner, &route.backend, name)
                && (PartitionKey::of(caller, msg, &route.backend).input_capable()
                    || msg.param("requestState").is_some()
                    || msg
                        .meta(switchboard_wire::classify::META_LOG_LEVEL)
                        .is_some()) =>
            {
                (self.mrtr)
                    .mrtr((caller, route), id, name, msg, stream)
                    .await
            }
            // Per-session mode: everything else of this caller runs on its warm partition, so
            // the backend keeps its state between calls (tasks stay on the shared backend,
            // where the gateway tracks their owners).
            _ if own_backends
                && !asked_task
                && !crate::tasks::BY_ID.contains(&name)
                && name != crate::tasks::LIST =>
            {
                let key = PartitionKey::of(caller, msg, &route.backend);
                // The caller's partition is its own: its requests go on the caller's behalf.
                let credential = caller.credential.as_ref();
                let using = self.mrtr.partition(&key, credential).await?;
                let started = From::Started(&route.backend, using.0.handle.clone());
                let mut on_partition = (self.resolver)
                    .resolve(started, name, msg.params)?
                    .ok_or_else(|| CoreError::UnknownBackend(route.backend.clone()))?;
                // The name at the backend is the one routing chose (an exposed name renamed).
                on_partition.name = route.name.clone();
                let on_partition = &on_partition;
                // While it runs, what the backend asks is attributable to no one call; a call
                // that declared nothing the backend could ask for is refused with -32021 when
                // the backend asks anyway and the request is attributable to it.
                let running = match crate::mrtr::METHODS.contains(&name) {
                    true => using.0.plain.start(),
                    false => using.0.plain.start_other(),
                };
                let answer =
                    self.bridged(id, (name, msg), stream, (on_partition, credential), None);
                running.answer_or_blamed(id, answer).await
            }
            _ => {
                let record = owner.filter(|_| asked_task);
                // The shared handle: a remote's is stateless, so the caller's credential goes
                // with this one request only.
                let credential = caller.credential.as_ref();
                self.bridged(id, (name, msg), stream, (route, credential), record)
                    .await
            }
        }
    }

    /// A Modern backend's result with the gateway's `serverInfo` in place of the backend's.
    fn as_gateway(&self, id: &RequestId, answer: &BackendResponse) -> Answer {
        let server_info = json!({ META_SERVER_INFO: self.mrtr.presented.server_info }).to_string();
        let result = serde_json::value::RawValue::from_string(answer.payload().to_owned()).ok();
        match result.as_deref().and_then(|r| merge_meta(r, &server_info)) {
            Some(r) => Answer::ok(encode_result(id, r.get())),
            None => passthrough(id, answer),
        }
    }

    /// A Modern request onto a Legacy backend, on behalf of the caller whose `credential` it
    /// is; a task it creates is recorded as `task_owner`'s.
    async fn bridged(
        &self,
        id: &RequestId,
        (name, msg): (&str, &Message<'_>),
        stream: Option<mpsc::Sender<Bytes>>,
        (route, credential): (&Route, Option<&switchboard_upstream::Credential>),
        task_owner: Option<&crate::tasks::Owner>,
    ) -> Result<Answer, CoreError> {
        let stripped = msg.params.and_then(strip_reserved);
        let params = stripped.as_deref().or(msg.params);
        let answer = self
            .sender
            .send(Outgoing {
                session: None,
                id,
                name,
                params,
                stream,
                listen: None,
                route,
                credential,
            })
            .await?;
        if let (Some(owner), false, true) = (task_owner, answer.is_error(), route.keeps_tasks()) {
            let registry = self.mrtr.registry;
            let tables = registry.tables(&route.backend);
            (tables.tasks).record_answer(&registry.sessions, owner, &answer, (name, params));
        }
        Ok(complete(id, name, &answer, &self.mrtr.presented))
    }
}

/// A Legacy backend's final answer in Modern terms: errors mapped, results stamped with
/// `resultType`, cache hints where required, and the `serverInfo` of what the gateway
/// `presented`.
pub(crate) fn complete(
    id: &RequestId,
    name: &str,
    answer: &BackendResponse,
    presented: &crate::BackendInfo,
) -> Answer {
    if answer.is_error() {
        return bridge_error(id, answer);
    }
    let server_info = json!({ META_SERVER_INFO: presented.server_info }).to_string();
    let result = serde_json::value::RawValue::from_string(answer.payload().to_owned()).ok();
    let stamped = result.as_deref().and_then(|r| stamp(r, name, &server_info));
    let body = match stamped {
        Some(r) => encode_result(id, r.get()),
        None => restore_response(id, answer.member(), answer.payload()),
    };
    Answer {
        body,
        error_code: None,
    }
}

/// A Legacy backend's `result` stamped `complete` (any spelling of `resultType` it gave
/// replaced: a loose client parser would read that too), with cache hints where `name`
/// requires them and `server_info` merged into its `_meta`.
fn stamp(
    result: &serde_json::value::RawValue,
    name: &str,
    server_info: &str,
) -> Option<Box<serde_json::value::RawValue>> {
    let mut set = vec![("resultType", "\"complete\"")];
    if CACHEABLE.contains(&name) {
        set.extend([("ttlMs", "0"), ("cacheScope", "\"private\"")]);
    }
    let stamped = with_members(result, &set, |k| !keys_fold_equal(k, "resultType"))?;
    merge_meta(&stamped, server_info)
}

/// `server/discover` for a Legacy backend, from its `initialize` result.
pub(crate) fn discover(id: &RequestId, info: &crate::BackendInfo) -> Answer {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": version::supported(),
        "capabilities": flags_only(&info.capabilities),
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": { META_SERVER_INFO: info.server_info },
    });
    if let Some(instructions) = &info.instructions {
        result["instructions"] = instructions.clone();
    }
    Answer {
        body: encode_result(id, &result.to_string()),
        error_code: None,
    }
}

/// The client talks to the gateway, which serves every version in `version::supported()`
/// (Legacy ones through sessions): discovery says so, consistently with the gateway's own
/// `-32022` answers. Everything else in the backend's result passes through, but for the Tasks
/// extension of a backend that keeps no tasks (`tasks`: false; one with replicas).
fn discover_passthrough(id: &RequestId, answer: &BackendResponse, tasks: bool) -> Answer {
    let versions = json!(version::supported()).to_string();
    let payload = match tasks {
        true => answer.payload().to_owned(),
        false => without_tasks_extension(answer.payload()),
    };
    let result = serde_json::value::RawValue::from_string(payload).ok();
    match result
        .as_deref()
        .and_then(|r| with_member(r, "supportedVersions", &versions))
    {
        Some(r) => Answer {
            body: encode_result(id, r.get()),
            error_code: None,
        },
        None => passthrough(id, answer),
    }
}

/// A discovery result without the Tasks extension among its capabilities.
fn without_tasks_extension(result: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(result) else {
        return result.to_owned();
    };
    let extensions = (v.get_mut("capabilities"))
        .and_then(|c| c.get_mut("extensions"))
        .and_then(Value::as_object_mut);
    if let Some(ext) = extensions {
        ext.remove(crate::tasks::EXTENSION);
    }
    v.to_string()
}

fn passthrough(id: &RequestId, answer: &BackendResponse) -> Answer {
    let error_code = answer
        .is_error()
        .then(|| error_code(answer.payload()))
        .flatten();
    Answer {
        body: restore_response(id, answer.member(), answer.payload()),
        error_code: error_code.or(answer.is_error().then_some(0)),
    }
}

/// Legacy errors in Modern terms: resource-not-found moved from -32002 to -32602 (SEP-2164).
fn bridge_error(id: &RequestId, answer: &BackendResponse) -> Answer {
    let code = error_code(answer.payload());
    if code == Some(i64::from(codes::RESOURCE_NOT_FOUND_LEGACY)) {
        let v: Value = serde_json::from_str(answer.payload()).unwrap_or(Value::Null);
        let mut err = ErrorObject::new(
            codes::INVALID_PARAMS,
            v["message"]
                .as_str()
                .unwrap_or("Resource not found")
                .to_owned(),
        );
        if let Some(data) = v.get("data") {
            err = err.with_data(data.clone());
        }
        return Answer::error(id, &err);
    }
    Answer {
        body: restore_response(id, answer.member(), answer.payload()),
        error_code: code.or(Some(0)),
    }
}

fn error_code(error: &str) -> Option<i64> {
    let raw = serde_json::value::RawValue::from_string(error.to_owned()).ok()?;
    object_member(&raw, "code").and_then(|c| c.get().parse().ok())
}

/// Modern capabilities carry flags only: Legacy-only members (`tasks`) are dropped.
fn flags_only(caps: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in [
        "experimental",
        "logging",
        "completions",
        "prompts",
        "resources",
        "tools",
        "extensions",
    ] {
        if let Some(v) = caps.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// `params` without reserved `_meta` keys (the backend speaks Legacy and must not see them).
fn strip_reserved(
    params: &serde_json::value::RawValue,
) -> Option<Box<serde_json::value::RawValue>> {
    let meta = object_member(params, "_meta")?;
    let kept = retain_members(meta, |k| !k.starts_with(RESERVED_PREFIX))?;
    with_member(params, "_meta", kept.get())
}

/// A Modern backend's answer as a Legacy client gets it (see [`legacy_result`]).
fn legacy_answer(id: &RequestId, answer: &BackendResponse) -> Vec<u8> {
    if !answer.is_error() {
        if let Some(result) = legacy_result(answer.payload()) {
            return encode_result(id, result.get());
        }
    }
    restore_response(id, answer.member(), answer.payload())
}

/// A Modern backend's result as a Legacy client gets it: the reserved `_meta` keys stripped
/// (they are one hop's, and name the backend), and `resultType` dropped when it only says
/// `complete` (a Legacy result is always complete). `None`: nothing to change.
fn legacy_result(result: &str) -> Option<Box<serde_json::value::RawValue>> {
    let raw = serde_json::value::RawValue::from_string(result.to_owned()).ok()?;
    let complete = object_member(&raw, "resultType").is_some_and(|t| t.get() == "\"complete\"");
    let reserved = object_member(&raw, "_meta")
        .and_then(|m| serde_json::from_str::<serde_json::Map<String, Value>>(m.get()).ok())
        .is_some_and(|m| m.keys().any(|k| k.starts_with(RESERVED_PREFIX)));
    if !complete && !reserved {
        return None;
    }
    let kept = if complete {
        retain_members(&raw, |k| k != "resultType")?
    } else {
        raw
    };
    match reserved {
        true => strip_reserved(&kept),
        false => Some(kept),
    }
}

/// Adds the members of `extra` (a JSON object text) to `result._meta`.
fn merge_meta(
    result: &serde_json::value::RawValue,
    extra: &str,
) -> Option<Box<serde_json::value::RawValue>> {
    let extra: serde_json::Map<String, Value> = serde_json::from_str(extra).ok()?;
    let meta = object_member(result, "_meta");
    let empty = serde_json::value::RawValue::from_string("{}".to_owned()).ok()?;
    let base = meta.unwrap_or(&empty);
    let values: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    let set: Vec<(&str, &str)> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let merged = with_members(base, &set, |_| true)?;
    with_member(result, "_meta", merged.get())
}

#[cfg(test)]
mod tests;
