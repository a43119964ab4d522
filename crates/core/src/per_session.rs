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
use switchboard_wire::{method, Message, RequestId};

use crate::BackendId;
use crate::CoreError;

mod lazy;
mod legacy;
mod own;
mod sink;

pub(crate) use lazy::{remember_client_init, Opener};
pub(crate) use own::{Keep, OwnUpstreams};
pub(crate) use sink::{client_response, Ends, OnClose, SessionSink};

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

    /// Whether a Legacy session can receive a backend's log messages: only through an
    /// upstream of its own (per-session). A shared backend's `notifications/message` names
    /// no session, so it is dropped (attribution or nothing); where no backend that logs is
    /// per-session, the gateway's `initialize` does not offer `logging` at all.
    pub(crate) fn delivers_logs(&self, backends: &crate::Backends) -> bool {
        backends.iter().any(|e| {
            e.info().capabilities.get("logging").is_some() && self.for_backend(&e.id).is_some()
        })
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

/// The `protocolVersion` of a backend's `initialize` answer: the version the client was told.
pub(crate) fn answered_version(response: &[u8]) -> Option<String> {
    Message::parse(response).ok().and_then(|m| {
        m.result
            .and_then(|r| switchboard_wire::object_member(r, "protocolVersion"))
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    })
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
