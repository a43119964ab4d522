//! The gateway: the composition root. It holds every feature's state (the backend set, the
//! registry, sessions, the virtual server, guardrails, health, the session store…), builds
//! them once (`Gateway::new`) and hands each stage of the request pipeline (`pipeline`) the
//! parts it needs. What `http` may ask of it is narrow: `plan` and `handle` for requests of
//! either era, `initialize` (`gateway::handshake`), `notify` for a client's notifications,
//! and the views in `gateway/` (`Operator`, `ClientSessions`, `SseEndpoint`). Backend-initiated
//! traffic is routed by `dispatch`.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use switchboard_wire::{encode_notification, method, with_member, Message, RequestId};

use crate::access::Path;
use crate::registry::Registry;
use crate::resolve::{From, Via};
use crate::session::SessionId;
use crate::tasks::names_a_task;
use crate::CoreError;
use crate::{Initialized, Principal};

mod config;
mod handshake;
mod host;
mod operator;
mod sessions;
mod sse;
pub use config::GatewayConfig;
pub(crate) use handshake::{initialize_message, Handshake};
pub use operator::Operator;
pub use sessions::ClientSessions;
pub use sse::{SseEndpoint, SseInit};

/// The routing core: every backend it fronts, every session, every feature's state.
#[derive(Debug)]
pub struct Gateway {
    /// The backends this gateway fronts (one, or a set when aggregating).
    pub(crate) backends: Arc<crate::Backends>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) config: GatewayConfig,
    /// Work that outlives the code that started it, and the cleanup slots (`reaper`).
    pub(crate) background: Arc<crate::reaper::Background>,
    /// Set when `--isolation per-session`: how to start a session's own backend.
    pub(crate) per_session: Arc<crate::per_session::Spawner>,
    /// The MRTR bridge: sealed `requestState`s, parked calls, dedicated processes and (per-session
    /// mode) warm partitions.
    pub(crate) mrtr: crate::mrtr::Bridge,
    /// Aggregating (`GatewayConfig::vmcp`): the merged lists and what names route by.
    pub(crate) vmcp: Option<crate::vmcp::Vmcp>,
    /// Each backend's health and breaker (`health`).
    pub(crate) health: Arc<crate::health::Health>,
    /// `Some` when traces are on (`trace`).
    pub(crate) traces: Option<Arc<crate::trace::Traces>>,
    /// Sends requests to backends (`send`): what every feature that reaches a backend takes.
    pub(crate) sender: Arc<crate::send::Sender>,
    /// The gateway's own requests to Legacy clients (`client_ask`).
    pub(crate) asks: crate::client_ask::ClientAsks,
    /// Composite tools and their parked runs (`workflow`).
    pub(crate) workflows: crate::workflow::Workflows,
    /// The HTTP+SSE sessions' handle for `http` (`legacy_sse`).
    pub(crate) sse_streams: crate::legacy_sse::SseStreams,
    /// Where sessions are kept beyond this process, and the replicas (`session_store`).
    pub(crate) store: Arc<crate::session_store::SessionStore>,
    /// What a session's end, a backend's restart and a policy change act on
    /// (`session_ops::Upkeep`).
    pub(crate) upkeep: Arc<crate::session_ops::Upkeep>,
    /// The guardrails in force (`GatewayConfig::guardrails` until a reload replaces them,
    /// `reload::Reload`): read once per request.
    pub(crate) guardrails: arc_swap::ArcSwapOption<crate::guardrails::Guardrails>,
}

impl Gateway {
    /// Wraps a set of initialized backends whose readers deliver into `registry`.
    pub fn new(
        backends: crate::Backends,
        registry: Arc<Registry>,
        config: GatewayConfig,
    ) -> Arc<Self> {
        let mrtr = crate::mrtr::Bridge::new(crate::mrtr::Limits {
            max_sessions: config.max_sessions,
            per_principal: config.mrtr_per_principal,
            replica_id: config.replica_id.clone(),
            partition_idle: config.partition_idle,
            relay_state_ttl: config.relay_state_ttl,
            request_timeout: config.request_timeout,
            max_request_time: config.max_request_time,
            handshake_timeout: config.handshake_timeout,
        });
        let vmcp = config.vmcp.clone().map(|v| {
            let entries: Vec<_> = backends.iter().collect();
            let infos: Vec<_> = entries.iter().map(|b| (b.id.clone(), b.info())).collect();
            let mut vmcp = crate::vmcp::Vmcp::new(v, &infos, config.access.audit.clone());
            vmcp.composites = config
                .workflows
                .plans
                .iter()
                .map(|p| p.name.clone())
                .collect();
            vmcp
        });
        let ids = backends.iter().map(|b| b.id.clone());
        let health = Arc::new(crate::health::Health::new(config.health.clone(), ids, true));
        let traces = config.traces.then(|| Arc::new(crate::trace::Traces::new()));
        let backends = Arc::new(backends);
        let sender = Arc::new(crate::send::Sender {
            registry: registry.clone(),
            health: health.clone(),
            traces: traces.clone(),
            request_timeout: config.request_timeout,
            max_request_time: config.max_request_time,
            has_policy: config.access.has_policy(),
            aggregating: vmcp.is_some(),
        });
        let workflows = crate::workflow::Workflows::new(&config.workflows);
        let sse_streams = crate::legacy_sse::SseStreams::new(registry.clone());
        let store = Arc::new(crate::session_store::SessionStore::new(
            config.session_store.clone(),
            registry.clone(),
            config.replica_id.clone(),
            config.store_fallback_memory,
            config.max_sessions_per_principal,
            config.access.has_policy(),
        ));
        let asks = crate::client_ask::ClientAsks {
            registry: registry.clone(),
            replica_id: config.replica_id.clone(),
            deadline: config.request_timeout,
        };
        let (background, per_session) = (Arc::default(), Arc::default());
        let upkeep = Arc::new(crate::session_ops::Upkeep {
            registry: registry.clone(),
            backends: backends.clone(),
            per_session: Arc::clone(&per_session),
            sender: sender.clone(),
            access: config.access.clone(),
            background: Arc::clone(&background),
            store: store.clone(),
            health: health.clone(),
            handshake_timeout: config.handshake_timeout,
            listen_grace: config.listen_grace,
        });
        let guardrails = arc_swap::ArcSwapOption::new(config.guardrails.clone());
        Arc::new(Gateway {
            guardrails,
            health,
            backends,
            registry,
            config,
            background,
            per_session,
            upkeep,
            mrtr,
            vmcp,
            traces,
            sender,
            asks,
            workflows,
            sse_streams,
            store,
        })
    }

    /// The aggregating state, when the gateway fronts more than one backend.
    pub(crate) fn vmcp(&self) -> Option<&crate::vmcp::Vmcp> {
        self.vmcp.as_ref()
    }

    /// The merged list of `kind` (`Vmcp::view`); an error when not aggregating.
    pub(crate) async fn view(
        &self,
        kind: crate::catalog::Kind,
    ) -> Result<Arc<crate::catalog::View>, CoreError> {
        let Some(vmcp) = self.vmcp() else {
            return Err(CoreError::Aggregation("not aggregating".into()));
        };
        vmcp.view(kind, &self.sender, &self.backends).await
    }

    /// The merged lists as they are, for admission: `None` when not aggregating.
    pub(crate) fn origins(&self) -> Option<&dyn crate::access::Origins> {
        self.vmcp().map(|v| v as &dyn crate::access::Origins)
    }

    /// Builds every merged list once (at startup, before clients come: so the first lists
    /// already know every backend's names).
    pub async fn warm_catalog(&self) {
        if let Some(vmcp) = self.vmcp() {
            vmcp.warm(&self.sender, &self.backends).await;
        }
    }

    /// Every tool and prompt exposed under a name other than its backend's own
    /// (`Vmcp::renamed_names`). Empty when not aggregating.
    pub async fn renamed_names(&self) -> Vec<crate::RenamedName> {
        match self.vmcp() {
            Some(vmcp) => vmcp.renamed_names(&self.sender, &self.backends).await,
            None => Vec::new(),
        }
    }

    /// Once the catalog is warm: each composite's annotations derived from its steps' tools,
    /// or why `serve` must not start (`Workflows::check`).
    pub async fn check_composites(&self) -> Result<(), String> {
        if self.workflows.is_empty() {
            return Ok(());
        }
        let view = self
            .view(crate::catalog::Kind::Tools)
            .await
            .map_err(|e| format!("composite tools need the tools list: {e}"))?;
        self.workflows.check(&view.all, self.vmcp())
    }

    /// The tool search state, when the virtual server has it on.
    pub(crate) fn tool_search(&self) -> Option<&crate::tool_search::ToolSearch> {
        self.vmcp()?.tool_search()
    }

    /// Expires idle sessions every quarter TTL (in per-session mode, sessions whose listen
    /// stream is lost past its grace too) until `stop` fires; parked MRTR calls, idle
    /// partitions, finished background work and stale task questions on their own clock
    /// (`reaper::run`).
    pub async fn run_reaper(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = self.registry.sessions.ttl() / 4;
        if self.is_per_session() {
            tick = tick.min(self.config.listen_grace / 2);
        }
        let held = || {
            self.mrtr.reap_held_calls();
            self.mrtr.partitions.reap_in(&self.background);
            self.background.reap_finished();
            // Task questions nobody answered in time are refused even when nothing else
            // touches their backend.
            for tables in self.registry.all_tables() {
                tables.questions.sweep();
            }
        };
        crate::reaper::run(tick, stop, held, || self.upkeep.reap_sessions()).await;
    }

    /// A client's `initialize` on `/mcp`: in per-session mode (`run --isolation per-session`)
    /// the session's own process answers it (`per_session`); otherwise the gateway does, from
    /// the backend's handshake. Either way the session is opened, and audited.
    pub async fn initialize(
        self: &Arc<Self>,
        caller: &Principal,
        id: &RequestId,
        msg: &Message<'_>,
    ) -> Result<Initialized, CoreError> {
        match self.per_session.transparent() {
            Some(spawner) if self.handshake().isolates_legacy(spawner).await => {
                let (negotiated, _) = self.handshake().negotiate(caller, id, msg.params);
                let params = msg.params;
                let keep: crate::per_session::Keep<'_> = Box::new(move |session| {
                    Box::pin(async move { self.store.keep_opened(&**self, &session, params).await })
                });
                let own = self.own_upstreams();
                let (who, with) = ((caller, negotiated), (spawner, keep));
                own.initialize_isolated(who, id, msg, with).await
            }
            _ => {
                let shared = self.handshake();
                shared.initialize_shared(caller, id, msg.params).await
            }
        }
    }

    /// What `resources/subscribe`, `resources/unsubscribe` and `logging/setLevel` need
    /// (`session_ops`).
    pub(crate) fn session_ops(&self) -> crate::session_ops::SessionOps<'_> {
        crate::session_ops::SessionOps {
            sender: &self.sender,
            registry: &self.registry,
            backends: &self.backends,
            access: &self.config.access,
        }
    }

    /// A client's `initialize` answered by the gateway itself (`gateway::handshake`).
    pub(crate) fn handshake(&self) -> Handshake<'_> {
        Handshake { gateway: self }
    }

    /// Handles a client notification. `initialized` is the gateway's to consume (the backend
    /// was initialized once, by the gateway); `cancelled` is rewritten to the route key the
    /// backend saw, and only for the caller's own in-flight requests; one naming a task goes
    /// to no shared backend (its task ids are the gateway's handles there, never the
    /// client's to name); anything else passes through.
    pub async fn notify(
        &self,
        caller: &Principal,
        session: Option<&SessionId>,
        msg: &Message<'_>,
    ) -> Result<(), CoreError> {
        let admitted =
            self.config
                .access
                .admit(caller, session, msg, self.origins(), Path::Legacy)?;
        admitted.finish_notification(self.route_notification(session, msg).await)
    }

    async fn route_notification(
        &self,
        session: Option<&SessionId>,
        msg: &Message<'_>,
    ) -> Result<(), CoreError> {
        let Some(name) = msg.method else {
            return Err(CoreError::UnexpectedResponse);
        };
        if name == method::CANCELLED {
            self.cancel(session, msg).await;
            return Ok(());
        }
        // A set: the client's notifications (`roots/list_changed`) reach each backend of its
        // own, which may have asked it something; shared backends as before.
        let owns = (self.opener())
            .notify_own_backends(session, name, msg.params)
            .await;
        let route = self.resolve(From::Notification(session), name, msg.params)?;
        match route {
            Some(route) if route.via == Via::Own && owns => Ok(()),
            // A per-session backend saw the client's own `initialize`: it gets the client's
            // `initialized` too. The shared backend was initialized once, by the gateway.
            Some(route) if name == method::INITIALIZED && route.via != Via::Own => Ok(()),
            Some(route) if route.via != Via::Own && msg.params.is_some_and(names_a_task) => {
                debug!("a client notification naming a task; not passed to a shared backend");
                Ok(())
            }
            Some(route) => Ok(route
                .upstream
                .send_line(encode_notification(name, msg.params))
                .await?),
            None if name == method::INITIALIZED => Ok(()),
            None => {
                debug!("notification before the session's own backend is ready; dropped");
                Ok(())
            }
        }
    }

    async fn cancel(&self, session: Option<&SessionId>, msg: &Message<'_>) {
        let target = msg.param("requestId").map(|r| r.get().to_owned());
        let (Some(sid), Some(target), Some(params)) = (session, target, msg.params) else {
            debug!(
                "cancellation without a session or requestId: nothing of the caller's to cancel"
            );
            return;
        };
        let found = self
            .registry
            .sessions
            .take_request(sid.as_str(), target.as_str());
        let Some(in_flight) = found else {
            debug!("cancellation for no in-flight request of this session; ignored");
            return;
        };
        let key = in_flight.key.to_request_id();
        let params = with_member(params, "requestId", key.as_json());
        // Waiting on the client (a relayed question): the backend holds nothing to cancel.
        if let Some(params) = params.filter(|_| in_flight.at_backend) {
            let from = From::Cancel(sid, &in_flight.backend);
            let route = self.resolve(from, method::CANCELLED, Some(&params));
            // A replicated backend: only the replica that holds the call hears of it.
            let target = route
                .ok()
                .flatten()
                .and_then(|r| r.upstream.for_key(in_flight.key.as_str()));
            if let Some(upstream) = target {
                let _ = upstream
                    .send_line(encode_notification(method::CANCELLED, Some(&params)))
                    .await;
            }
        }
        in_flight.cancel.cancel();
    }

    /// Where sessions are kept beyond this process, and the replicas: delivery between them,
    /// what this replica is called, where a session or stream of another is served.
    pub fn session_store(&self) -> &crate::session_store::SessionStore {
        &self.store
    }

    /// Another replica ended `session` (DELETE): if this one holds it, it ends here too
    /// (its listen stream closes) once the store confirms it ended — a message on the
    /// channel alone never ends a session. In the background (owned by the gateway's task
    /// set, bounded by the store's bound).
    pub fn end_from_peer(self: &Arc<Self>, session: &str) {
        if !self.store.holds(session) {
            return;
        }
        let (gateway, session) = (self.clone(), session.to_owned());
        self.background.spawn(async move {
            if gateway.store.ended_elsewhere(&session).await {
                crate::session_store::Host::end_here(&*gateway, &session).await;
            }
        });
    }

    /// Authorization, rate limits and audit (`http` audits refused authentication through
    /// it: [`crate::Access::record_unauthenticated`]).
    pub fn access(&self) -> &crate::Access {
        &self.config.access
    }

    /// What the gateway presents as its server (`initialize`, `server/discover`,
    /// `serverInfo`): the merged declaration when aggregating, else the primary backend's.
    pub(crate) fn presented(&self) -> crate::backends::Presented {
        (self.backends).presented(self.vmcp().map(crate::vmcp::Vmcp::presented))
    }

    /// The MRTR bridge's view for one request (`mrtr::Calls`).
    pub(crate) fn mrtr_calls(&self) -> crate::mrtr::Calls<'_> {
        crate::mrtr::Calls {
            bridge: &self.mrtr,
            spawner: &self.per_session,
            registry: &self.registry,
            background: &self.background,
            backends: &self.backends,
            watched: self.config.access.has_policy(),
            presented: self.presented(),
        }
    }

    /// A Legacy session's own upstreams, opened on first use (`per_session::Opener`).
    pub(crate) fn opener(&self) -> crate::per_session::Opener<'_> {
        crate::per_session::Opener {
            sender: &self.sender,
            resolver: self.resolver(),
            registry: &self.registry,
            handshake_timeout: self.config.handshake_timeout,
        }
    }

    /// A session's own upstreams as requests reach them: the `Own` adapter and per-session
    /// `initialize` (`per_session::OwnUpstreams`).
    pub(crate) fn own_upstreams(self: &Arc<Self>) -> crate::per_session::OwnUpstreams<'_> {
        crate::per_session::OwnUpstreams {
            sender: &self.sender,
            resolver: self.resolver(),
            registry: &self.registry,
            spawner: &self.per_session,
            access: &self.config.access,
            origins: self.origins(),
            ends: self.upkeep.clone(),
            handshake_timeout: self.config.handshake_timeout,
        }
    }

    /// The Modern adapters' view for one request (`modern::Adapters`).
    pub(crate) fn modern(&self) -> crate::modern::Adapters<'_> {
        crate::modern::Adapters {
            sender: &self.sender,
            resolver: self.resolver(),
            mrtr: self.mrtr_calls(),
            asks: &self.asks,
        }
    }

    /// Hot reload, the core's half: a new backend set and shape put in place, and what each
    /// session is told (`reload::Reload`).
    pub fn reload(&self) -> crate::reload::Reload<'_> {
        let rejudge = move || -> futures::future::BoxFuture<'_, ()> {
            let partitions = self.mrtr.partitions.listeners();
            Box::pin((self.upkeep).rejudge_subscriptions(self.origins(), partitions, self))
        };
        crate::reload::Reload {
            vmcp: self.vmcp(),
            backends: &self.backends,
            health: &self.health,
            registry: &self.registry,
            per_session: &self.per_session,
            sender: &self.sender,
            guardrails: &self.guardrails,
            handshake_timeout: self.config.handshake_timeout,
            rejudge: Box::new(rejudge),
        }
    }

    /// What keeps sessions' state at the backends true across sessions' ends, backend
    /// restarts (`revive*`, for the supervisors) and policy changes (`session_ops::Upkeep`).
    pub fn upkeep(&self) -> &crate::session_ops::Upkeep {
        &self.upkeep
    }

    /// Each backend's health and breaker, and the backends that did not start (`health`).
    pub fn health(&self) -> &crate::health::Health {
        &self.health
    }

    /// Probes every backend every `probe_interval` until `stop` fires, following the set as
    /// reloads change it (`health::probe`).
    pub async fn run_probes(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let probe_loop = |id: crate::BackendId, token| {
            let gateway = self.clone();
            async move {
                let backends = &gateway.backends;
                gateway.health.probe_loop(backends, &id, &token).await;
            }
        };
        crate::health::probe::follow(&self.backends, &stop, probe_loop).await;
    }

    /// Re-reads the trust state file when it changes (`switchboard trust approve`), once a
    /// second, until `stop` (`trust`). Returns at once when there is no file to watch.
    pub async fn run_trust_watch(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let Some(trust) = self.trust().cloned() else {
            return;
        };
        let changed =
            |released| crate::trust::tools_changed(&self.backends, &self.registry, released);
        trust.watch(&stop, changed).await;
    }

    /// The operator's view: readiness, `/status`, `/metrics`, table sizes, trust approval.
    pub fn operator(&self) -> Operator<'_> {
        Operator {
            backends: &self.backends,
            registry: &self.registry,
            health: &self.health,
            mrtr: &self.mrtr,
            trust: self.trust(),
            per_session: &self.per_session,
            vmcp: self.vmcp.as_ref(),
        }
    }

    /// The clients' sessions as `http` sees them: resolve one, its listen stream, a client's
    /// answer to a server request, DELETE.
    pub fn sessions(&self) -> ClientSessions<'_> {
        ClientSessions { gateway: self }
    }

    /// The HTTP+SSE endpoint's side of the gateway: its sessions' streams, `initialize`,
    /// the end of a session when its stream closes.
    pub fn sse(self: &Arc<Self>) -> SseEndpoint<'_> {
        SseEndpoint { gateway: self }
    }

    /// Turns on per-session backends: every later Legacy `initialize` on `/mcp` gets its own
    /// process from `spawner`. Sessionless requests keep using the shared backend; Modern ones
    /// on a Legacy-only backend run on their principal's partition (`mrtr::partition`).
    pub fn enable_per_session(&self, spawner: Arc<dyn crate::SpawnBackend>) {
        let primary = self.backends.primary().id.clone();
        self.per_session.enable(true, vec![(primary, spawner)]);
    }

    /// Aggregating: sessions get their own upstream on each of `backends`, opened the first
    /// time a request of the session goes there (the gateway answers `initialize` itself).
    pub fn enable_per_session_backends(
        &self,
        backends: Vec<(crate::BackendId, Arc<dyn crate::SpawnBackend>)>,
    ) {
        self.per_session.enable(false, backends);
    }

    /// Whether sessions may have backends of their own (some backend is per-session): their
    /// requests are answered on a stream (the backend may ask the client something), and
    /// their answers to such questions are accepted.
    pub(crate) fn is_per_session(&self) -> bool {
        self.per_session.any()
    }

    /// Ends every session and every parked MRTR call (gateway shutdown), stopping their
    /// backend processes.
    pub async fn end_all_sessions(self: &Arc<Self>) {
        // All at once (bounded by the teardown slots), not one after another: 256 backends
        // that ignore a closed stdin would otherwise take their 2 s grace each in turn.
        for ended in self.registry.sessions.drain() {
            (self.upkeep).spawn_cleanup(ended, crate::session::EndReason::Shutdown);
        }
        self.mrtr.end_held_calls().await;
        self.mrtr.partitions.end_in(&self.background);
        if let Some(vmcp) = self.vmcp() {
            vmcp.by_caps.end();
        }
        // Every teardown, these and those started earlier (reaper, closed streams), gets its
        // process grace; what is still running after it is aborted and its process killed.
        let grace = crate::per_session::SHUTDOWN_GRACE;
        (self.background).join(grace + Duration::from_secs(1)).await;
    }

    /// The trust state, when the gateway aggregates with trust on (`trust`).
    fn trust(&self) -> Option<&Arc<crate::trust::Trust>> {
        self.vmcp.as_ref()?.trust.as_ref()
    }
}

#[cfg(test)]
mod tests;
