//! The one place that decides where a message goes: [`Gateway::resolve`] maps (who is asking,
//! in which session, method and params) to a [`Route`]: which backend, which of its upstream
//! handles (the shared one, the session's own, the gateway's own, a process started for the
//! caller), and the name at that backend.
//!
//! Everything that talks to a backend on a client's behalf or its own (requests, notifications,
//! cancellations, internal calls, subscription and log-level bookkeeping, Modern passthrough
//! and bridging) takes a `Route` from here instead of reaching for a handle. Today the set
//! holds one backend, so the choice of backend is always the primary one and the name is always
//! the client's; the choice of upstream handle is what differs (shared vs per-session).

use std::sync::Arc;

use serde_json::value::RawValue;
use switchboard_upstream::Upstream;

use crate::backends::BackendEntry;
use crate::session::SessionId;
use crate::BackendId;
use crate::{CoreError, Gateway};

/// Where one message goes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The backend.
    pub(crate) backend: BackendId,
    /// The handle to send on.
    pub(crate) upstream: Upstream,
    /// Which of the backend's handles that is.
    pub(crate) via: Via,
    /// The name (tool, prompt, resource) the message uses at the backend.
    pub(crate) name: Name,
}

/// Which of a backend's upstream handles a route uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// The backend's shared handle (every client's).
    Shared,
    /// The session's own upstream (per-session mode), handshaken.
    Own,
    /// The upstream the gateway keeps for its own requests (the shared handle unless the
    /// backend needs another: a Legacy-only remote refuses sessionless requests).
    Internal,
    /// A process or upstream session the gateway started for this caller (a session's own
    /// during its `initialize`, a Modern partition).
    Started,
}

/// The name a message uses at its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Name {
    /// The client's own name, unchanged (one backend; or an aggregated name the strategy
    /// left bare).
    AsClient,
    /// Aggregating: `params.name` becomes the backend's own name for the exposed one.
    Renamed(std::sync::Arc<str>),
    /// Aggregating: a completion's `params.ref.name` becomes the backend's prompt name.
    RenamedRef(std::sync::Arc<str>),
}

impl Name {
    /// `params` as the backend must see them (`None`: unchanged).
    pub(crate) fn apply(&self, params: Option<&RawValue>) -> Option<Box<RawValue>> {
        let params = params?;
        match self {
            Name::AsClient => None,
            Name::Renamed(original) => crate::catalog::rename_param(params, "name", original),
            Name::RenamedRef(original) => {
                crate::catalog::rename_param_at(params, &["ref", "name"], original)
            }
        }
    }
}

impl Name {
    /// The same as [`Name::apply`], on parsed params (the MRTR bridge edits a `Value`).
    pub(crate) fn apply_to(&self, params: &mut serde_json::Value) {
        match self {
            Name::AsClient => {}
            Name::Renamed(original) => {
                if let Some(obj) = params.as_object_mut() {
                    obj.insert("name".into(), original.as_ref().into());
                }
            }
            Name::RenamedRef(original) => {
                if let Some(r) = params.get_mut("ref").and_then(|r| r.as_object_mut()) {
                    r.insert("name".into(), original.as_ref().into());
                }
            }
        }
    }
}

/// Who is asking, as far as routing cares.
#[derive(Debug)]
pub(crate) enum From<'a> {
    /// A Legacy client request, in its session if it has one.
    Request(Option<&'a SessionId>),
    /// A Legacy client notification, in its session if it has one.
    Notification(Option<&'a SessionId>),
    /// A client's cancellation of its request in `session` that went to `backend`.
    Cancel(&'a SessionId, &'a BackendId),
    /// A stateless Modern request.
    Modern,
    /// A per-session `initialize`: only the route's backend is used (the session gets an
    /// upstream of its own there).
    Initialize,
    /// The gateway's own request to `backend`.
    Gateway(&'a BackendId),
    /// Session teardown: cancellations on `backend`'s shared handle for requests that were
    /// still waiting there.
    Teardown(&'a BackendId),
    /// An upstream the gateway just started for the caller on `backend`.
    Started(&'a BackendId, Upstream),
    /// Aggregating: a Legacy client request that goes to every backend (`logging/setLevel`),
    /// here to `backend`, in the session if it has one.
    Fanout(Option<&'a SessionId>, &'a BackendId),
}

impl Gateway {
    /// Where a message goes. `Ok(None)`: nowhere yet (per-session mode, the session's own
    /// backend is not ready: a request gets `before_initialize`'s answer, a notification is
    /// dropped). A Legacy request in a session that has ended is `SessionNotFound`: it must
    /// never fall through to the shared backend.
    pub(crate) fn resolve(
        &self,
        from: From<'_>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Option<Route>, CoreError> {
        let (entry, name) = self.choose_backend(&from, method, params)?;
        let route = |via, upstream| {
            Some(Route {
                backend: entry.id.clone(),
                upstream,
                via,
                name: name.clone(),
            })
        };
        let shared = || entry.backend.handle.clone();
        let per_session_backend = self.per_session.for_backend(&entry.id).is_some();
        Ok(match from {
            From::Request(Some(sid)) | From::Fanout(Some(sid), _) => {
                let per_session = per_session_backend;
                let own = self
                    .registry
                    .sessions
                    .own_for_requests(sid.as_str(), &entry.id)?
                    .ok_or(per_session);
                match own {
                    Ok(own) => route(Via::Own, own),
                    Err(true) => None,
                    Err(false) => route(Via::Shared, shared()),
                }
            }
            From::Notification(Some(sid)) => match self.own_upstream(sid, &entry.id) {
                Some(own) => route(Via::Own, own),
                // Per-session mode: a session's traffic never reaches a process others use.
                None if per_session_backend => None,
                None => route(Via::Shared, shared()),
            },
            From::Cancel(sid, _) => match self.own_upstream(sid, &entry.id) {
                Some(own) => route(Via::Own, own),
                // Per-session mode: none of the session's requests went to the shared process,
                // so neither does a cancellation (not even a gateway-minted key of it).
                None if per_session_backend => None,
                None => route(Via::Shared, shared()),
            },
            From::Request(None)
            | From::Fanout(None, _)
            | From::Notification(None)
            | From::Modern
            | From::Initialize => route(Via::Shared, shared()),
            From::Teardown(_) => route(Via::Shared, shared()),
            From::Gateway(_) => {
                let internal = entry.backend.internal.clone();
                route(Via::Internal, internal.unwrap_or_else(shared))
            }
            From::Started(_, upstream) => route(Via::Started, upstream),
        })
    }

    /// Which backend: the one a follow-up names (it was routed before), else the set's
    /// primary, the only one there is. `method` and `params` are where an exposed name or
    /// URI will pick among many.
    pub(crate) fn choose_backend(
        &self,
        from: &From<'_>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(Arc<BackendEntry>, Name), CoreError> {
        let named = match from {
            From::Cancel(_, b)
            | From::Gateway(b)
            | From::Teardown(b)
            | From::Started(b, _)
            | From::Fanout(_, b) => Some(*b),
            From::Request(_) | From::Notification(_) | From::Modern | From::Initialize => None,
        };
        let (id, name) = match (named, self.vmcp()) {
            (Some(id), _) => (id.clone(), Name::AsClient),
            // Aggregating: a request goes where the merged lists say its name, URI or
            // reference is served, under the backend's own name. Notifications and the
            // handshake concern the primary only (shared backends: the gateway's own).
            (None, Some(vmcp)) if matches!(from, From::Request(_) | From::Modern) => {
                let pick = vmcp.pick(method, params)?;
                (pick.backend, pick.name)
            }
            (None, _) => {
                tracing::trace!(
                    method,
                    has_params = params.is_some(),
                    "routed to the primary"
                );
                return Ok((self.backends.primary(), Name::AsClient));
            }
        };
        let entry = self
            .backends
            .get(&id)
            .ok_or_else(|| CoreError::UnknownBackend(id.clone()))?;
        Ok((entry, name))
    }

    /// The session's own upstream on `backend`: `run`'s while its session handshakes too
    /// (the client's own notifications go to it), one opened on first use once handshaken (a
    /// session that has ended has none).
    fn own_upstream(&self, session: &SessionId, backend: &BackendId) -> Option<Upstream> {
        self.registry.sessions.ready_own(session.as_str(), backend)
    }

    /// The entry of a route's backend (routes name only backends of the set).
    pub(crate) fn backend_of(&self, route: &Route) -> Result<Arc<BackendEntry>, CoreError> {
        self.backends
            .get(&route.backend)
            .ok_or_else(|| CoreError::UnknownBackend(route.backend.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use switchboard_upstream::{InboundSink, StdioConfig, UpstreamError, UpstreamOwner};

    use super::*;
    use crate::per_session::SpawnBackend;
    use crate::session::OwnBackend;
    use crate::{Backend, BackendEra, BackendInfo, Backends, GatewayConfig, Principal, Registry};

    /// `cat`: a process that is alive, reads and never answers; told apart by its pid.
    fn cat(sink: Arc<dyn InboundSink>) -> (Upstream, UpstreamOwner) {
        switchboard_upstream::spawn_stdio(&StdioConfig::new("cat", vec![]), sink).expect("cat")
    }

    #[derive(Debug)]
    struct Cats;

    impl SpawnBackend for Cats {
        fn spawn(
            &self,
            sink: Arc<dyn InboundSink>,
        ) -> Result<(Upstream, UpstreamOwner), UpstreamError> {
            Ok(cat(sink))
        }
    }

    struct Fixture {
        gateway: Arc<Gateway>,
        registry: Arc<Registry>,
        shared: u32,
        internal: Option<u32>,
        owners: Vec<UpstreamOwner>,
    }

    impl Fixture {
        fn new(with_internal: bool) -> Fixture {
            let config = GatewayConfig::default();
            let registry = Registry::new(&config);
            let (handle, shared) = cat(registry.sink());
            let mut owners = vec![shared];
            let internal = with_internal.then(|| {
                let (internal, owner) = cat(registry.sink());
                owners.push(owner);
                internal
            });
            let backend = Backend {
                info: BackendInfo {
                    protocol_version: "2025-11-25".into(),
                    capabilities: json!({}),
                    server_info: json!({"name": "cat"}),
                    instructions: None,
                    era: BackendEra {
                        legacy: true,
                        modern: false,
                    },
                },
                internal: internal.clone(),
                handle: handle.clone(),
            };
            let gateway = Gateway::new(Backends::single(backend), registry.clone(), config);
            Fixture {
                gateway,
                registry,
                shared: handle.pid().expect("pid"),
                internal: internal.and_then(|i| i.pid()),
                owners,
            }
        }

        fn session(&self) -> SessionId {
            self.registry
                .sessions
                .create("2025-11-25", &Principal::anonymous())
                .expect("session")
        }

        /// Gives `session` its own process; returns that process's pid.
        fn own(&mut self, session: &SessionId, initializing: bool) -> u32 {
            let (handle, owner) = cat(self.registry.sink());
            let pid = handle.pid().expect("pid");
            let sessions = &self.registry.sessions;
            let own = OwnBackend::new(handle, owner);
            sessions
                .install_own(session.as_str(), &BackendId::default_id(), own)
                .expect("live session");
            sessions
                .set_initializing(session.as_str(), initializing)
                .expect("live session");
            pid
        }

        /// (via, pid) of where `from` goes; `None` for "nowhere yet".
        fn route(&self, from: From<'_>) -> Option<(Via, u32)> {
            let route = self
                .gateway
                .resolve(from, "tools/call", None)
                .expect("routed")?;
            assert_eq!(route.backend, BackendId::default_id());
            assert_eq!(route.name, Name::AsClient);
            Some((route.via, route.upstream.pid().expect("pid")))
        }

        async fn stop(self) {
            for ended in self.registry.sessions.drain() {
                self.gateway.release(ended).await;
            }
            for owner in self.owners {
                owner.shutdown(Duration::from_secs(2)).await;
            }
        }
    }

    #[tokio::test]
    async fn shared_mode_routes_every_client_to_the_shared_handle() {
        let f = Fixture::new(false);
        let sid = f.session();
        let shared = Some((Via::Shared, f.shared));
        assert_eq!(f.route(From::Request(None)), shared);
        assert_eq!(f.route(From::Request(Some(&sid))), shared);
        assert_eq!(f.route(From::Notification(Some(&sid))), shared);
        assert_eq!(f.route(From::Modern), shared);
        assert_eq!(f.route(From::Initialize), shared);
        let id = BackendId::default_id();
        assert_eq!(f.route(From::Cancel(&sid, &id)), shared);
        assert_eq!(f.route(From::Teardown(&id)), shared);
        // Without a handle of its own, the gateway's requests use the shared one.
        assert_eq!(f.route(From::Gateway(&id)), Some((Via::Internal, f.shared)));
        f.stop().await;
    }

    #[tokio::test]
    async fn an_ended_session_is_not_found_and_never_falls_through() {
        let f = Fixture::new(false);
        let sid = f.session();
        drop(
            f.registry
                .sessions
                .remove_any(sid.as_str())
                .expect("removed"),
        );
        let err = f
            .gateway
            .resolve(From::Request(Some(&sid)), "tools/call", None)
            .expect_err("ended session");
        assert!(matches!(err, CoreError::SessionNotFound), "{err}");
        // A notification of an ended session is no request to refuse: shared mode sends it on.
        let shared = Some((Via::Shared, f.shared));
        assert_eq!(f.route(From::Notification(Some(&sid))), shared);
        f.stop().await;
    }

    #[tokio::test]
    async fn per_session_mode_uses_the_sessions_own_process_or_nothing() {
        let mut f = Fixture::new(false);
        f.gateway.enable_per_session(Arc::new(Cats));
        let sid = f.session();
        // No process yet: nowhere (the shared process is other sessions').
        assert_eq!(f.route(From::Request(Some(&sid))), None);
        assert_eq!(f.route(From::Notification(Some(&sid))), None);
        let default = BackendId::default_id();
        assert_eq!(f.route(From::Cancel(&sid, &default)), None);
        // Sessionless requests keep the shared handle.
        assert_eq!(f.route(From::Request(None)), Some((Via::Shared, f.shared)));
        // Handshaking: requests wait for it, notifications (the client's own) go to it.
        let own = f.own(&sid, true);
        assert_eq!(f.route(From::Request(Some(&sid))), None);
        assert_eq!(
            f.route(From::Notification(Some(&sid))),
            Some((Via::Own, own))
        );
        f.registry
            .sessions
            .set_initializing(sid.as_str(), false)
            .expect("live");
        assert_eq!(f.route(From::Request(Some(&sid))), Some((Via::Own, own)));
        let id = BackendId::default_id();
        assert_eq!(f.route(From::Cancel(&sid, &id)), Some((Via::Own, own)));
        // Another session's process is never this one's.
        let other = f.session();
        let theirs = f.own(&other, false);
        assert_ne!(theirs, own);
        assert_eq!(
            f.route(From::Request(Some(&other))),
            Some((Via::Own, theirs))
        );
        f.stop().await;
    }

    #[tokio::test]
    async fn gateway_requests_use_the_internal_handle_and_started_ones_their_own() {
        let f = Fixture::new(true);
        let id = BackendId::default_id();
        let internal = f.internal.expect("internal pid");
        assert_ne!(internal, f.shared);
        assert_eq!(f.route(From::Gateway(&id)), Some((Via::Internal, internal)));
        let (started, owner) = cat(f.registry.sink());
        let pid = started.pid().expect("pid");
        assert_eq!(
            f.route(From::Started(&id, started)),
            Some((Via::Started, pid))
        );
        owner.shutdown(Duration::from_secs(2)).await;
        f.stop().await;
    }

    #[tokio::test]
    async fn a_backend_outside_the_set_is_refused() {
        let f = Fixture::new(false);
        let sid = f.session();
        let stranger: BackendId = "elsewhere".parse().expect("valid name");
        for from in [
            From::Gateway(&stranger),
            From::Teardown(&stranger),
            From::Cancel(&sid, &stranger),
        ] {
            let err = f
                .gateway
                .resolve(from, "tools/call", None)
                .expect_err("unknown backend");
            assert!(matches!(err, CoreError::UnknownBackend(ref b) if b == &stranger));
        }
        f.stop().await;
    }
}
