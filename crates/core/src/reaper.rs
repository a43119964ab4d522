//! Session expiry and the background teardown of ended sessions.
//!
//! The reaper removes expired sessions from the table at once (their ids stop working), but
//! tearing one down can take seconds: a per-session process gets a shutdown grace, a shared
//! backend's unsubscribes wait for their answers. Teardowns therefore run in the gateway's
//! `background` set, concurrently (up to [`CONCURRENT_CLEANUPS`]), so a thousand expiries do
//! not stall the reaper for a thousand graces. The set is the tasks' owner: joined, bounded,
//! on shutdown ([`Gateway::join_background`]) and aborted when the gateway is dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::session::EndReason;
use crate::session::Ended;
use crate::Gateway;

/// Most session teardowns running at once; more wait for a slot. Bounds the processes being
/// stopped and the unsubscribes queued on the shared backend at one time.
pub(crate) const CONCURRENT_CLEANUPS: usize = 64;

/// The [`CONCURRENT_CLEANUPS`] slots. Session cleanup's, not per-session mode's: a shared-mode
/// teardown queues unsubscribes on the shared backend, and those are bounded too.
#[derive(Debug, Clone)]
pub(crate) struct CleanupSlots(Arc<Semaphore>);

impl Default for CleanupSlots {
    fn default() -> Self {
        CleanupSlots(Arc::new(Semaphore::new(CONCURRENT_CLEANUPS)))
    }
}

impl CleanupSlots {
    /// Waits for a slot, held until the permit drops. `None` only if the semaphore were
    /// closed, which it never is.
    async fn take(self) -> Option<OwnedSemaphorePermit> {
        self.0.acquire_owned().await.ok()
    }
}

impl Gateway {
    /// Expires idle sessions every quarter TTL until `stop` fires.
    pub async fn run_reaper(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = self.registry.sessions.ttl() / 4;
        if self.is_per_session() {
            tick = tick.min(self.config.listen_grace / 2);
        }
        let mut interval = tokio::time::interval(tick.max(Duration::from_millis(100)));
        // Parked MRTR calls expire on their own, shorter clock.
        let mut held = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = held.tick() => {
                    self.mrtr.reap_held_calls();
                    self.reap_partitions();
                    // Finished background work leaves its results in the set until joined.
                    let mut background = self.background.lock();
                    while background.try_join_next().is_some() {}
                }
                _ = interval.tick() => self.reap_sessions(),
            }
        }
    }

    fn reap_sessions(self: &Arc<Self>) {
        for ended in self.registry.sessions.reap() {
            debug!("session expired");
            self.spawn_cleanup(ended, EndReason::Expired);
        }
        if self.is_per_session() {
            let grace = self.config.listen_grace;
            for ended in self.registry.sessions.reap_lost_listeners(grace) {
                debug!("session's listen stream lost past the grace period");
                self.spawn_cleanup(ended, EndReason::ListenLost);
            }
        }
    }

    /// Audits an ended session's end at once, then releases its state in the background (see
    /// the module docs). Callable from synchronous code, drop included.
    pub(crate) fn spawn_cleanup(self: &Arc<Self>, ended: Ended, reason: EndReason) {
        self.audit_end(&ended, reason);
        // The session no longer counts against `--max-sessions`, but its process runs until
        // its teardown gets a slot: ask it to exit now, so a well-behaved backend is gone
        // before then and processes cannot pile up behind the slots.
        for process in &ended.processes {
            process.request_stop();
        }
        // With no runtime (teardown), dropping `ended` is the cleanup: its process, if any, is
        // killed on drop, and the shared backend goes with the gateway.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let gateway = self.clone();
        let slots = self.cleanup_slots.clone();
        let mut background = self.background.lock();
        while background.try_join_next().is_some() {}
        background.spawn_on(
            async move {
                // The semaphore is never closed; without a permit the cleanup still runs.
                let _slot = slots.take().await;
                gateway.release(ended).await;
            },
            &runtime,
        );
    }

    /// Waits up to `grace` for background work (cleanups still stopping processes), then
    /// aborts the rest (an aborted cleanup kills its process on drop). Gateway shutdown.
    pub(crate) async fn join_background(&self, grace: Duration) {
        let mut running = std::mem::take(&mut *self.background.lock());
        let joined = tokio::time::timeout(grace, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            debug!(
                left = running.len(),
                "background work still running at shutdown; aborted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use switchboard_upstream::StdioConfig;

    use crate::{Backend, BackendEra, BackendId, BackendInfo, GatewayConfig, Principal, Registry};

    use super::*;

    const SESSIONS: usize = 4;

    /// A shared backend that records every line it receives in `log` and never answers. The
    /// shell stays (`; exit` keeps it from exec-ing `cat`) and holds stdout open: an ended
    /// stdout would mean a dead backend.
    fn silent_backend(
        registry: &Arc<Registry>,
        log: &std::path::Path,
    ) -> (Backend, switchboard_upstream::UpstreamOwner) {
        let script = "cat > \"$0\"; exit".to_owned();
        let config = StdioConfig::new("sh", vec!["-c".into(), script, log.display().to_string()]);
        let (handle, process) =
            switchboard_upstream::spawn_stdio(&config, registry.sink()).expect("spawn sh");
        let backend = Backend {
            handle,
            info: BackendInfo {
                protocol_version: "2025-11-25".into(),
                capabilities: json!({}),
                server_info: json!({"name": "silent"}),
                instructions: None,
                era: BackendEra {
                    legacy: true,
                    modern: false,
                },
            },
            internal: None,
        };
        (backend, process)
    }

    /// Each expired session is the last subscriber of its own URI, so its teardown sends an
    /// upstream unsubscribe and waits (an hour) for an answer that never comes. Torn down one
    /// at a time, the backend would see one unsubscribe; concurrently, it sees all of them.
    #[tokio::test]
    async fn expired_sessions_are_torn_down_concurrently() {
        let log = std::env::temp_dir().join(format!("sb-reaper-{}", crate::route::random_hex()));
        let config = GatewayConfig {
            session_ttl: Duration::from_millis(1),
            request_timeout: Duration::from_secs(3600),
            ..GatewayConfig::default()
        };
        let registry = Registry::new(&config);
        let (backend, process) = silent_backend(&registry, &log);
        let gateway = Gateway::new(crate::Backends::single(backend), registry.clone(), config);
        for i in 0..SESSIONS {
            let sid = registry
                .sessions
                .create("2025-11-25", &Principal::anonymous())
                .expect("session");
            let uri = format!("test://{i}");
            let tables = registry.tables(&BackendId::default_id());
            let lock = tables.subs.lock(&uri).await;
            registry
                .sessions
                .add_subscription(sid.as_str(), &(BackendId::default_id(), uri.clone()))
                .expect("live session");
            tables.subs.add(&lock, sid.as_str());
        }
        let stop = CancellationToken::new();
        let reaper = tokio::spawn(gateway.clone().run_reaper(stop.clone()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let unsubscribes = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("\"resources/unsubscribe\"")
                .count()
        };
        while unsubscribes() < SESSIONS {
            assert!(
                tokio::time::Instant::now() < deadline,
                "teardowns ran one at a time: {} of {SESSIONS} unsubscribes sent",
                unsubscribes()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(unsubscribes(), SESSIONS);
        assert_eq!(gateway.session_count(), 0, "removed from the table at once");
        stop.cancel();
        reaper.await.expect("reaper stops");
        gateway.join_background(Duration::ZERO).await;
        process.shutdown(Duration::from_secs(5)).await;
        let _ = std::fs::remove_file(&log);
    }
}
