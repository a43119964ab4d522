//! Tasks in the pipeline: the handles the gateway gives task owners in place of backends' task
//! ids (`tasks`). A task method naming a handle goes to the backend that holds the task, under
//! that backend's own id, whichever backend the gateway's merged lists would have chosen; an
//! aggregated `tasks/list` asks every backend holding the caller's tasks and merges them; a
//! task a backend creates reaches its owner under a fresh handle. A handle names a task only
//! for its owner: anyone else gets exactly the answer a handle that never existed gets.

use std::sync::Arc;

use serde_json::value::RawValue;

use switchboard_wire::{codes, RequestId};
use switchboard_wire::{encode_error, encode_result, object_member, ErrorObject, Message};

use crate::access::Admitted;
use crate::resolve::Route;
use crate::tasks::{Owner, TaskAsk};
use crate::{Answer, BackendId, CoreError, Exchange, Gateway};

/// Most pages of one backend's `tasks/list` a merged list reads (each owner's tasks per
/// backend are bounded in `tasks`, so this is a guard against a backend paging without end).
const MAX_PAGES: usize = 16;

impl Gateway {
    /// Stages 4–6 for a task method, and the era's route for everything else.
    pub(super) async fn tasks_routed(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        match ex.msg.method {
            // Boxed, as every path but the era's route: a task method's future would
            // otherwise size every request's.
            Some(n) if crate::tasks::BY_ID.contains(&n) => {
                Box::pin(self.by_handle(ex, admitted)).await
            }
            // The gateway's own list whenever the tables hold the caller's tasks: a backend's
            // cursor pages over everyone's tasks, so none reaches a client. Per-session mode
            // keeps the route (a session's own process lists its own tasks only).
            // (A Modern request has no `tasks/list`: the era's route says so.)
            Some(crate::tasks::LIST)
                if !ex.is_modern() && (self.vmcp().is_some() || !self.is_per_session()) =>
            {
                Box::pin(self.merged_task_list(ex, admitted)).await
            }
            _ => self.era_route(ex, admitted, None).await,
        }
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
        Ok(
            match crate::tasks::renamed_answer(&answer.body, &task, handle) {
                Some(body) => Answer { body, ..answer },
                None => answer,
            },
        )
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

    /// A task the answer created, under the handle its owner knows it by. One the gateway
    /// could not record (or rename) is an error: the backend's own id never reaches a client
    /// (a session's own process excepted, whose ids are the session's alone).
    pub(super) fn expose_created(
        &self,
        route: &Route,
        owner: Option<&Owner>,
        (name, task): (&str, &TaskAsk),
        answer: Answer,
    ) -> Answer {
        if !(task.asked || name == crate::tasks::MAY_CREATE) {
            return answer;
        }
        let Some(created) = crate::tasks::created_in(&answer.body) else {
            return answer;
        };
        if route.via == crate::resolve::Via::Own {
            return answer;
        }
        // A task lives in one of a replicated backend's processes, and its follow-ups could
        // reach any of them: not handed out (`refuse_on_replicas` refuses asking for one).
        let err = if !route.keeps_tasks() {
            crate::tasks::untracked_on_replicas()
        } else {
            let tables = self.registry.tables(&route.backend);
            let renamed = tables
                .tasks
                .handle_for(owner, &created)
                .and_then(|handle| crate::tasks::renamed_answer(&answer.body, &created, &handle));
            if let Some(body) = renamed {
                return Answer { body, ..answer };
            }
            crate::tasks::untracked_task()
        };
        let id = Message::parse(&answer.body).ok().and_then(|m| m.id);
        Answer {
            body: encode_error(id.as_ref(), &err),
            error_code: Some(i64::from(err.code)),
        }
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
