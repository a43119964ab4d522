//! What happens to messages a shared backend sends on its own (responses are routed by route
//! key in `upstream`; everything else comes here, in stdout order).
//!
//! | backend sends                                   | shared mode                                |
//! |-------------------------------------------------|--------------------------------------------|
//! | `ping` request                                  | answered `{}` by the gateway               |
//! | sampling, elicitation, roots tagged with a task of a session's | checked, sent to that session's client; its answer goes back to this backend |
//! | sampling, elicitation, roots tagged with a task the bridge runs for a Modern client | checked, held for the owner's `tasks/get` (`tasks::TaskQuestions`) |
//! | any other request (sampling, elicitation, roots)| `-32601` back to the backend               |
//! | `notifications/{tools,resources,prompts}/list_changed` | rebuilt without params, to every live session's listen stream |
//! | `notifications/progress`                        | only the stream of the request whose gateway-minted token it carries, client token restored |
//! | `notifications/resources/updated`               | rebuilt as `{uri}`, only to sessions subscribed to that URI |
//! | any notification tagged with a subscription id  | only the Modern listen stream it names, re-tagged with the client's listen id (`notifications/tasks`: dropped, never asked for) |
//! | `notifications/tasks/status`, related-task tagged | only the listen stream of the session owning the task; dropped for a principal's stateless task |
//! | `notifications/message`                         | dropped: it cannot be attributed            |
//! | anything else                                   | dropped                                    |
//!
//! Why `-32601` for sampling/elicitation/roots, even for a Modern client's call that the MRTR
//! bridge could turn into `input_required`: on a process every client shares, nothing says
//! which open call a server request belongs to, and guessing would break invariant 1. With
//! `--isolation per-session` such calls run on a process of their own (`mrtr`), where it does.
//!
//! Whatever carries the backend's own text to a client (anything tagged, a task's message, any
//! notification but an untagged list change or progress note, which are checked where they
//! are rebuilt or routed) passes the guardrails first (`ProgressRoutes::vet`).
//!
//! Every drop is logged once per method at warn, then at debug. Nothing here blocks: a full
//! client queue loses that message (or evicts that listen stream), never delays the backend.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;
use serde_json::value::RawValue;

use switchboard_upstream::{InboundSink, Upstream};
use switchboard_wire::classify::META_SUBSCRIPTION_ID;
use switchboard_wire::{
    codes, encode_error, encode_notification, encode_request, encode_result, method, object_member,
    ErrorObject, Message, MessageKind, RequestId,
};

use crate::registry::{BackendTables, Registry};
use crate::tasks::{Owner, QUESTIONS};
use crate::BackendId;

/// Implements the routing table above for one backend.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    pub(crate) registry: Arc<Registry>,
    /// The backend this sink belongs to: everything it delivers is that backend's.
    pub(crate) backend: BackendId,
    /// The tables of the backend this sink belongs to.
    pub(crate) tables: Arc<BackendTables>,
}

impl InboundSink for Dispatcher {
    fn deliver(&self, _line: &Bytes, msg: &Message<'_>, backend: &Upstream) {
        let name = msg.method.unwrap_or_default();
        let r = &self.registry;
        match (msg.kind, msg.id.as_ref()) {
            (MessageKind::Request, Some(id)) if name == method::PING => {
                let _ = backend.try_send_line(encode_result(id, "{}"));
            }
            (MessageKind::Request, Some(id)) if self.task_question(msg, id, backend) => {}
            (MessageKind::Request, Some(id)) => {
                r.drops.record_for(
                    &self.backend,
                    "backend request refused: no client can answer it in shared mode",
                    name,
                );
                let _ = backend.try_send_line(encode_error(Some(id), &unanswerable()));
            }
            _ => self.notification(name, msg.params),
        }
    }
}

impl Dispatcher {
    /// A question (sampling, elicitation, roots) tagged with a task goes to the task's owner
    /// (`TaskQuestion::route`): a session's client is asked, a sessionless owner's question
    /// is held for its `tasks/get` when the bridge runs the task for a Modern client. A task
    /// not recorded yet (the answer that created it is just ahead of this question, on its
    /// way to being recorded) is waited for briefly, off the reader (at most [`MAX_WAITING`]
    /// at once, each within [`RECORD_WAIT`]). `false`: not such a question (refused as any
    /// other).
    fn task_question(&self, msg: &Message<'_>, id: &RequestId, backend: &Upstream) -> bool {
        let name = msg.method.unwrap_or_default();
        let task = crate::tasks::task_of(msg.params).filter(|_| QUESTIONS.contains(&name));
        // A backend with replicas keeps no tasks (`destination::Route::keeps_tasks`).
        let Some(task) = task.filter(|_| backend.replicas() <= 1) else {
            return false;
        };
        let question = TaskQuestion {
            task,
            epoch: self.tables.questions.epoch(),
            id: id.clone(),
            method: name.to_owned(),
            params: msg.params.map(ToOwned::to_owned),
        };
        match self.tables.tasks.owner(&question.task) {
            Some(owner) => {
                let at = (&*self.registry, &*self.tables, &self.backend);
                question.route(Some(owner), at, backend);
                true
            }
            None => {
                let runtime = tokio::runtime::Handle::try_current().ok();
                let waiting = self.tables.questions.waiting(MAX_WAITING);
                let (Some(runtime), Some(waiting)) = (runtime, waiting) else {
                    return false;
                };
                let (registry, tables) = (Arc::clone(&self.registry), Arc::clone(&self.tables));
                let (backend, backend_id) = (backend.clone(), self.backend.clone());
                runtime.spawn(async move {
                    let _waiting = waiting;
                    let owner = tables.tasks.owner_soon(&question.task, RECORD_WAIT).await;
                    question.route(owner, (&registry, &tables, &backend_id), &backend);
                });
                true
            }
        }
    }

    fn notification(&self, name: &str, params: Option<&RawValue>) {
        let r = &self.registry;
        if name == method::TOOLS_LIST_CHANGED {
            // Tool schemas may have changed: the Mcp-Param-* designations are re-learned.
            self.tables.tool_headers.invalidate();
        }
        self.tables.lists_changed.mark(name);
        // A Modern backend addresses listen-stream notifications by subscription id: they go to
        // that one stream (re-tagged with the client's id) or nowhere.
        let tag = params
            .and_then(|p| object_member(p, "_meta"))
            .and_then(|m| object_member(m, META_SUBSCRIPTION_ID));
        // What carries the backend's text to a client is checked by the guardrails first.
        // Untagged, a list change goes without params, a log message is dropped below unless
        // it names a task, and progress is checked where it is routed; tagged, each goes as
        // the backend wrote it, so each is checked here.
        let checked;
        let unchecked = match name {
            method::TOOLS_LIST_CHANGED
            | method::RESOURCES_LIST_CHANGED
            | method::PROMPTS_LIST_CHANGED
            | method::PROGRESS => tag.is_none(),
            method::MESSAGE => tag.is_none() && crate::tasks::task_of(params).is_none(),
            _ => false,
        };
        let params = match unchecked {
            true => params,
            false => match r.progress.vet(name, params) {
                crate::progress::Vetted::Pass => params,
                crate::progress::Vetted::Replaced(p) => {
                    checked = p;
                    Some(&*checked)
                }
                crate::progress::Vetted::Refused(_) => {
                    r.drops
                        .record_for(&self.backend, "refused by a guardrail", name);
                    return;
                }
            },
        };
        if let (Some(tag), Some(params)) = (tag, params) {
            // Task status on a listen is the gateway's own (`tasks::watch`): a backend's would
            // name its own id for a task, which a tagged notification cannot be rid of.
            if name == crate::tasks::NOTIFICATION
                || name == crate::tasks::STATUS
                || crate::tasks::names_a_task(params)
            {
                r.drops.record_for(
                    &self.backend,
                    "a backend's task status on a listen stream",
                    name,
                );
                return;
            }
            if !r.listeners.route_tagged(name, params, tag) {
                r.drops.record_for(
                    &self.backend,
                    "tagged notification for no live listen stream",
                    name,
                );
            }
            return;
        }
        // Task status and task-related messages go to the task's owner only.
        if name == crate::tasks::STATUS
            || (name != method::PROGRESS && crate::tasks::task_of(params).is_some())
        {
            self.task_message(name, params);
            return;
        }
        match name {
            method::TOOLS_LIST_CHANGED
            | method::RESOURCES_LIST_CHANGED
            | method::PROMPTS_LIST_CHANGED => {
                // Rebuilt from the name alone: a backend must not smuggle `_meta` or anything
                // else into every session.
                let data = Bytes::from(encode_notification(name, None));
                r.sessions.broadcast(&data);
                r.listeners.list_changed(name);
                // Streams held by other replicas hear it too (each once: there).
                if let Some(peers) = r.peers.get() {
                    peers.list_changed(match name {
                        method::TOOLS_LIST_CHANGED => method::TOOLS_LIST_CHANGED,
                        method::PROMPTS_LIST_CHANGED => method::PROMPTS_LIST_CHANGED,
                        _ => method::RESOURCES_LIST_CHANGED,
                    });
                }
            }
            method::PROGRESS => {
                // The request's caller holds no handle to rename a task id in the note to
                // (a backend tagging its progress with its own task): the id is taken out.
                let untagged = params.map(crate::tasks::untagged);
                let params = match &untagged {
                    Some(crate::tasks::Untagged::Stripped(p)) => Some(&**p),
                    Some(crate::tasks::Untagged::Unreadable) => {
                        r.drops.record_for(
                            &self.backend,
                            "progress naming a task ambiguously",
                            name,
                        );
                        return;
                    }
                    _ => params,
                };
                if !r.progress.route(params) {
                    r.drops
                        .record_for(&self.backend, "progress for no live request stream", name);
                }
            }
            method::RESOURCE_UPDATED => self.resource_updated(params),
            method::MESSAGE => r.drops.record_for(
                &self.backend,
                "log messages cannot be attributed in shared mode",
                name,
            ),
            _ => r.drops.record_for(
                &self.backend,
                "notification cannot be attributed to one client",
                name,
            ),
        }
    }

    fn task_message(&self, name: &str, params: Option<&RawValue>) {
        let r = &self.registry;
        let task = crate::tasks::task_of(params);
        let owner = task
            .as_deref()
            .and_then(|t| Some((t, self.tables.tasks.owner(t)?)));
        match owner {
            Some((task, (crate::tasks::Owner::Session(session), handle))) => {
                // The owner knows the task by its handle only, and learns no other task's id
                // (a second one, in a loose spelling or a repeated key, is not renamed).
                let exposed = params
                    .and_then(|p| crate::tasks::renamed(p.get(), task, &handle))
                    .and_then(|p| RawValue::from_string(p).ok())
                    .filter(|p| crate::tasks::names_only(p, &handle));
                match exposed {
                    Some(p) => {
                        self.to_session(&session, Bytes::from(encode_notification(name, Some(&p))))
                    }
                    None => r.drops.record_for(
                        &self.backend,
                        "task message naming another task, or its own ambiguously",
                        name,
                    ),
                }
            }
            // A stateless owner has no stream the gateway could prove is its own (a Modern
            // listen stream carries only what it asked for, and asked nothing of tasks).
            Some((_, (crate::tasks::Owner::Principal { .. }, _))) => r.drops.record_for(
                &self.backend,
                "task message for a stateless task: no stream to carry it",
                name,
            ),
            None => r
                .drops
                .record_for(&self.backend, "task message for a task nobody owns", name),
        }
    }

    fn resource_updated(&self, params: Option<&RawValue>) {
        let r = &self.registry;
        let uri = params
            .and_then(|p| object_member(p, "uri"))
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok());
        let Some(uri) = uri else {
            r.drops.record_for(
                &self.backend,
                "resources/updated without a uri",
                method::RESOURCE_UPDATED,
            );
            return;
        };
        // Modern listens subscribed at this backend only (a listen's URIs are subscribed where
        // they are served): another backend of a set cannot announce this URI to them.
        if self.tables.subs.has_subscribers(&uri) {
            r.listeners.resource_updated(&uri);
        }
        let subscribers = self.tables.subs.subscribers(&uri);
        if subscribers.is_empty() {
            r.drops.record_for(
                &self.backend,
                "resources/updated for a URI nobody subscribed to",
                method::RESOURCE_UPDATED,
            );
            return;
        }
        let params = json!({ "uri": uri }).to_string();
        let Ok(params) = RawValue::from_string(params) else {
            return;
        };
        let data = Bytes::from(encode_notification(method::RESOURCE_UPDATED, Some(&params)));
        for session in subscribers {
            self.to_session(&session, data.clone());
        }
    }

    /// A message attributed to `session`, onto its listen stream here; when none is attached
    /// here it may be held by another replica on the same session store: the message goes
    /// there, for this session only.
    fn to_session(&self, session: &str, data: Bytes) {
        let r = &self.registry;
        if !r.sessions.push_listen(session, data.clone()) {
            if let Some(peers) = r.peers.get() {
                peers.forward(session, data);
            }
        }
    }
}

/// How long a question about a task not recorded yet waits for the record.
const RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Most such questions waiting at once per backend; more are refused at once.
const MAX_WAITING: usize = 64;

/// The answer to a backend request no client can be asked (shared mode).
fn unanswerable() -> ErrorObject {
    ErrorObject::new(
        codes::METHOD_NOT_FOUND,
        "Method not found: this gateway shares the backend between clients and cannot forward server-initiated requests",
    )
}

/// A question's params, owned.
type Params = Option<Box<RawValue>>;

/// A backend's question about one of its tasks, owned (it may wait for the task's record).
struct TaskQuestion {
    task: String,
    /// The questions table's epoch when it arrived (`TaskQuestions::forget_all`).
    epoch: u64,
    id: RequestId,
    method: String,
    params: Option<Box<RawValue>>,
}

impl TaskQuestion {
    /// To the task's owner, if it has one (and the handle it knows the task by): held for a
    /// sessionless owner's `tasks/get` (`hold`), sent to a session's client (`ask_session`);
    /// with none, refused as in shared mode.
    fn route(
        self,
        owner: Option<(Owner, String)>,
        (registry, tables, backend_id): (&Registry, &BackendTables, &BackendId),
        backend: &Upstream,
    ) {
        // Asked by a process the backend has replaced since (its tasks forgotten): its task
        // ids may name someone else's task now.
        let owner = owner.filter(|_| self.epoch == tables.questions.epoch());
        match owner {
            Some((Owner::Principal { .. }, handle)) => {
                self.hold(registry, tables, backend, &handle)
            }
            Some((Owner::Session(session), handle)) => {
                self.ask_session(registry, (backend, backend_id), (&session, &handle));
            }
            None => {
                let why = "backend request refused: no client can answer it in shared mode";
                registry.drops.record_for(backend_id, why, &self.method);
                self.refuse(backend, &unanswerable());
            }
        }
    }

    /// The params as the task's owner sees them (the task named by its `handle`), checked by
    /// the guardrails; `None` when a guardrail refused them (the backend is told).
    fn checked(&self, registry: &Registry, backend: &Upstream, handle: &str) -> Option<Params> {
        let exposed = (self.params.as_deref())
            .and_then(|p| crate::tasks::renamed(p.get(), &self.task, handle))
            .and_then(|p| RawValue::from_string(p).ok());
        // Named by its handle and nothing else, or not at all: never the backend's ids.
        let named = crate::tasks::questions::names_only_raw;
        let Some(params) = exposed.filter(|p| named(p, handle)) else {
            self.refuse(
                backend,
                &crate::tasks::questions::NotHeld::Unreadable.error(),
            );
            return None;
        };
        let params = Some(params);
        match registry.progress.vet(&self.method, params.as_deref()) {
            crate::progress::Vetted::Pass => Some(params),
            crate::progress::Vetted::Replaced(p) => Some(Some(p)),
            crate::progress::Vetted::Refused(guardrail) => {
                self.refuse(backend, &crate::progress::refusal(&guardrail));
                None
            }
        }
    }

    /// Held for the task's sessionless owner; refused to the backend when a guardrail refuses
    /// it or the table cannot take it.
    fn hold(self, registry: &Registry, tables: &BackendTables, backend: &Upstream, handle: &str) {
        let Some(params) = self.checked(registry, backend, handle) else {
            return;
        };
        let asked = (&self.id, self.method.as_str(), params.as_deref());
        let named = (self.task.as_str(), handle, self.epoch);
        if let Err(not_held) = tables.questions.hold(named, backend, asked) {
            self.refuse(backend, &not_held.error());
        }
    }

    /// Sent to the client of the session owning the task, under a key of the gateway's (its
    /// answer goes back to this backend under the backend's id, as a session's own process's
    /// would: `per_session::client_response`); refused to the backend when a guardrail
    /// refuses it or the session cannot take it.
    fn ask_session(
        self,
        registry: &Registry,
        (backend, backend_id): (&Upstream, &BackendId),
        (session, handle): (&str, &str),
    ) {
        // Only what the client declared it can answer (as the gateway's own questions).
        let caps = registry.sessions.client_caps(session).unwrap_or_default();
        let declared = match self.method.as_str() {
            "elicitation/create" => caps.elicitation,
            "sampling/createMessage" => caps.sampling,
            _ => caps.roots,
        };
        if !declared {
            return self.refuse(
                backend,
                &crate::tasks::questions::NotHeld::NotDeclared.error(),
            );
        }
        let Some(params) = self.checked(registry, backend, handle) else {
            return;
        };
        // Named for this replica: the client's answer may reach another (`answer_home`).
        let prefix = crate::route::TASK_QUESTION_PREFIX;
        let key = match registry.replica_id() {
            Some(replica) => format!("{prefix}{replica}-{}", crate::route::random_hex()),
            None => format!("{prefix}{}", crate::route::random_hex()),
        };
        let request = encode_request(
            &RequestId::from_string(&key),
            &self.method,
            params.as_deref(),
        );
        let line = Bytes::from(request);
        let sessions = &registry.sessions;
        let asker = (backend, backend_id);
        if !sessions.deliver_task_question(session, asker, (&key, &self.id), line) {
            registry.drops.record(
                "task question with no client stream to carry it",
                &self.method,
            );
            let err = ErrorObject::new(
                codes::INTERNAL_ERROR,
                "the client has no open stream to receive this request",
            );
            self.refuse(backend, &err);
        }
    }

    fn refuse(&self, backend: &Upstream, err: &ErrorObject) {
        let _ = backend.try_send_line(encode_error(Some(&self.id), err));
    }
}
