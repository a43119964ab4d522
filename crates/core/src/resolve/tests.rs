use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard_upstream::{InboundSink, StdioConfig, UpstreamError, UpstreamOwner};

use super::*;
use crate::per_session::SpawnBackend;
use crate::session::OwnBackend;
use crate::{Backend, BackendEra, BackendInfo, Principal, Registry};

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

/// What a resolver reads, built without a gateway: one backend (`cat`), no aggregation.
struct Fixture {
    backends: Backends,
    per_session: Spawner,
    registry: Arc<Registry>,
    shared: u32,
    internal: Option<u32>,
    owners: Vec<UpstreamOwner>,
}

impl Fixture {
    fn new(with_internal: bool) -> Fixture {
        let registry = Registry::new(crate::session::Sessions::new(
            100_000,
            std::time::Duration::from_secs(1800),
        ));
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
            legacy_unprobed: false,
            handle: handle.clone(),
        };
        Fixture {
            backends: Backends::single(backend),
            per_session: Spawner::default(),
            registry,
            shared: handle.pid().expect("pid"),
            internal: internal.and_then(|i| i.pid()),
            owners,
        }
    }

    fn resolver(&self) -> Resolver<'_> {
        Resolver {
            backends: &self.backends,
            vmcp: None,
            per_session: &self.per_session,
            sessions: &self.registry.sessions,
        }
    }

    /// `run --isolation per-session`: every session gets its own `cat`.
    fn enable_per_session(&self) {
        let spawner: Arc<dyn SpawnBackend> = Arc::new(Cats);
        (self.per_session).enable(true, vec![(BackendId::default_id(), spawner)]);
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
            .resolver()
            .resolve(from, "tools/call", None)
            .expect("routed")?;
        assert_eq!(route.backend, BackendId::default_id());
        assert_eq!(route.name, Name::AsClient);
        Some((route.via, route.upstream.pid().expect("pid")))
    }

    /// The gateway's own route to `id` (`Route::internal`, what `Sender::internal_call`
    /// sends on).
    fn internal_route(&self, id: &BackendId) -> (Via, u32) {
        let entry = self.backends.get(id).expect("in the set");
        let route = crate::destination::Route::internal(&entry);
        assert_eq!(route.backend, *id);
        assert_eq!(route.name, Name::AsClient);
        (route.via, route.upstream.pid().expect("pid"))
    }

    async fn stop(self) {
        for ended in self.registry.sessions.drain() {
            for process in ended.processes {
                process.shutdown(Duration::from_secs(2)).await;
            }
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
    assert_eq!(f.internal_route(&id), (Via::Internal, f.shared));
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
        .resolver()
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
    f.enable_per_session();
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
    assert_eq!(f.internal_route(&id), (Via::Internal, internal));
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
    for from in [From::Teardown(&stranger), From::Cancel(&sid, &stranger)] {
        let err = f
            .resolver()
            .resolve(from, "tools/call", None)
            .expect_err("unknown backend");
        assert!(matches!(err, CoreError::UnknownBackend(ref b) if b == &stranger));
    }
    f.stop().await;
}
