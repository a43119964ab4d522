//! A Legacy session's own upstreams as requests reach them: the pipeline's `Own` adapter
//! (everything the session asks goes to its own process or upstream session as-is) and the
//! per-session `initialize` that starts one (`run --isolation per-session`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use switchboard_upstream::{BackendResponse, Credential};
use switchboard_wire::{method, restore_response, Message, RequestId};

use super::{spawn_off_runtime, Ends, OnClose, SessionSink, SpawnBackend, Spawner};
use crate::access::{Access, Origins};
use crate::registry::Registry;
use crate::resolve::{From, Resolver, Route, Via};
use crate::send::{Outgoing, Sender};
use crate::session::{EndReason, OwnBackend, OwnWatch, SessionId};
use crate::{BackendId, CoreError, Exchange, Initialized, Principal};

/// What a session's own upstreams need, taken explicitly (`Gateway::own_upstreams` builds
/// it): the way to the backends and where a message goes, the routing tables, the
/// spawners, the policy (a subscription at a session's own process is judged) and how a
/// session ends when its process does.
pub(crate) struct OwnUpstreams<'a> {
    pub(crate) sender: &'a Sender,
    pub(crate) resolver: Resolver<'a>,
    pub(crate) registry: &'a Arc<Registry>,
    pub(crate) spawner: &'a Spawner,
    pub(crate) access: &'a Access,
    pub(crate) origins: Option<&'a dyn Origins>,
    pub(crate) ends: Arc<dyn Ends>,
    pub(crate) handshake_timeout: Duration,
}

impl OwnUpstreams<'_> {
    /// A Legacy `initialize` in per-session mode: a new process, handed the client's own
    /// `initialize` (its capabilities included, so the backend knows it may ask for sampling,
    /// elicitation or roots); the backend's answer goes back with the client's id. Audited
    /// like a shared-mode `initialize`: opened, refused, failed, or cancelled when the client
    /// leaves first. `negotiated`: the version the gateway would answer this client with;
    /// `keep`: records the opened session where sessions are kept (the session store).
    pub(crate) async fn initialize_isolated(
        &self,
        (caller, negotiated): (&Principal, &'static str),
        id: &RequestId,
        msg: &Message<'_>,
        (spawner, keep): (&Arc<dyn SpawnBackend>, Keep<'_>),
    ) -> Result<Initialized, CoreError> {
        let audit = self.access.audit_only(caller, msg);
        let result = self
            .open_isolated((caller, negotiated), id, msg, (spawner, keep))
            .await;
        match &result {
            Ok(init) => {
                let version = super::answered_version(&init.response);
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
        let route = (self.resolver).resolve(From::Initialize, method::INITIALIZE, msg.params)?;
        route.map(|r| r.backend).ok_or(CoreError::NotInitialized)
    }

    async fn open_isolated(
        &self,
        (caller, negotiated): (&Principal, &'static str),
        id: &RequestId,
        msg: &Message<'_>,
        (spawner, keep): (&Arc<dyn SpawnBackend>, Keep<'_>),
    ) -> Result<Initialized, CoreError> {
        let backend = self.own_backend_for(msg)?;
        let session = self.registry.sessions.create(negotiated, caller)?;
        // Until the client has its answer, dropping this future (the client went away while
        // the process started or handshook) ends the session and stops the process.
        let pending = PendingInit {
            ends: &self.ends,
            registry: self.registry,
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
                if let Err(e) = keep(session.clone()).await {
                    pending.fail().await;
                    return Err(e);
                }
                pending.complete();
                Ok(Initialized {
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
        &self,
        (session, backend): (&SessionId, &BackendId),
        spawner: &Arc<dyn SpawnBackend>,
        id: &RequestId,
        (msg, credential): (&Message<'_>, Option<&Credential>),
        opened: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<BackendResponse, CoreError> {
        let sink = Arc::new(SessionSink {
            registry: Arc::downgrade(self.registry),
            session: session.as_str().to_owned(),
            backend: backend.clone(),
            on_close: OnClose::EndSession {
                ends: Arc::downgrade(&self.ends),
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
        let started = From::Started(backend, handle);
        let route = (self.resolver)
            .resolve(started, method::INITIALIZE, msg.params)?
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?;
        let out = Outgoing {
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
        let limit = self.handshake_timeout;
        tokio::time::timeout(limit, self.sender.send(out))
            .await
            .map_err(|_| crate::backend::no_answer(method::INITIALIZE, limit))?
    }

    /// The `Own` adapter: everything a per-session session asks goes to its own process
    /// as-is (subscriptions, log level and tasks are the process's own business: nobody else
    /// shares it).
    pub(crate) async fn own_request(
        &self,
        call: Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        if route.upstream.is_closed() && !self.spawner.lazy() {
            // The session's process died: the session dies with it, and the client learns it
            // the standard way (404, then a fresh `initialize` gets a fresh process).
            self.end_lost(call.session()).await;
            return Err(CoreError::SessionNotFound);
        }
        if let Some(sid) = call.session() {
            self.note_own_subscription(sid, call.caller, (name, call.msg), false);
        }
        let out = Outgoing {
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
                return self.own_request_again(call, sid, (id, name), route).await;
            }
            // The remote lost the upstream session: the client's session is over, and it
            // learns the standard way (404), so it re-initializes (on a fresh upstream session).
            Err(CoreError::Backend(e)) if e.is_session_lost() => {
                self.end_lost(call.session()).await;
                return Err(CoreError::SessionNotFound);
            }
            answer => answer?,
        };
        if let (Some(sid), false) = (call.session(), answer.is_error()) {
            self.note_own_subscription(sid, call.caller, (name, call.msg), true);
        }
        Ok(restore_response(id, answer.member(), answer.payload()))
    }

    /// The session whose own upstream is gone ends (if it has not already).
    async fn end_lost(&self, session: Option<&SessionId>) {
        if let Some(sid) = session {
            if let Ok(ended) = self.registry.sessions.remove_any(sid.as_str()) {
                self.ends.cleanup(ended, EndReason::BackendExited).await;
            }
        }
    }

    /// A subscribe (or unsubscribe) at a session's own process, under a policy: before it is
    /// sent, the session is marked as judged (from then on only watched URIs' updates reach
    /// it, so a subscribe whose answer is lost delivers nothing); once answered (`answered`),
    /// the URI is watched if the policy in force still allows it.
    pub(crate) fn note_own_subscription(
        &self,
        sid: &SessionId,
        caller: &Principal,
        (name, msg): (&str, &Message<'_>),
        answered: bool,
    ) {
        if !self.access.has_policy() || !matches!(name, method::SUBSCRIBE | method::UNSUBSCRIBE) {
            return;
        }
        let Some(uri) = msg
            .param("uri")
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
        else {
            return;
        };
        let uri = crate::catalog::canonical_scheme(&uri).into_owned();
        let who = Arc::new(Principal {
            credential: None,
            ..caller.clone()
        });
        // Judged again here: a policy change between admission and this answer must not let
        // a subscribe it would refuse slip back in.
        let allowed = answered
            && name == method::SUBSCRIBE
            && self.access.may_watch(self.origins, caller, &uri);
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
    /// third time: a remote that loses every session is failing, and says so). Resolved
    /// again for the fresh upstream, it must reach what `confirmed` (the route admission and
    /// the guardrails confirmed) reached: the same backend, under the same name there (the
    /// merged lists may have been rebuilt in between).
    async fn own_request_again(
        &self,
        call: Exchange<'_>,
        session: &SessionId,
        (id, name): (&RequestId, &str),
        confirmed: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let backend = &confirmed.backend;
        let credential = call.caller.credential.as_ref();
        let opener = super::Opener {
            sender: self.sender,
            resolver: self.resolver,
            registry: self.registry,
            handshake_timeout: self.handshake_timeout,
        };
        opener.open_own(session, backend, credential).await?;
        let route = (self.resolver)
            .resolve(From::Request(Some(session)), name, call.msg.params)?
            .filter(|r| r.via == Via::Own && &r.backend == backend)
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?;
        if route.name != confirmed.name {
            return Err(CoreError::ChangedMeanwhile);
        }
        let out = Outgoing {
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
        Ok(restore_response(id, answer.member(), answer.payload()))
    }
}

/// Records a session just opened where sessions are kept beyond this process
/// (`SessionStore::keep_opened`, with this replica as its home: its process is here).
pub(crate) type Keep<'a> =
    Box<dyn FnOnce(SessionId) -> BoxFuture<'a, Result<(), CoreError>> + Send + 'a>;

/// A per-session `initialize` under way: the session exists, its client does not know it yet.
struct PendingInit<'a> {
    ends: &'a Arc<dyn Ends>,
    registry: &'a Registry,
    /// `None` once settled.
    session: Option<SessionId>,
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
            self.ends.cleanup(ended, EndReason::NeverOpened).await;
        }
    }

    fn take_ended(&mut self) -> Option<crate::session::Ended> {
        let session = self.session.take()?;
        self.registry.sessions.remove_any(session.as_str()).ok()
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
            self.ends
                .clone()
                .spawn_cleanup(ended, EndReason::NeverOpened);
        }
    }
}
