//! Session expiry's clock, and the background work the gateway owns.
//!
//! The reaper (`Gateway::run_reaper`, on [`run`]'s clock) removes expired sessions from the
//! table at once (their ids stop working), but tearing one down can take seconds: a
//! per-session process gets a shutdown grace, a shared backend's unsubscribes wait for their
//! answers. Teardowns therefore run in the gateway's [`Background`] set, concurrently (up to
//! [`CONCURRENT_CLEANUPS`], [`Background::spawn_cleanup`]), so a thousand expiries do not
//! stall the reaper for a thousand graces. The set is the tasks' owner: joined, bounded, on
//! shutdown ([`Background::join`]) and aborted when the gateway is dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Most session teardowns running at once; more wait for a slot. Bounds the processes being
/// stopped and the unsubscribes queued on the shared backend at one time.
pub(crate) const CONCURRENT_CLEANUPS: usize = 64;

/// The [`CONCURRENT_CLEANUPS`] slots. Session cleanup's, not per-session mode's: a shared-mode
/// teardown queues unsubscribes on the shared backend, and those are bounded too.
#[derive(Debug, Clone)]
struct CleanupSlots(Arc<Semaphore>);

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

/// Work that outlives the code that started it: session cleanups (reaper, HTTP+SSE stream
/// closing, abandoned per-session `initialize`), era re-probes, a peer's ended session.
/// Owned by the gateway: joined (bounded) on shutdown, and dropping it aborts whatever is
/// left. Session cleanups also take one of the cleanup slots.
#[derive(Debug, Default)]
pub(crate) struct Background {
    tasks: parking_lot::Mutex<JoinSet<()>>,
    /// Bounds the session cleanups running at once.
    slots: CleanupSlots,
}

impl Background {
    /// Runs `task` in the set.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.lock().spawn(task);
    }

    /// Runs a session's teardown in the set once it gets a cleanup slot (finished work is
    /// cleared out of the set first). Callable from synchronous code, drop included: with no
    /// runtime (teardown) nothing runs, and dropping `cleanup` is the cleanup (a session's
    /// process, if any, is killed on drop, and the shared backend goes with the gateway).
    pub(crate) fn spawn_cleanup(&self, cleanup: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let slots = self.slots.clone();
        let mut tasks = self.tasks.lock();
        while tasks.try_join_next().is_some() {}
        tasks.spawn_on(
            async move {
                // The semaphore is never closed; without a permit the cleanup still runs.
                let _slot = slots.take().await;
                cleanup.await;
            },
            &runtime,
        );
    }

    /// Clears finished work out of the set (it leaves its results there until joined).
    pub(crate) fn reap_finished(&self) {
        let mut tasks = self.tasks.lock();
        while tasks.try_join_next().is_some() {}
    }

    /// Waits up to `grace` for background work (cleanups still stopping processes), then
    /// aborts the rest (an aborted cleanup kills its process on drop). Gateway shutdown.
    pub(crate) async fn join(&self, grace: Duration) {
        let mut running = std::mem::take(&mut *self.tasks.lock());
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

/// The reaper's clock, until `stop` fires: `expire` every `tick` (at least 100 ms; idle
/// sessions), and `held` every five seconds (what expires on its own, shorter clock: parked
/// MRTR calls, idle partitions, finished background work).
pub(crate) async fn run(
    tick: Duration,
    stop: CancellationToken,
    held: impl Fn(),
    expire: impl Fn(),
) {
    let mut interval = tokio::time::interval(tick.max(Duration::from_millis(100)));
    let mut held_tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = held_tick.tick() => held(),
            _ = interval.tick() => expire(),
        }
    }
}
