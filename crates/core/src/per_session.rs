//! Per-session backends (`--isolation per-session`): one backend process per Legacy session.
//!
//! With a process of its own, everything the backend sends belongs to that one session, so
//! what shared mode must refuse flows here: server-initiated requests (sampling, elicitation,
//! roots, ping) go to the client, re-keyed with gateway-minted ids, and the client's answers
//! are routed back to exactly the process that asked; `notifications/message` honours the
//! session's own `logging/setLevel`. A request the backend sends while exactly one client
//! request of the session is in flight on a stream goes on that request's stream (it is
//! almost certainly related); otherwise on the session's listen stream.

use std::sync::Arc;

use switchboard_upstream::{InboundSink, Upstream, UpstreamError, UpstreamOwner};
use switchboard_wire::{method, restore_response, Message, RequestId};

use crate::resolve::{From, Route, Via};
use crate::session::{EndReason, OwnBackend, OwnWatch, SessionId};
use crate::BackendId;
use crate::CoreError;

mod lazy;
mod legacy;
mod sink;

pub(crate) use lazy::{remember_client_init, Opener};
pub(crate) use sink::{client_response, OnClose, SessionSink};

/// How long a session's process may take to exit after its stdin closes before it is killed.
pub(crate) const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts one backend process for one session; implemented by the binary (it knows the
/// command line).
pub trait SpawnBackend: Send + Sync + std::fmt::Debug {
    /// Spawns a process whose unsolicited messages go to `sink`.
    fn spawn(&self, sink: Arc<dyn InboundSink>)
        -> Result<(Upstream, UpstreamOwner), UpstreamError>;
}

/// Which backends give sessions an upstream of their own, and how each starts one: empty in
/// shared mode, set once at startup (`Gateway::enable_per_session` for `run`'s one backend,
/// `Gateway::enable_per_session_backends` for a set).
#[derive(Debug, Default)]
pub(crate) struct Spawner {
    spawners: std::sync::OnceLock<Spawners>,
    /// A Modern-first remote's Legacy side: refused, the mode is off.
    legacy: legacy::LegacyProbe,
}

#[derive(Debug)]
struct Spawners {
    /// `run --isolation per-session`: the client's own `initialize` goes to the session's
    /// process (the transparent proxy). In a set the gateway answers `initialize` and opens
    /// each own upstream on first use (`lazy`).
    transparent: bool,
    by_backend: Vec<(BackendId, Arc<dyn SpawnBackend>)>,
}

impl Spawner {
    /// Turns per-session mode on; a second call changes nothing.
    pub(crate) fn enable(
        &self,
        transparent: bool,
        by_backend: Vec<(BackendId, Arc<dyn SpawnBackend>)>,
    ) {
        let _ = self.spawners.set(Spawners {
            transparent,
            by_backend,
        });
    }

    /// Whether a remote connected Modern first was found to speak Legacy too.
    pub(crate) fn legacy_confirmed(&self) -> bool {
        self.legacy.confirmed()
    }

    /// The spawners, while the mode is on.
    fn on(&self) -> Option<&Spawners> {
        self.spawners.get().filter(|_| !self.legacy.refused())
    }

    /// Whether `run --url`'s remote, connected Modern first, gives Legacy sessions upstream
    /// sessions of their own (see `legacy`): asked once, by the first Legacy client.
    pub(crate) async fn speaks_legacy(
        &self,
        unprobed: bool,
        spawner: &Arc<dyn SpawnBackend>,
        deadline: std::time::Duration,
    ) -> bool {
        self.legacy.speaks_legacy(unprobed, spawner, deadline).await
    }

    /// How `backend` starts a session's own upstream, when its sessions get one.
    pub(crate) fn for_backend(&self, backend: &BackendId) -> Option<&Arc<dyn SpawnBackend>> {
        let all = self.on()?;
        all.by_backend
            .iter()
            .find_map(|(id, s)| (id == backend).then_some(s))
    }

    /// The one backend's spawner of `run --isolation per-session`.
    pub(crate) fn transparent(&self) -> Option<&Arc<dyn SpawnBackend>> {
        let all = self.on().filter(|a| a.transparent)?;
        all.by_backend.first().map(|(_, s)| s)
    }

    /// Whether own upstreams are opened on first use (a set) rather than by `initialize`.
    pub(crate) fn lazy(&self) -> bool {
        self.on()
            .is_some_and(|a| !a.transparent && !a.by_backend.is_empty())
    }

    /// Whether any backend gives sessions their own upstream.
    pub(crate) fn any(&self) -> bool {
        self.on().is_some_and(|a| !a.by_backend.is_empty())
    }
}

/// Starts a process with `spawner` on the forking thread ([`switchboard_upstream::on_forker`]),
/// not on an async worker: `fork` of a large multi-threaded gateway takes milliseconds, during
/// which the worker would serve nobody (with `--worker-threads 1`, nobody at all). If the
/// caller goes away meanwhile, the finished spawn is dropped and its process killed.
pub(crate) async fn spawn_off_runtime(
    spawner: &Arc<dyn SpawnBackend>,
    sink: Arc<dyn InboundSink>,
) -> Result<(Upstream, UpstreamOwner), CoreError> {
    let spawner = spawner.clone();
    Ok(switchboard_upstream::on_forker(move || spawner.spawn(sink)).await??)
}

/// A request on a per-session session whose process is not ready: only `ping`, which
/// the spec allows before `initialize`, is answered (by the gateway).
pub(crate) fn before_initialize(id: &RequestId, name: &str) -> Result<Vec<u8>, CoreError> {
    match name {
        method::PING => Ok(switchboard_wire::encode_result(id, "{}")),
        _ => Err(CoreError::NotInitialized),
    }
}

impl crate::Gateway {
    /// Turns on per-session backends: every later Legacy `initialize` on `/mcp` gets its own
    /// process from `spawner`. Sessionless requests keep using the shared backend; Modern ones
    /// on a Legacy-only backend run on their principal's partition (`mrtr::partition`).
    pub fn enable_per_session(&self, spawner: Arc<dyn SpawnBackend>) {
        let primary = self.backends.primary().id.clone();
        self.per_session.enable(true, vec![(primary, spawner)]);
    }

    /// Aggregating: sessions get their own upstream on each of `backends`, opened the first
    /// time a request of the session goes there (the gateway answers `initialize` itself).
    pub fn enable_per_session_backends(&self, backends: Vec<(BackendId, Arc<dyn SpawnBackend>)>) {
        self.per_session.enable(false, backends);
    }

    /// Whether sessions may have backends of their own (some backend is per-session): their
    /// requests are answered on a stream (the backend may ask the client something), and
    /// their answers to such questions are accepted.
    pub(crate) fn is_per_session(&self) -> bool {
        self.per_session.any()
    }

    /// Whether a Legacy session can receive a backend's log messages: only through an
    /// upstream of its own (per-session). A shared backend's `notifications/message` names
    /// no session, so it is dropped (attribution or nothing); where no backend that logs is
    /// per-session, the gateway's `initialize` does not offer `logging` at all.
    pub(crate) fn delivers_logs(&self) -> bool {
        self.backends.iter().any(|e| {
            e.info().capabilities.get("logging").is_some()
                && self.per_session.for_backend(&e.id).is_some()
        })
    }

    /// Whether the client's `initialize` opens the session's own process (`run
    /// --isolation per-session`), rather than being answered by the gateway.
    pub(crate) fn isolates_initialize(&self) -> bool {
        self.per_session.transparent().is_some()
    }

    /// A Legacy `initialize` in per-session mode: a new process, handed the client's own
    /// `initialize` (its capabilities included, so the backend knows it may ask for sampling,
    /// elicitation or roots); the backend's answer goes back with the client's id. Audited
    /// like a shared-mode `initialize`: opened, refused, failed, or cancelled when the client
    /// leaves first.
    pub(crate) async fn initialize_isolated(
        self: &Arc<Self>,
        caller: &crate::Principal,
        id: &RequestId,
        msg: &Message<'_>,
        spawner: &Arc<dyn SpawnBackend>,
    ) -> Result<crate::Initialized, CoreError> {
        let audit = self.config.access.audit_only(caller, msg);
        let result = self.open_isolated(caller, id, msg, spawner).await;
        match &result {
            Ok(init) => {
                let version = answered_version(&init.response);
                let version = version.as_deref().unwrap_or_default();
                audit.finish_initialize(Ok((&init.session, version, &init.response[..])));
            }
            Err(e) => audit.finish_initialize(Err(e)),
        }
        result
    }

    /// The backend a per-session `initialize` opens its session's own process (or upstream
    /// session) on.
    pub(crate) fn own_backend_for(&self, msg: &Message<'_>) -> Result<BackendId, CoreError> {
        let route = self.resolve(From::Initialize, method::INITIALIZE, msg.params)?;
        route.map(|r| r.backend).ok_or(CoreError::NotInitialized)
    }

    async fn open_isolated(
        self: &Arc<Self>,
        caller: &crate::Principal,
        id: &RequestId,
        msg: &Message<'_>,
        spawner: &Arc<dyn SpawnBackend>,
    ) -> Result<crate::Initialized, CoreError> {
        let (negotiated, _) = self.negotiate(caller, id, msg.params);
        let backend = self.own_backend_for(msg)?;
        let session = self.registry.sessions.create(negotiated, caller)?;
        // Until the client has its answer, dropping this future (the client went away while
        // the process started or handshook) ends the session and stops the process.
        let pending = PendingInit {
            gateway: self,
            session: Some(session.clone()),
            opened: Arc::default(),
        };
        match self
            .start_own(
                (&session, &backend),
                spawner,
                id,
                (msg, caller.credential.as_ref()),
                pending.opened.clone(),
            )
            .await
        {
            Ok(a) if !a.is_error() => {
                // Recorded with this replica as its home: its process is here.
                if let Err(e) = self.store.keep_opened(&**self, &session, msg.params).await {
                    pending.fail().await;
                    return Err(e);
                }
                pending.complete();
                Ok(crate::Initialized {
                    session,
                    response: restore_response(id, a.member(), a.payload()),
                })
            }
            failed => {
                // No usable backend: the session never existed for the client.
                pending.fail().await;
                match failed {
                    Ok(a) => Err(CoreError::BackendInit(crate::backend::refused(
                        method::INITIALIZE,
                        a.payload(),
                    ))),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Starts the session's process, attaches it to the session first (so every way the
    /// session ends also stops the process), then hands it the client's `initialize`.
    /// `(session, backend)`: whose process it is, and of which backend.
    pub(crate) async fn start_own(
        self: &Arc<Self>,
        (session, backend): (&crate::SessionId, &BackendId),
        spawner: &Arc<dyn SpawnBackend>,
        id: &RequestId,
        (msg, credential): (&Message<'_>, Option<&switchboard_upstream::Credential>),
        opened: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<switchboard_upstream::BackendResponse, CoreError> {
        let sink = Arc::new(SessionSink {
            registry: Arc::downgrade(&self.registry),
            session: session.as_str().to_owned(),
            backend: backend.clone(),
            on_close: OnClose::EndSession {
                gateway: Arc::downgrade(self),
                opened,
            },
        });
        let (handle, process) = spawn_off_runtime(spawner, sink).await?;
        // Ended already (reaped): the process is dropped with the closure, and killed.
        self.registry.sessions.install_own(
            session.as_str(),
            backend,
            OwnBackend::new(handle.clone(), process),
        )?;
        let route = self
            .resolve(
                From::Started(backend, handle),
                method::INITIALIZE,
                msg.params,
            )?
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?;
        let out = crate::send::Outgoing {
            session: None,
            id,
            name: method::INITIALIZE,
            params: msg.params,
            stream: None,
            listen: None,
            route: &route,
            credential,
        };
        // The handshake deadline, not the request deadline: a process that never answers its
        // `initialize` is a broken backend, and says so.
        let limit = self.config.handshake_timeout;
        tokio::time::timeout(limit, self.sender.send(out))
            .await
            .map_err(|_| crate::backend::no_answer(method::INITIALIZE, limit))?
    }

    /// Everything a per-session session asks goes to its own process as-is (subscriptions,
    /// log level and tasks are the process's own business: nobody else shares it).
    pub(crate) async fn own_request(
        &self,
        call: crate::Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        if route.upstream.is_closed() && !self.per_session.lazy() {
            // The session's process died: the session dies with it, and the client learns it
            // the standard way (404, then a fresh `initialize` gets a fresh process).
            if let Some(sid) = call.session() {
                if let Ok(ended) = self.registry.sessions.remove_any(sid.as_str()) {
                    self.cleanup(ended, EndReason::BackendExited).await;
                }
            }
            return Err(CoreError::SessionNotFound);
        }
        if let Some(sid) = call.session() {
            self.note_own_subscription(sid, call.caller, (name, call.msg), false);
        }
        let out = crate::send::Outgoing {
            session: call.session(),
            id,
            name,
            params: call.msg.params,
            stream: call.stream.clone(),
            listen: None,
            route,
            credential: call.caller.credential.as_ref(),
        };
        let answer = match self.sender.send(out).await {
            // A set: the remote refused the request unseen (its upstream session expired), so
            // it goes once more, on a fresh upstream session of this client session's.
            Err(CoreError::OfBackend(backend, e)) if e.refused_unseen() => {
                let Some(sid) = call.session() else {
                    return Err(CoreError::OfBackend(backend, e));
                };
                return self.own_request_again(call, sid, id, name, &backend).await;
            }
            // The remote lost the upstream session: the client's session is over, and it
            // learns the standard way (404), so it re-initializes (on a fresh upstream session).
            Err(CoreError::Backend(e)) if e.is_session_lost() => {
                if let Some(sid) = call.session() {
                    if let Ok(ended) = self.registry.sessions.remove_any(sid.as_str()) {
                        self.cleanup(ended, EndReason::BackendExited).await;
                    }
                }
                return Err(CoreError::SessionNotFound);
            }
            answer => answer?,
        };
        if let (Some(sid), false) = (call.session(), answer.is_error()) {
            self.note_own_subscription(sid, call.caller, (name, call.msg), true);
        }
        Ok(restore_response(id, answer.member(), answer.payload()))
    }

    /// A subscribe (or unsubscribe) at a session's own process, under a policy: before it is
    /// sent, the session is marked as judged (from then on only watched URIs' updates reach
    /// it, so a subscribe whose answer is lost delivers nothing); once answered (`answered`),
    /// the URI is watched if the policy in force still allows it.
    pub(crate) fn note_own_subscription(
        &self,
        sid: &crate::SessionId,
        caller: &crate::Principal,
        (name, msg): (&str, &Message<'_>),
        answered: bool,
    ) {
        if !self.config.access.has_policy()
            || !matches!(name, method::SUBSCRIBE | method::UNSUBSCRIBE)
        {
            return;
        }
        let Some(uri) = msg
            .param("uri")
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
        else {
            return;
        };
        let uri = crate::catalog::canonical_scheme(&uri).into_owned();
        let who = std::sync::Arc::new(crate::Principal {
            credential: None,
            ..caller.clone()
        });
        // Judged again here: a policy change between admission and this answer must not let
        // a subscribe it would refuse slip back in.
        let allowed = answered && name == method::SUBSCRIBE && self.may_subscribe(caller, &uri);
        let change = if name == method::UNSUBSCRIBE {
            OwnWatch::Unwatch
        } else if allowed {
            OwnWatch::Watch
        } else {
            OwnWatch::Keep
        };
        self.registry
            .sessions
            .note_own_watch(sid.as_str(), who, uri, change);
    }

    /// A request whose remote upstream session expired, once more on a fresh one (never a
    /// third time: a remote that loses every session is failing, and says so).
    pub(crate) async fn own_request_again(
        &self,
        call: crate::Exchange<'_>,
        session: &SessionId,
        id: &RequestId,
        name: &str,
        backend: &BackendId,
    ) -> Result<Vec<u8>, CoreError> {
        let credential = call.caller.credential.as_ref();
        (self.opener())
            .open_own(session, backend, credential)
            .await?;
        let route = self
            .resolve(From::Request(Some(session)), name, call.msg.params)?
            .filter(|r| r.via == Via::Own && &r.backend == backend)
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?;
        let out = crate::send::Outgoing {
            session: Some(session),
            id,
            name,
            params: call.msg.params,
            stream: call.stream,
            listen: None,
            route: &route,
            credential,
        };
        let answer = self.sender.send(out).await?;
        if !answer.is_error() {
            self.note_own_subscription(session, call.caller, (name, call.msg), true);
        }
        Ok(switchboard_wire::restore_response(
            id,
            answer.member(),
            answer.payload(),
        ))
    }

    /// Ends every session and every parked MRTR call (gateway shutdown), stopping their
    /// backend processes.
    pub async fn end_all_sessions(self: &Arc<Self>) {
        // All at once (bounded by the teardown slots), not one after another: 256 backends
        // that ignore a closed stdin would otherwise take their 2 s grace each in turn.
        for ended in self.registry.sessions.drain() {
            self.spawn_cleanup(ended, EndReason::Shutdown);
        }
        self.mrtr.end_held_calls().await;
        self.mrtr.partitions.end_in(&self.background);
        if let Some(vmcp) = self.vmcp() {
            vmcp.by_caps.end();
        }
        // Every teardown, these and those started earlier (reaper, closed streams), gets its
        // process grace; what is still running after it is aborted and its process killed.
        (self.background)
            .join(SHUTDOWN_GRACE + std::time::Duration::from_secs(1))
            .await;
    }
}

/// The `protocolVersion` of a backend's `initialize` answer: the version the client was told.
pub(crate) fn answered_version(response: &[u8]) -> Option<String> {
    Message::parse(response).ok().and_then(|m| {
        m.result
            .and_then(|r| switchboard_wire::object_member(r, "protocolVersion"))
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    })
}

/// A per-session `initialize` under way: the session exists, its client does not know it yet.
struct PendingInit<'a> {
    gateway: &'a Arc<crate::Gateway>,
    /// `None` once settled.
    session: Option<crate::SessionId>,
    /// Shared with the session's sink (see `SessionSink::opened`).
    opened: Arc<std::sync::atomic::AtomicBool>,
}

impl PendingInit<'_> {
    /// The client gets its session: nothing to undo.
    fn complete(mut self) {
        self.opened
            .store(true, std::sync::atomic::Ordering::Release);
        self.session = None;
    }

    /// The initialize failed: end the session now, and wait for its process to stop.
    async fn fail(mut self) {
        if let Some(ended) = self.take_ended() {
            self.gateway.cleanup(ended, EndReason::NeverOpened).await;
        }
    }

    fn take_ended(&mut self) -> Option<crate::session::Ended> {
        let session = self.session.take()?;
        self.gateway
            .registry
            .sessions
            .remove_any(session.as_str())
            .ok()
    }
}

impl Drop for PendingInit<'_> {
    /// Neither completed nor failed: the client went away mid-initialize. Drop code cannot
    /// wait, so the process is stopped in the background.
    fn drop(&mut self) {
        if let Some(mut ended) = self.take_ended() {
            tracing::debug!("client left during initialize; session ended");
            // Nobody ever saw this session, so no grace is owed: killed now (on drop), not
            // after waiting for a teardown slot. A client that initializes and disconnects in
            // a loop therefore cannot pile up processes.
            ended.processes.clear();
            self.gateway.spawn_cleanup(ended, EndReason::NeverOpened);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use switchboard_upstream::StdioConfig;

    use super::*;

    /// A spawner whose `spawn` blocks until a task on the runtime signals it, and gives up
    /// after a bound (so a regression fails instead of hanging).
    #[derive(Debug)]
    struct WaitsForRuntime(parking_lot::Mutex<std_mpsc::Receiver<()>>);

    impl SpawnBackend for WaitsForRuntime {
        fn spawn(
            &self,
            sink: Arc<dyn InboundSink>,
        ) -> Result<(Upstream, UpstreamOwner), UpstreamError> {
            let signalled = self.0.lock().recv_timeout(Duration::from_secs(10));
            if signalled.is_err() {
                return Err(UpstreamError::Spawn {
                    program: "test".into(),
                    reason: "the runtime made no progress while spawning".into(),
                });
            }
            switchboard_upstream::spawn_stdio(&StdioConfig::new("cat", vec![]), sink)
        }
    }

    /// On a single-threaded runtime, the signalling task can only run if the spawn is not
    /// occupying the runtime's one thread: spawned inline, this test fails at the bound.
    #[tokio::test(flavor = "current_thread")]
    async fn spawning_leaves_the_async_worker_free() {
        let (tx, rx) = std_mpsc::channel();
        let spawner: Arc<dyn SpawnBackend> = Arc::new(WaitsForRuntime(parking_lot::Mutex::new(rx)));
        let signal = tokio::spawn(async move { tx.send(()) });
        let registry = crate::registry::Registry::new(crate::session::Sessions::new(
            100_000,
            std::time::Duration::from_secs(1800),
        ));
        let (handle, process) = spawn_off_runtime(&spawner, registry.sink())
            .await
            .expect("spawned once the runtime signalled");
        assert!(signal.await.expect("signal task").is_ok());
        assert!(handle.pid().is_some());
        process.shutdown(Duration::from_secs(2)).await;
    }
}
