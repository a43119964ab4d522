//! The request pipeline: every client request of either era, top to bottom, in one place.
//!
//! `http` builds an [`Exchange`], asks [`Gateway::plan`] how to deliver its answer, and calls
//! [`Gateway::handle`]; the stages are, in order:
//! 0. **plan** (before the request runs) — the delivery (JSON or a stream: whether the gateway
//!    may ask a Legacy client something first, `client_ask`, `workflow`), a Modern
//!    `tools/call`'s `Mcp-Param-*` headers (`tool_headers`), an early denial (`access`), and on
//!    a replicated gateway the replica a retry or a task handle belongs to (`session_store`);
//! 1. **trace** — a span per request when traces are on (`trace`);
//! 2. **unwrap** — tool search's `call_tool` becomes the call it wraps (`tool_search`), and a
//!    forbidden inner tool answers as a missing one;
//! 3. **admit** — policy and rate limits before anything reaches a backend or a routing table,
//!    and after the answer, list filtering and the audit line (`access`); a Legacy session's
//!    kept state (subscriptions, log level) is written to the session store before the answer;
//!
//!    Then **guardrails** (stage 3½) — a `tools/call`'s arguments before it goes on, and the
//!    result of `tools/call`, `resources/read`, `prompts/get` and `tasks/result` on the way
//!    back (`guardrails`); nothing is parsed where no guardrail covers the tool;
//! 4. **answer locally** — what the virtual server answers itself: merged lists, `ping`,
//!    composites, the gateway's own tools (`vmcp`, `workflow`);
//! 5. **resolve** — the one place a backend is chosen (`resolve`, `per_session::lazy`), then
//!    the route confirmed against what admission judged;
//! 6. **adapter** — by era, backend era and method: pass through (`send`), the session's own
//!    process (`per_session`), session operations (`session_ops`), tasks (`tasks`), a Legacy
//!    client onto a Modern backend (`relay`; a `tools/call`'s `Mcp-Param-*` designations
//!    learned first, `tool_headers`), a Modern client onto a Legacy backend (`modern`,
//!    `mrtr`), or straight through to a Modern backend (`modern::pass`);
//! 7. **finish** — ids restored by the adapter, lists filtered and audited by admission, a
//!    Modern caller's task answers narrowed to its own (`own_tasks_only`), a task the call
//!    created exposed under a handle (`tasks::finished`).
//!
//! Inside the stages: replicas are chosen in `resolve`; sending (`send`) keeps the in-flight
//! and progress tables, health and breakers (`health`), metrics, and hands the caller's
//! credential to an upstream that acts as the caller (`upstream`'s outgoing identity);
//! a quarantined tool (`trust`) is refused where the merged lists route a name (`vmcp`).
//! A client's notifications take [`Gateway::notify`] (`gateway`), its `initialize`
//! `gateway::handshake`.

use std::sync::Arc;

mod local;
mod tasks;
#[cfg(test)]
pub(crate) mod tests;

use opentelemetry::trace::FutureExt as _;

use switchboard_upstream::Upstream;
use switchboard_wire::classify::META_LOG_LEVEL;
use switchboard_wire::headers::ParamHeader;
use switchboard_wire::{codes, method, Message};

use crate::access::{Access, Admitted, Origins, Path};
use crate::resolve::{From, Via};
use crate::resolve::{Resolver, Route};
use crate::tasks::{Owner, TaskAsk};
use crate::tool_headers::{TOOLS_CALL, TOOLS_LIST};
use crate::{Answer, BackendId, CoreError, Era, Exchange, Gateway, Principal};
use local::LocalAnswers;

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
                    // Composites are served by the virtual server only (`LocalAnswers`).
                    let composite_asks = || {
                        self.vmcp().is_some()
                            && self.workflows.asks(ex.caller, msg, &self.config.access)
                    };
                    // Only a composite or a relayed Modern backend asks a Legacy client
                    // anything (`ClientAsk` not consulted otherwise).
                    let something_asks = self.vmcp().is_some() || self.backends.relays_questions();
                    (self.is_per_session() && session.is_some())
                        || (something_asks
                            && (self.asks).may_ask(session, msg, composite_asks, &self.backends))
                }
            };
        if ex.is_modern() {
            self.check_param_headers(ex, header).await?;
        }
        let replicated = self.config.replica_id.is_some();
        if Access::decides_early(stream, replicated) {
            self.authorize_early(ex).await?;
        }
        if replicated {
            // A retry or a task handle another replica issued is served there.
            self.store.request_home(msg, ex.is_modern()).await?;
        }
        Ok(Plan { stream })
    }

    /// A denial decided before the request runs (`Access::authorize`), when there is one to
    /// judge; aggregating, the merged lists the request routes by are built first.
    async fn authorize_early(&self, ex: &Exchange<'_>) -> Result<(), CoreError> {
        let access = &self.config.access;
        if !access.judges_early(ex.msg, self.tool_search().is_some()) {
            return Ok(());
        }
        let origins = self.origins_for(ex.msg).await;
        access.authorize(ex.caller, ex.session(), ex.msg, origins, path_of(ex))
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
        let Some(tool) = tool_of(ex.msg) else {
            return Ok(());
        };
        let Some(spec) = self.param_headers(ex.caller, &tool).await else {
            return Ok(());
        };
        // Arguments that do not read as values (a number past a double) are refused: taken
        // as absent, they would need no header.
        let args = ex
            .msg
            .param("arguments")
            .map(|a| serde_json::from_str(a.get()));
        let args = args.transpose().map_err(|_| unreadable_arguments())?;
        switchboard_wire::headers::check_params(args.as_ref(), &spec, header)
            .map_err(CoreError::ParamHeaders)
    }

    /// The `Mcp-Param-*` designations of `tool` for `caller` (`tool_headers`); `None` when it
    /// has none, is unknown, hidden from the caller (a hidden tool must answer as a missing
    /// one, which has no designations to check: admission refuses it next), or the backend's
    /// tools cannot be learned right now.
    async fn param_headers(&self, caller: &Principal, tool: &str) -> Option<Arc<[ParamHeader]>> {
        let spec = self.designations(tool).await?;
        // Judged only for the few tools that designate headers: the common call is judged
        // once, by admission.
        let access = &self.config.access;
        access
            .shows_tool(self.origins(), caller, tool)
            .then_some(spec)
    }

    /// The `Mcp-Param-*` designations of `tool` whoever calls it, learned on first use.
    async fn designations(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        // The backend the Modern `tools/call` of `tool` would go to, and its name there
        // (aggregating: the merged list's; `None`, unchecked, before it is built — it is
        // built at startup).
        let (backend, name) = match self.vmcp() {
            Some(vmcp) => {
                let view = vmcp.current(crate::catalog::Kind::Tools)?;
                let (backend, original) = view.all.lookup(tool)?;
                (backend.clone(), original.to_owned())
            }
            None => {
                let route = self.resolve(From::Modern, TOOLS_CALL, None).ok()??;
                (route.backend, tool.to_owned())
            }
        };
        let tables = self.registry.tables(&backend);
        let fetch = |cursor: Option<String>| {
            let backend = &backend;
            async move {
                (self
                    .sender
                    .list_page(&self.backends, backend, TOOLS_LIST, cursor.as_deref()))
                .await
            }
        };
        tables.tool_headers.of(&name, fetch).await
    }

    /// A Legacy `tools/call` bridged to a Modern-only backend: a remote upstream builds its
    /// `Mcp-Param-*` headers from the `tools/list` answers it carried, so the backend's tools
    /// are walked first (once per backend, `tool_headers`) when no list has passed yet.
    async fn learn_param_headers(&self, ex: &Exchange<'_>) {
        if let Some(tool) = tool_of(ex.msg) {
            self.designations(&tool).await;
        }
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
        let Some(inner) = crate::tool_search::unwrap_call_tool(ex.msg) else {
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
        // Whatever adapter serves it (a shared backend, a session's own process).
        if ex.msg.method == Some(method::SUBSCRIBE) && crate::session_ops::uri_too_long(ex.msg) {
            return Err(CoreError::InvalidParams("uri is longer than 8192 bytes"));
        }
        // A listen holds its place in its caller's count while it is served (until its
        // stream closes), whatever serves it.
        let _listening = match ex.msg.method {
            Some(crate::modern::LISTEN) => Some(self.registry.listeners.hold(ex.caller)?),
            _ => None,
        };
        let origins = self.origins_for(ex.msg).await;
        let path = path_of(&ex);
        let mut admitted =
            (self.config.access).admit(ex.caller, ex.session(), ex.msg, origins, path)?;
        // What a Legacy session keeps beyond this process changes: written before it is
        // answered.
        let keeps = matches!(
            ex.msg.method,
            Some(method::SUBSCRIBE | method::UNSUBSCRIBE | method::SET_LEVEL)
        );
        let stored = ex
            .session()
            .filter(|_| keeps && self.store.records().is_some());
        let answer = self.guarded(ex, &mut admitted).await;
        if let (Some(session), Ok(_)) = (stored, &answer) {
            if let Err(e) = self.store.write(&**self, session).await {
                tracing::warn!(error = %e, "session change not written to the store");
            }
        }
        admitted.finish(answer)
    }

    /// Stage 3½: guardrails around stages 4–6 (`guardrails`): a `tools/call`'s arguments
    /// before it is routed, and the result of `tools/call`, `resources/read` and
    /// `prompts/get` before admission filters and audits it. Where no guardrail covers the
    /// tool, nothing is parsed or copied. What they judged the target to be is confirmed
    /// when the request is routed (`Admitted::confirm_route`).
    async fn guarded<'a>(
        self: &'a Arc<Self>,
        ex: Exchange<'_>,
        admitted: &mut Admitted<'a>,
    ) -> Result<Answer, CoreError> {
        // Held for the request: a reload meanwhile does not change what checks its answer.
        let guards = self.guardrails.load_full();
        let (item, scope) = match guards.as_deref() {
            Some(g) => self.guard_scope(g, &ex).unzip(),
            None => (None, None),
        };
        if crate::guardrails::checks(ex.msg.method) {
            let by = guards.clone();
            let checked = crate::guardrails::Checked::new(&self.guardrails, by, item.flatten());
            admitted.checked_by_guardrails(checked);
        }
        let admitted = &*admitted;
        match scope.flatten() {
            None => self.routed(ex, admitted).await,
            // Boxed: a guarded request's future would otherwise size every request's.
            Some(scope) => Box::pin(self.guarded_by(scope, ex, admitted)).await,
        }
    }

    /// The guardrails covering a request's target and the item they judged it to be
    /// (`guardrails::scope_of`; `None` when it is not a method they check).
    fn guard_scope<'g>(
        &self,
        guards: &'g crate::guardrails::Guardrails,
        ex: &Exchange<'_>,
    ) -> Option<(
        Option<crate::guardrails::Item>,
        Option<crate::guardrails::Scope<'g>>,
    )> {
        let merged = self.vmcp().map(|v| move |kind| v.current(kind));
        let primary = self.backends.primary();
        let at = crate::guardrails::Lookup {
            registry: &self.registry,
            merged: merged.as_ref().map(|m| m as &dyn Fn(_) -> _),
            primary: &primary.id,
        };
        crate::guardrails::scope_of(guards, ex, at)
    }

    /// A request some guardrail covers: its arguments checked before stages 4–6, its answer
    /// after.
    async fn guarded_by(
        self: &Arc<Self>,
        scope: crate::guardrails::Scope<'_>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        let era = if ex.is_modern() { "modern" } else { "legacy" };
        let rewritten;
        let msg;
        let ex = match scope.request(ex.msg, ex.caller, era).await {
            crate::guardrails::Request::Pass => ex,
            crate::guardrails::Request::Refused(answer) => return Ok(answer),
            crate::guardrails::Request::Replaced(body) => {
                rewritten = body;
                msg = Message::parse(&rewritten)
                    .map_err(|_| CoreError::InvalidParams("arguments"))?;
                Exchange { msg: &msg, ..ex }
            }
        };
        let caller = ex.caller;
        let answer = self.routed(ex, admitted).await?;
        Ok(scope.response(answer, caller, era).await)
    }

    /// Stages 4–6: a method the task stage may take (`pipeline/tasks.rs`: a handle's
    /// follow-up, a merged `tasks/list`, a listen asking for task status), or the era's route
    /// (every other request goes straight there).
    async fn routed(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
    ) -> Result<Answer, CoreError> {
        match ex.msg.method {
            // Boxed, as every path but the era's route: the task stage's future would
            // otherwise size every request's.
            Some(m) if crate::tasks::concerns_tasks(m) || m == crate::modern::LISTEN => {
                Box::pin(self.tasks_routed(ex, admitted)).await
            }
            _ => self.era_route(ex, admitted, None).await,
        }
    }

    /// The era's route (`pinned`: to that backend, a task's, rather than by name).
    pub(crate) async fn era_route(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
        pinned: Option<&BackendId>,
    ) -> Result<Answer, CoreError> {
        match ex.era {
            Era::Legacy { .. } => self.legacy_route(ex, admitted, pinned).await,
            Era::Modern => self.modern_route(ex, admitted, pinned).await,
        }
    }

    /// Legacy: answer locally (vMCP), resolve (a session's own process opened on first
    /// use), confirm, then the adapter.
    async fn legacy_route(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
        pinned: Option<&BackendId>,
    ) -> Result<Answer, CoreError> {
        let (Some(id), Some(name)) = (ex.msg.id.as_ref(), ex.msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        if let (Some(local), None) = (LocalAnswers::of(self), pinned) {
            if let Some(answer) = local.aggregated(self, &ex, id, name).await {
                return answer.map(Answer::ok);
            }
        }
        let route = match pinned {
            Some(b) => self.resolve(From::Pinned(ex.session(), b), name, ex.msg.params)?,
            None => self.request_route(&ex, name).await?,
        };
        let Some(route) = route else {
            return crate::per_session::before_initialize(id, name).map(Answer::ok);
        };
        admitted.confirm_route(&route.backend, &route.name)?;
        let adapter = match name {
            _ if route.via == Via::Own => Adapter::Own,
            _ if !route.entry(&self.backends)?.info().era.legacy => Adapter::LegacyToModern,
            method::SUBSCRIBE | method::UNSUBSCRIBE | method::SET_LEVEL => Adapter::SessionOp,
            n if crate::tasks::concerns_tasks(n) => Adapter::Task,
            _ => Adapter::Pass,
        };
        let task = TaskAsk::of(&ex);
        tasks::refuse_on_replicas(&route, &task)?;
        let who = (ex.caller, ex.session());
        let answer = self.adapt(adapter, ex, &route, &task).await?;
        Ok(self.tasks_finished(&route, who, (name, &task), answer))
    }

    /// Modern: answer locally (vMCP), resolve (the lists fetched again once for an unknown
    /// name), confirm, what the gateway refuses itself (`modern::refusal`), then the adapter;
    /// a caller's task answers are narrowed to its own.
    async fn modern_route(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
        pinned: Option<&BackendId>,
    ) -> Result<Answer, CoreError> {
        let msg = ex.msg;
        let method = msg.method.unwrap_or_default();
        if let Some(b) = pinned {
            let route = self.resolve(From::Pinned(None, b), method, msg.params)?;
            let route = route.ok_or(CoreError::UnexpectedResponse)?;
            return self.modern_routed(ex, admitted, route).await;
        }
        if let Some(local) = LocalAnswers::of(self) {
            let stream = ex.stream.as_ref();
            if let Some(answer) = local.aggregated_modern(self, ex.caller, msg, stream).await {
                return answer;
            }
        }
        let resolved = match self.resolve(From::Modern, method, msg.params) {
            Err(e)
                if Box::pin(self.relisted(&e, msg, crate::vmcp::CapSet::of_modern(msg))).await =>
            {
                self.resolve(From::Modern, method, msg.params)
            }
            resolved => resolved,
        };
        let route = resolved?.ok_or(CoreError::UnexpectedResponse)?;
        self.modern_routed(ex, admitted, route).await
    }

    /// Modern, once routed: confirm, refuse, adapt, narrow.
    async fn modern_routed(
        self: &Arc<Self>,
        ex: Exchange<'_>,
        admitted: &Admitted<'_>,
        route: Route,
    ) -> Result<Answer, CoreError> {
        let msg = ex.msg;
        let method = msg.method.unwrap_or_default();
        admitted.confirm_route(&route.backend, &route.name)?;
        let task = TaskAsk::of(&ex);
        if let Some(refused) = crate::modern::refusal(&self.registry, &task, msg, &route)? {
            return Ok(refused);
        }
        tasks::refuse_on_replicas(&route, &task)?;
        let adapter = match crate::modern::passes(&self.backends, &route)? {
            true => Adapter::PassModern,
            false => Adapter::Bridge,
        };
        let who = (ex.caller, None);
        let answer = self.adapt(adapter, ex, &route, &task).await?;
        let owner = task.owner.as_ref();
        let answer = crate::modern::own_tasks_only(&self.registry, owner, msg, answer, &route);
        Ok(self.tasks_finished(&route, who, (method, &task), answer))
    }

    /// Stage 7's task half (`tasks::finished`): a task the call created is recorded in the
    /// route's backend's table for its owner (`who`: the caller, in its session for Legacy;
    /// built only when there is one) and reaches it under a handle.
    fn tasks_finished(
        &self,
        route: &Route,
        who: (&Principal, Option<&crate::session::SessionId>),
        (name, task): (&str, &TaskAsk),
        answer: Answer,
    ) -> Answer {
        let handle_for = |created: &str| {
            let owner = Owner::of(who.0, who.1);
            let tables = self.registry.tables(&route.backend);
            tables.tasks.handle_for(Some(&owner), created)
        };
        crate::tasks::finished(route.task_holder(), (name, task), answer, handle_for)
    }

    /// Stage 5's inputs as they are now: the backend set, the merged lists, the per-session
    /// backends and the session table (`resolve`).
    pub(crate) fn resolver(&self) -> Resolver<'_> {
        Resolver {
            backends: &self.backends,
            vmcp: self.vmcp().map(|v| v as &dyn crate::destination::Picker),
            per_session: &self.per_session,
            sessions: &self.registry.sessions,
        }
    }

    /// Where `msg`'s targets are served, for its admission (`LocalAnswers::origins_for`):
    /// `None` when not aggregating.
    async fn origins_for(&self, msg: &Message<'_>) -> Option<&dyn Origins> {
        Some(LocalAnswers::of(self)?.origins_for(msg).await)
    }

    /// After routing `msg` failed with `err`: its lists fetched again, for one more try
    /// (`LocalAnswers::relisted`); false when not aggregating.
    async fn relisted(&self, err: &CoreError, msg: &Message<'_>, set: crate::vmcp::CapSet) -> bool {
        match LocalAnswers::of(self) {
            Some(local) => local.relisted(err, msg, set).await,
            None => false,
        }
    }

    /// Where a message goes: stage 5, for every path that talks to a backend
    /// (`Resolver::resolve`).
    pub(crate) fn resolve(
        &self,
        from: From<'_>,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Result<Option<Route>, CoreError> {
        self.resolver().resolve(from, method, params)
    }

    /// Where a Legacy client request goes (`None`: nowhere yet, see `resolve`). A session
    /// that ended between lookup and routing (DELETE, reaping) is not found: never fall
    /// through to the shared backend with a dead session's request. In a set, the session's
    /// own upstream on a per-session backend is opened first when it has none (or a dead one).
    pub(crate) async fn request_route(
        &self,
        call: &crate::Exchange<'_>,
        name: &str,
    ) -> Result<Option<Route>, CoreError> {
        let from = || From::Request(call.session());
        let params = call.msg.params;
        let route = match self.resolve(from(), name, params) {
            Err(e)
                if Box::pin(self.relisted(
                    &e,
                    call.msg,
                    crate::vmcp::caps_of(&self.asks, call),
                ))
                .await =>
            {
                self.resolve(from(), name, params)
            }
            resolved => resolved,
        }?;
        let dead = route
            .as_ref()
            .is_some_and(|r| r.via == Via::Own && r.upstream.is_closed());
        if route.is_some() && !dead {
            return Ok(route);
        }
        let (Some(session), Some(backend)) = (
            call.session(),
            self.opener().own_to_open(call.session(), name, params),
        ) else {
            return Ok(route);
        };
        // Boxed: opening is rare, and its future would otherwise size every request's.
        let opener = self.opener();
        Box::pin(opener.open_own(session, &backend, call.caller.credential.as_ref())).await?;
        self.resolve(from(), name, params)
    }

    /// Stage 6: the request reaches its backend through its adapter.
    async fn adapt(
        self: &Arc<Self>,
        adapter: Adapter,
        ex: Exchange<'_>,
        route: &Route,
        task: &TaskAsk,
    ) -> Result<Answer, CoreError> {
        let (Some(id), Some(name)) = (ex.msg.id.as_ref(), ex.msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let owner = (task.owner.as_ref(), task.asked);
        // The two pass-throughs run inline; every other adapter's future is boxed, so the
        // common request's future (moved into a box once per request by `http`) stays the
        // size of a pass-through, not of the largest adapter.
        let legacy = match adapter {
            Adapter::Pass => self.sender.pass(ex, id, name, route, task).await,
            Adapter::Own => {
                let own =
                    async move { self.own_upstreams().own_request(ex, id, name, route).await };
                Box::pin(own).await
            }
            Adapter::SessionOp => {
                let ops = self.session_ops();
                Box::pin(ops.session_op(&ex, id, name, route)).await
            }
            Adapter::Task => Box::pin(self.task_request(ex, id, name, route)).await,
            Adapter::LegacyToModern => {
                let bridged = async move {
                    // Only a remote sends headers (a stdio backend never sees them).
                    if name == TOOLS_CALL && matches!(route.upstream, Upstream::Remote(_)) {
                        self.learn_param_headers(&ex).await;
                    }
                    self.modern().legacy_to_modern(ex, id, name, route).await
                };
                Box::pin(bridged).await
            }
            Adapter::PassModern => {
                let (caller, stream) = (ex.caller, ex.stream);
                let who = (caller, owner.0, owner.1);
                let answer = (self.modern())
                    .pass_through(who, ex.msg, stream, route)
                    .await?;
                if answer.error_code == Some(i64::from(codes::UNSUPPORTED_PROTOCOL_VERSION)) {
                    // Refused on era grounds: the backend may have changed (restart, upgrade).
                    let (gateway, backend) = (self.clone(), route.backend.clone());
                    let reprobe = async move { gateway.backends.reprobe(&backend).await };
                    self.background.spawn(reprobe);
                }
                return Ok(answer);
            }
            Adapter::Bridge => {
                let modern = self.modern();
                return Box::pin(modern.bridge(ex.caller, owner, ex.msg, ex.stream, route)).await;
            }
        };
        legacy.map(Answer::ok)
    }
}

/// The tool a `tools/call` names (`params.name`).
fn tool_of(msg: &Message<'_>) -> Option<String> {
    serde_json::from_str(msg.param("name")?.get()).ok()
}

/// A designated tool's `arguments` that do not read as JSON values.
fn unreadable_arguments() -> CoreError {
    CoreError::ParamHeaders(switchboard_wire::ErrorObject::new(
        codes::INVALID_PARAMS,
        "Invalid params: the arguments cannot be checked against their Mcp-Param-* headers",
    ))
}

/// The era path a request came in on, as admission and the audit see it.
fn path_of(ex: &Exchange<'_>) -> Path {
    match ex.era {
        Era::Legacy { .. } => Path::Legacy,
        Era::Modern => Path::Modern,
    }
}

/// How a routed request reaches its backend: a closed set, chosen once per request from its
/// era, the backend's era and the method (as `upstream::Upstream` is for transports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adapter {
    /// Legacy: forwarded under a fresh route key, the client's id restored (`send`).
    Pass,
    /// Legacy: the session's own process (per-session mode, `per_session`).
    Own,
    /// Legacy: subscriptions and the log level, which the gateway keeps per session
    /// (`session_ops`).
    SessionOp,
    /// Legacy: 2025-11-25 task methods, for the caller's own tasks only (`tasks`).
    Task,
    /// A Legacy client onto a Modern-only backend: the gateway speaks Modern for it, and asks
    /// the client what the backend needs (`modern`, `relay`).
    LegacyToModern,
    /// Modern onto a backend answering Modern: passed through (`modern::pass`).
    PassModern,
    /// Modern onto a Legacy backend: bridged, on the caller's partition or through MRTR in
    /// per-session mode (`modern`, `mrtr`).
    Bridge,
}
