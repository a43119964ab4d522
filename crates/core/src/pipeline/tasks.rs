//! Tasks in the pipeline: the handles the gateway gives task owners in place of backends' task
//! ids (`tasks`). A task method naming a handle goes to the backend that holds the task, under
//! that backend's own id, whichever backend the gateway's merged lists would have chosen; an
//! aggregated `tasks/list` asks every backend holding the caller's tasks and merges them; a
//! task a backend creates reaches its owner under a fresh handle. A handle names a task only
//! for its owner: anyone else gets exactly the answer a handle that never existed gets.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use switchboard_wire::{codes, RequestId};
use switchboard_wire::{encode_error, encode_notification, encode_result, object_member};
use switchboard_wire::{ErrorObject, Message};

use crate::access::Admitted;
use crate::resolve::Route;
use crate::tasks::watch::{Round, TaskWatch, Watched};
use crate::tasks::{Owner, TaskAsk};
use crate::{Answer, BackendId, CoreError, Exchange, Gateway};

/// Most pages of one backend's `tasks/list` a merged list reads (each owner's tasks per
/// backend are bounded in `tasks`, so this is a guard against a backend paging without end).
const MAX_PAGES: usize = 16;
/// Messages of a watched listen waiting to be passed on to its client.
const LISTEN_QUEUE: usize = 64;

#[cfg(test)]
mod tests;

impl Gateway {
    /// Stages 4–6 for a method the task stage may take (a task method or a listen; boxed by
    /// the pipeline's `routed`), and the era's route for the rest of them.
    pub(super) async fn tasks_routed(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        match ex.msg.method {
            Some(n) if crate::tasks::BY_ID.contains(&n) => self.by_handle(ex, admitted).await,
            // Task status on a listen stream is the gateway's own (`tasks::watch`).
            Some(crate::modern::LISTEN)
                if ex.is_modern() && TaskWatch::asked(ex.msg.params).is_some() =>
            {
                self.watched_listen(ex, admitted).await
            }
            // The gateway's own list whenever the tables hold the caller's tasks: a backend's
            // cursor pages over everyone's tasks, so none reaches a client. Per-session mode
            // keeps the route (a session's own process lists its own tasks only).
            // (A Modern request has no `tasks/list`: the era's route says so.)
            Some(crate::tasks::LIST)
                if !ex.is_modern() && (self.vmcp().is_some() || !self.is_per_session()) =>
            {
                self.merged_task_list(ex, admitted).await
            }
            _ => self.era_route(ex, admitted, None).await,
        }
    }

    /// The Task adapter: `tasks/get|result|cancel|list` for the caller's own tasks only
    /// (`tasks`): another's task answers as an unknown one before the backend is asked, and a
    /// listing is narrowed to the caller's tasks.
    pub(super) async fn task_request(
        &self,
        ex: Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let owner = Owner::of(ex.caller, ex.session());
        let tables = self.registry.tables(&route.backend);
        if !tables.tasks.admits(Some(&owner), name, ex.msg.params) {
            return Ok(encode_error(Some(id), &crate::tasks::unknown_task()));
        }
        let credential = ex.caller.credential.as_ref();
        let (session, stream) = (ex.session(), ex.stream);
        let answer =
            (self
                .sender
                .call_backend(session, id, name, ex.msg, (stream, credential), route))
            .await?;
        if name == crate::tasks::LIST && !answer.is_error() {
            let filtered = tables.tasks.filter_list(Some(&owner), answer.payload());
            return Ok(encode_result(id, &filtered));
        }
        Ok(crate::send::restore(id, &answer))
    }

    /// `tasks/get|result|cancel|update` naming a handle: to the task's backend under its own
    /// id, the answer naming the handle again. A name that is no handle of the caller's goes
    /// the way it always went (the route's backend, where only a task the caller owns passes:
    /// a session's own process, or the unknown-task answer).
    async fn by_handle(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        let owner = Owner::of(ex.caller, ex.session());
        let handle = crate::tasks::requested_task(ex.msg.params);
        let found =
            (handle.as_deref()).and_then(|h| Some((h, self.registry.find_task(Some(&owner), h)?)));
        let (Some((handle, (backend, task))), Some(params)) = (found, ex.msg.params) else {
            return self.era_route(ex, admitted, None).await;
        };
        let (Some(id), Some(name)) = (ex.msg.id.as_ref(), ex.msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let params = crate::tasks::renamed(params.get(), handle, &task)
            .ok_or(CoreError::InvalidParams("taskId"))?;
        let body = request_body(id, name, &params);
        let msg =
            Message::parse(body.as_bytes()).map_err(|_| CoreError::InvalidParams("params"))?;
        let pinned = Exchange { msg: &msg, ..ex };
        let answer = self.era_route(pinned, admitted, Some(&backend)).await?;
        let answer = match crate::tasks::renamed_answer(&answer.body, &task, handle) {
            Some(body) => Answer { body, ..answer },
            None => answer,
        };
        Ok(crate::tasks::one_task_named(name, handle, answer))
    }

    /// A Modern `subscriptions/listen` asking for task status (`notifications.taskIds`): the
    /// listen goes on without it (`tasks::watch::listen_without_task_ids`), every
    /// acknowledgement names exactly the handles the caller's own `tasks/get` answers for,
    /// each one's state follows the first, and while the stream is open the gateway polls
    /// them with that `tasks/get` (`task_state`) and sends `notifications/tasks` whenever a
    /// task changed, until it ends (`tasks::watch`). At most a few such listens per principal
    /// watch at once (another is served without task status), and none past its token's
    /// expiry. The request ends as the listen does (the client going away drops it).
    /// Nothing is polled before the listen is accepted (its first acknowledgement): a listen
    /// refused on its way (by the policy, the gateway or the backend) asks no `tasks/get`.
    /// A round of polls (`poll_round`) runs beside the listen, one at a time, the next a full
    /// wait after the last ended: however slow a `tasks/get`, the listen's own messages go on
    /// reaching the client meanwhile, none held back or dropped for it.
    async fn watched_listen(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        let (Some(id), Some(params), Some(client)) =
            (ex.msg.id.as_ref(), ex.msg.params, ex.stream.clone())
        else {
            return self.era_route(ex, admitted, None).await;
        };
        if !crate::tasks::extension_declared(Some(params)) {
            return Ok(Answer::error(id, &crate::tasks::missing_extension()));
        }
        // Agreed on at the first acknowledgement (`agreed_at`); until then it watches nothing.
        let mut w = Watched::new(self.registry.watchers.take(ex.caller));
        let stripped = crate::tasks::watch::listen_without_task_ids(params)
            .ok_or(CoreError::InvalidParams("params must be an object"))?;
        let body = request_body(id, crate::modern::LISTEN, stripped.get());
        let msg =
            Message::parse(body.as_bytes()).map_err(|_| CoreError::InvalidParams("params"))?;
        let (tx, mut rx) = tokio::sync::mpsc::channel(LISTEN_QUEUE);
        let inner = Exchange {
            msg: &msg,
            stream: Some(tx),
            ..ex
        };
        let listening = self.era_route(inner, admitted, None);
        tokio::pin!(listening);
        loop {
            tokio::select! {
                biased;
                Some(line) = rx.recv() => self.listened((&ex, id), line, &client, &mut w).await?,
                answer = &mut listening => {
                    // What the listen queued before it ended still goes out, first (an
                    // acknowledgement among it watches nothing: no status would follow).
                    while let Ok(line) = rx.try_recv() {
                        self.agreed_at(&ex, &line, (&mut w.watch, &mut w.acked), false).await;
                        let _ = client.send(passed_on(&w.watch, line)).await;
                    }
                    return answer;
                }
                polled = w.round.done() => {
                    let notes = w.observed(polled, ex.caller.expired(), id);
                    self.send_notes(&client, notes).await;
                }
                _ = w.tick.tick(), if w.due() => {
                    let round = (!ex.caller.expired()).then(|| self.poll_round(&ex, &w.watch));
                    w.start(round);
                }
            }
        }
    }

    /// One of the listen's messages, passed on to its client: at the first acknowledgement
    /// the watch is agreed on, and each watched task's state follows it. `Err`: the client
    /// went away.
    async fn listened(
        self: &Arc<Self>,
        (ex, id): (&Exchange<'_>, &RequestId),
        line: Bytes,
        client: &tokio::sync::mpsc::Sender<Bytes>,
        w: &mut Watched<'_>,
    ) -> Result<(), CoreError> {
        let may = w.may();
        let first = self
            .agreed_at(ex, &line, (&mut w.watch, &mut w.acked), may)
            .await;
        if first {
            w.agreed();
        }
        if client.send(passed_on(&w.watch, line)).await.is_err() {
            return Err(CoreError::Cancelled);
        }
        if first {
            let notes = w.watch.initial(id);
            // Watching nothing (any more), it holds none of its principal's places: given
            // back before its last status goes out.
            w.settle();
            self.send_notes(client, notes).await;
        }
        Ok(())
    }

    /// Whether `line` is the listen's first acknowledgement: the listen was accepted, and only
    /// now is its watch agreed on (`agreed`), before the acknowledgement names its handles
    /// (`passed_on`). Any other line changes nothing.
    async fn agreed_at(
        self: &Arc<Self>,
        ex: &Exchange<'_>,
        line: &[u8],
        (watch, acked): (&mut TaskWatch, &mut bool),
        may: bool,
    ) -> bool {
        if *acked || !crate::tasks::watch::is_acknowledgement(line) {
            return false;
        }
        *acked = true;
        // The acknowledgement comes when the backend sends it: past the caller's token's
        // expiry, nothing is polled as the caller any more (as a round stops then too).
        let may = may && !ex.caller.expired();
        if let Some(params) = ex.msg.params {
            *watch = self.agreed(ex, params, may).await;
        }
        true
    }

    /// One round of a watched listen's polls: the caller's own `tasks/get` of each task
    /// `watch` holds, all at once, with what each found (`Watched::observed` applies them). It
    /// borrows only the gateway and the request, so it runs beside the listen. The caller's
    /// token is checked before a round starts and when it completes (a watched listen polls
    /// as the caller): past its expiry, it watches nothing from then on.
    fn poll_round<'r>(self: &'r Arc<Self>, ex: &'r Exchange<'_>, watch: &TaskWatch) -> Round<'r> {
        let handles = watch.handles();
        Box::pin(async move {
            let polls = handles.iter().map(|h| self.task_state(ex, h));
            let polled = futures::future::join_all(polls).await;
            handles.into_iter().zip(polled).collect()
        })
    }

    /// The listen's watch: the handles it asks for that the caller's own `tasks/get` answers
    /// (its task now), asked all at once; none when the caller may not watch (`may`).
    async fn agreed(
        self: &Arc<Self>,
        ex: &Exchange<'_>,
        params: &RawValue,
        may: bool,
    ) -> TaskWatch {
        let mut watch = TaskWatch::asked(Some(params)).unwrap_or_default();
        if !may {
            return watch;
        }
        let handles = watch.asked_handles();
        let polls = handles.iter().map(|h| self.task_state(ex, h));
        for (handle, polled) in handles.iter().zip(futures::future::join_all(polls).await) {
            if let crate::tasks::watch::Polled::Task(task) = polled {
                watch.agree(handle, &task);
            }
        }
        watch
    }

    /// Task status notifications to a listen's client, as the guardrails let each go (one
    /// they refuse is not sent).
    async fn send_notes(
        &self,
        client: &tokio::sync::mpsc::Sender<Bytes>,
        notes: Vec<Box<RawValue>>,
    ) {
        let name = crate::tasks::NOTIFICATION;
        for note in notes {
            let body = match self.registry.progress.vet(name, Some(&note)) {
                crate::progress::Vetted::Pass => encode_notification(name, Some(&note)),
                crate::progress::Vetted::Replaced(p) => encode_notification(name, Some(&p)),
                crate::progress::Vetted::Refused(_) => continue,
            };
            let _ = client.send(Bytes::from(body)).await;
        }
    }

    /// The caller's own `tasks/get` of `handle`, as one of its requests: admitted (policy,
    /// rate limit, audit) and checked by the guardrails like any `tasks/get`. Never sent once
    /// the caller's token has expired (checked here, as the poll goes out, however long after
    /// its round was started).
    async fn task_state(
        self: &Arc<Self>,
        ex: &Exchange<'_>,
        handle: &str,
    ) -> crate::tasks::watch::Polled {
        use crate::tasks::watch::Polled;
        use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
        if ex.caller.expired() {
            return Polled::Failed;
        }
        let meta = serde_json::json!({
            META_PROTOCOL_VERSION: switchboard_wire::version::MODERN[0],
            META_CLIENT_CAPABILITIES: {"extensions": {crate::tasks::EXTENSION: {}}},
        });
        let params = serde_json::json!({"taskId": handle, "_meta": meta}).to_string();
        let body = request_body(&RequestId::from_string("sbw-poll"), "tasks/get", &params);
        let Ok(msg) = Message::parse(body.as_bytes()) else {
            return Polled::Failed;
        };
        let get = Exchange {
            caller: ex.caller,
            era: ex.era,
            msg: &msg,
            stream: None,
        };
        let origins = self.origins_for(&msg).await;
        let access = &self.config.access;
        let Ok(mut admitted) = access.admit(get.caller, None, &msg, origins, super::path_of(&get))
        else {
            return Polled::Failed;
        };
        let answer = Box::pin(self.guarded(get, &mut admitted)).await;
        let Ok(answer) = admitted.finish(answer) else {
            return Polled::Failed;
        };
        match Message::parse(&answer.body) {
            Ok(m) if m.result.is_some() => m
                .result
                .map_or(Polled::Failed, |r| Polled::Task(r.to_owned())),
            Ok(_) if answer.error_code == Some(i64::from(codes::INVALID_PARAMS)) => Polled::Gone,
            _ => Polled::Failed,
        }
    }

    /// `tasks/list`: the caller's tasks from every backend holding any, each
    /// under its handle, in one page (the gateway's own list: it gives no cursor, and takes
    /// none).
    async fn merged_task_list(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        let Some(id) = ex.msg.id.as_ref() else {
            return Err(CoreError::UnexpectedResponse);
        };
        if ex.msg.param("cursor").is_some() {
            let err = ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: unknown cursor");
            return Ok(era_error(&ex, id, &err));
        }
        let owner = Owner::of(ex.caller, ex.session());
        let backends = self.registry.with_tasks_of(&owner);
        let mut tasks: Vec<Box<RawValue>> = Vec::new();
        for backend in backends {
            if let Err(answer) = self.list_at(&ex, admitted, &backend, &mut tasks).await? {
                return Ok(answer);
            }
        }
        let tasks: Vec<&str> = tasks.iter().map(|t| t.get()).collect();
        let kind = match ex.is_modern() {
            true => r#","resultType":"complete""#,
            false => "",
        };
        let result = format!(r#"{{"tasks":[{}]{kind}}}"#, tasks.join(","));
        Ok(Answer::ok(encode_result(id, &result)))
    }

    /// One backend's pages of the caller's tasks (already narrowed to the caller's own and
    /// under their handles by the era's task path), appended to `tasks`; `Err(answer)`: the
    /// backend's error, which is the merged list's answer.
    async fn list_at(
        self: &Arc<Self>,
        ex: &Exchange<'_>,
        admitted: &Admitted<'_>,
        backend: &BackendId,
        tasks: &mut Vec<Box<RawValue>>,
    ) -> Result<Result<(), Answer>, CoreError> {
        let (Some(id), Some(name)) = (ex.msg.id.as_ref(), ex.msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let mut cursor: Option<Box<RawValue>> = None;
        for _ in 0..MAX_PAGES {
            let params = match (&cursor, ex.msg.params) {
                (None, p) => p.map(|p| p.get().to_owned()),
                (Some(c), Some(p)) => {
                    switchboard_wire::with_member(p, "cursor", c.get()).map(|p| p.get().to_owned())
                }
                (Some(c), None) => Some(format!(r#"{{"cursor":{}}}"#, c.get())),
            };
            let body = request_body(id, name, params.as_deref().unwrap_or("{}"));
            let msg = Message::parse(body.as_bytes()).map_err(|_| CoreError::UnexpectedResponse)?;
            let page = Exchange {
                caller: ex.caller,
                era: ex.era,
                msg: &msg,
                stream: ex.stream.clone(),
            };
            let answer = self.era_route(page, admitted, Some(backend)).await?;
            let read = Message::parse(&answer.body).ok();
            let Some(result) = read.as_ref().and_then(|m| m.result) else {
                return Ok(Err(answer));
            };
            let listed = object_member(result, "tasks")
                .and_then(|t| serde_json::from_str::<Vec<Box<RawValue>>>(t.get()).ok());
            tasks.extend(listed.unwrap_or_default());
            cursor = object_member(result, "nextCursor").map(|c| c.to_owned());
            if cursor.is_none() {
                break;
            }
        }
        Ok(Ok(()))
    }
}

/// A task-augmented request to a backend with more than one replica: refused before it is
/// sent (a task lives in one process, and its follow-ups could reach another, where another
/// caller's task may have the same id).
pub(super) fn refuse_on_replicas(route: &Route, task: &TaskAsk) -> Result<(), CoreError> {
    if task.asked && !route.keeps_tasks() {
        return Err(CoreError::InvalidParams(
            "task: this backend runs replicas, which keep no tasks; call it without a task",
        ));
    }
    Ok(())
}

/// A watched listen's message as its client gets it (an acknowledgement is rewritten to name
/// exactly the watched tasks: `TaskWatch::acknowledged`).
fn passed_on(watch: &TaskWatch, line: Bytes) -> Bytes {
    watch.acknowledged(&line).unwrap_or(line)
}

/// A request envelope: the client's id, `method`, `params` (raw).
fn request_body(id: &RequestId, method: &str, params: &str) -> String {
    let method = serde_json::to_string(method).unwrap_or_default();
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":{method},"params":{params}}}"#,
        id.as_json()
    )
}

/// An error answer as the era shapes it (a Legacy one's status does not depend on it).
fn era_error(ex: &Exchange<'_>, id: &RequestId, err: &ErrorObject) -> Answer {
    match ex.is_modern() {
        true => Answer::error(id, err),
        false => Answer::ok(encode_error(Some(id), err)),
    }
}
