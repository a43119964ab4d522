//! The request pipeline: every client request of either era, top to bottom, in one place.
//!
//! `http` builds an [`Exchange`] and calls [`Gateway::handle`]; the stages are, in order:
//! 1. **trace** — a span per request when traces are on (`trace`);
//! 2. **unwrap** — tool search's `call_tool` becomes the call it wraps (`tool_search`), and a
//!    forbidden inner tool answers as a missing one;
//! 3. **admit** — policy and rate limits before anything reaches a backend or a routing table,
//!    and after the answer, list filtering and the audit line (`access`); a Legacy session's
//!    kept state (subscriptions, log level) is written to the session store before the answer;
//! 4. **answer locally** — what the virtual server answers itself: merged lists, `ping`,
//!    composites, the gateway's own tools (`vmcp`, `workflow`);
//! 5. **resolve** — the one place a backend is chosen (`resolve`, `per_session::lazy`), then
//!    the route confirmed against what admission judged;
//! 6. **adapter** — by era, backend era and method: pass through (`send`), the session's own
//!    process (`per_session`), session operations (`session_ops`), tasks (`tasks`), a Legacy
//!    client onto a Modern backend (`relay`), a Modern client onto a Legacy backend (`modern`,
//!    `mrtr`), or straight through to a Modern backend (`modern::pass`);
//! 7. **finish** — ids restored by the adapter, lists filtered and audited by admission, a
//!    Modern caller's task answers narrowed to its own (`own_tasks_only`).

use std::sync::Arc;

use opentelemetry::trace::FutureExt as _;

use switchboard_wire::classify::META_LOG_LEVEL;
use switchboard_wire::{method, Message};

use crate::access::{Admitted, Path};
use crate::resolve::{From, Via};
use crate::send::restore;
use crate::{Answer, CoreError, Era, Exchange, Gateway};

/// How `http` delivers a request's answer, decided before the request runs
/// ([`Gateway::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The answer travels on an SSE stream (something may go out before it), not as JSON.
    pub stream: bool,
}

impl Gateway {
    /// Stage 0, before the request runs: its delivery, for both eras (a stream wherever
    /// something may travel before the answer: progress, a listen's events, a Modern request's
    /// own log messages, a per-session process's or a composite's questions to a Legacy
    /// client); a Modern `tools/call`'s `Mcp-Param-*` headers checked against the tool's schema
    /// (`header` reads one: `None` absent, `Some(None)` not visible ASCII); a denial decided
    /// now where the answer would be a stream or come from another replica (a plain 403, not
    /// an error on a stream); and a Modern retry another replica issued sent there.
    pub async fn plan<'h>(
        &self,
        ex: &Exchange<'_>,
        prefers_stream: bool,
        header: impl Fn(&str) -> Option<Option<&'h str>>,
    ) -> Result<Plan, CoreError> {
        let msg = ex.msg;
        let stream = prefers_stream
            || msg.meta("progressToken").is_some()
            || match ex.era {
                Era::Modern => {
                    msg.method == Some(crate::modern::LISTEN) || msg.meta(META_LOG_LEVEL).is_some()
                }
                Era::Legacy { session } => {
                    (self.is_per_session() && session.is_some())
                        || self.may_ask_client(ex.caller, session, msg)
                }
            };
        if ex.is_modern() {
            self.check_param_headers(ex, header).await?;
        }
        if self.decides_early(stream) {
            let modern = ex.is_modern();
            self.authorize(ex.caller, ex.session(), msg, modern).await?;
        }
        if ex.is_modern() {
            self.modern_home(msg).await?;
        }
        Ok(Plan { stream })
    }

    /// A Modern `tools/call`'s `Mcp-Param-*` headers mirror the arguments the tool's schema
    /// designates (SEP-2243); a stdio backend never sees headers, so the gateway checks them.
    async fn check_param_headers<'h>(
        &self,
        ex: &Exchange<'_>,
        header: impl Fn(&str) -> Option<Option<&'h str>>,
    ) -> Result<(), CoreError> {
        if ex.msg.method != Some("tools/call") {
            return Ok(());
        }
        let tool = ex
            .msg
            .param("name")
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        let Some(tool) = tool else {
            return Ok(());
        };
        let Some(spec) = self.param_headers(ex.caller, &tool).await else {
            return Ok(());
        };
        let args: Option<serde_json::Value> = ex
            .msg
            .param("arguments")
            .and_then(|a| serde_json::from_str(a.get()).ok());
        switchboard_wire::headers::check_params(args.as_ref(), &spec, header)
            .map_err(CoreError::HeaderMismatch)
    }

    /// Handles one client request, either era, and returns its one answer with the client's
    /// id restored. Dropping the future (client gone) withdraws the call and cancels it
    /// upstream.
    pub async fn handle(self: &Arc<Self>, ex: Exchange<'_>) -> Result<Answer, CoreError> {
        let Some(traces) = &self.traces else {
            return self.unwrapped(ex).await;
        };
        let era = if ex.is_modern() { "modern" } else { "legacy" };
        let cx = traces.request(ex.msg, era);
        let answer = self.unwrapped(ex).with_context(cx.clone()).await;
        crate::trace::finish(&cx, &answer);
        answer
    }

    /// Stage 2: tool search's `call_tool` is unwrapped into the call it carries.
    async fn unwrapped(self: &Arc<Self>, ex: Exchange<'_>) -> Result<Answer, CoreError> {
        if self.tool_search().is_none() {
            return self.admitted(ex).await;
        }
        let Some(inner) = self.unwrap_call_tool(ex.msg) else {
            let msg = ex.msg;
            return crate::tool_search::masked(msg, self.admitted(ex).await);
        };
        let msg = Message::parse(&inner.body).map_err(|_| CoreError::InvalidParams("arguments"))?;
        let answer = self.admitted(Exchange { msg: &msg, ..ex }).await;
        crate::tool_search::masked(&msg, answer)
    }

    /// Stage 3: admission first, so a refused request reaches neither a backend nor a routing
    /// table; the answer is filtered and audited on the way out.
    async fn admitted(self: &Arc<Self>, ex: Exchange<'_>) -> Result<Answer, CoreError> {
        let origins = self.origins_for(ex.msg).await;
        let path = match ex.era {
            Era::Legacy { .. } => Path::Legacy,
            Era::Modern => Path::Modern,
        };
        let admitted =
            (self.config.access).admit(ex.caller, ex.session(), ex.msg, origins, path)?;
        // What a Legacy session keeps beyond this process changes: written before it is
        // answered.
        let keeps = matches!(
            ex.msg.method,
            Some(method::SUBSCRIBE | method::UNSUBSCRIBE | method::SET_LEVEL)
        );
        let stored = ex.session().filter(|_| keeps && self.store().is_some());
        let answer = match ex.era {
            Era::Legacy { .. } => self.legacy_route(ex, &admitted).await.map(Answer::ok),
            Era::Modern => self.modern_route(ex, &admitted).await,
        };
        if let (Some(session), Ok(_)) = (stored, &answer) {
            if let Err(e) = self.store_session(session).await {
                tracing::warn!(error = %e, "session change not written to the store");
            }
        }
        admitted.finish(answer)
    }

    /// Legacy: answer locally (vMCP), resolve, confirm, then the adapter for the backend and
    /// method: the session's own process, a Modern-only backend (relayed), the session
    /// operations the gateway keeps, tasks, or a plain forward.
    async fn legacy_route(
        self: &Arc<Self>,
        call: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Vec<u8>, CoreError> {
        let (Some(id), Some(name)) = (call.msg.id.as_ref(), call.msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        if self.vmcp().is_some() {
            if let Some(answer) = self.aggregated(&call, id, name).await {
                return answer;
            }
        }
        let Some(route) = self.request_route(&call, name).await? else {
            return self.before_initialize(id, name);
        };
        admitted.confirm_route(&route.backend, &route.name)?;
        if route.via == Via::Own {
            return self.own_request(call, id, name, &route).await;
        }
        if !self.backend_of(&route)?.info().era.legacy {
            return self.legacy_to_modern(call, id, name, &route).await;
        }
        let route = &route;
        match (name, call.session()) {
            (method::SUBSCRIBE, Some(sid)) => {
                self.subscribe(sid, call.caller, id, call.msg, route).await
            }
            (method::UNSUBSCRIBE, Some(sid)) => self.unsubscribe(sid, id, call.msg, route).await,
            (method::SET_LEVEL, Some(sid)) => self.set_level(sid, id, call.msg, route).await,
            (method::SUBSCRIBE, None) => Err(CoreError::SessionRequired(method::SUBSCRIBE)),
            (method::UNSUBSCRIBE, None) => Err(CoreError::SessionRequired(method::UNSUBSCRIBE)),
            (method::SET_LEVEL, None) => Err(CoreError::SessionRequired(method::SET_LEVEL)),
            (n, _) if crate::tasks::BY_ID.contains(&n) || n == crate::tasks::LIST => {
                self.task_request(call, id, name, route).await
            }
            _ => {
                // Only a task-augmented request needs its owner (kept off the common path).
                let owner = crate::tasks::is_task_request(call.msg.params)
                    .then(|| crate::tasks::Owner::of(call.caller, call.session()));
                if owner == Some(None) {
                    return Err(CoreError::TaskOwnerRequired);
                }
                let answer = self
                    .call_backend(
                        call.session(),
                        id,
                        name,
                        call.msg,
                        (call.stream, call.caller.credential.as_ref()),
                        route,
                    )
                    .await?;
                if let (Some(Some(owner)), false) = (owner, answer.is_error()) {
                    self.record_task(&route.backend, &owner, &answer);
                }
                Ok(restore(id, &answer))
            }
        }
    }

    /// Modern: answer locally (vMCP), resolve (the lists fetched again once for an unknown
    /// name), confirm, then the adapter (`modern::adapt`); a caller's task answers are
    /// narrowed to its own.
    async fn modern_route(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        let (caller, msg, stream) = (ex.caller, ex.msg, ex.stream);
        // Only task methods and task-augmented requests need the owner up front (no copy of
        // the principal on the common path).
        let asked_task = crate::tasks::is_task_request(msg.params);
        let owner = (msg.method.is_some_and(crate::tasks::concerns_tasks) || asked_task)
            .then(|| crate::tasks::Owner::of(caller, None))
            .flatten();
        let method = msg.method.unwrap_or_default();
        if self.vmcp().is_some() {
            if let Some(answer) = self.aggregated_modern(caller, msg, stream.as_ref()).await {
                return answer;
            }
        }
        let resolved = match self.resolve(From::Modern, method, msg.params) {
            Err(CoreError::UnknownName(..))
                if self
                    .refresh_names(method, crate::vmcp::CapSet::of_modern(msg))
                    .await =>
            {
                self.resolve(From::Modern, method, msg.params)
            }
            resolved => resolved,
        };
        let route = resolved?.ok_or(CoreError::UnexpectedResponse)?;
        admitted.confirm_route(&route.backend, &route.name)?;
        let answer = self
            .adapt_modern(caller, (owner.as_ref(), asked_task), msg, stream, &route)
            .await?;
        Ok(self.own_tasks_only(owner.as_ref(), msg, answer, &route))
    }
}
