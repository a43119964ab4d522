//! What keeps the served backends running, per backend: a shared process's supervisor (it
//! restarts the process after a crash and owns its shutdown) and the gateway's own upstream
//! session on a remote. Owned by `serve` (or its reload worker, which adds and retires
//! entries); everything in it is stopped, in order, on shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use switchboard_core::{BackendId, Gateway};
use switchboard_upstream::UpstreamOwner;

use crate::start_backends::Supervised;

/// How long a restarted process's predecessor gets to exit.
const RESTART_WAIT: Duration = Duration::from_secs(5);

/// See the module docs.
pub(crate) struct RunningSet {
    gateway: Arc<Gateway>,
    /// Cancelled as soon as the gateway is told to stop (before it drains): a backend that
    /// exits from then on is not restarted.
    stopping: CancellationToken,
    /// One keeper per process (several for a replicated backend).
    supervisors: HashMap<BackendId, Vec<Keeper>>,
    internals: HashMap<BackendId, UpstreamOwner>,
}

/// A process's supervisor: how to stop it, its task, and whether its backend left the set
/// (a retired process that crashes while draining is not revived into the set's entry of
/// the same name, which may be its successor).
struct Keeper {
    stop: CancellationToken,
    task: JoinHandle<()>,
    retired: Arc<AtomicBool>,
}

/// One backend's keepers, taken out of the set (it left it): stopped once drained.
pub(crate) struct Retired {
    supervisor: Vec<Keeper>,
    internal: Option<UpstreamOwner>,
}

impl RunningSet {
    pub(crate) fn new(gateway: Arc<Gateway>, stopping: CancellationToken) -> Self {
        RunningSet {
            gateway,
            stopping,
            supervisors: HashMap::new(),
            internals: HashMap::new(),
        }
    }

    /// Takes over the keepers of newly started backends (a supervisor starts for each
    /// process).
    pub(crate) fn adopt(
        &mut self,
        processes: Vec<(BackendId, Supervised)>,
        internals: Vec<(BackendId, UpstreamOwner)>,
    ) {
        let mut adopted: HashMap<BackendId, Vec<Keeper>> = HashMap::new();
        for (id, p) in processes {
            let keeper = self.keeper(&id, p);
            adopted.entry(id).or_default().push(keeper);
        }
        for (id, keepers) in adopted {
            // A name adopted twice without a retire in between: never leave a keeper
            // without an owner.
            for old in self.supervisors.insert(id, keepers).unwrap_or_default() {
                old.retired.store(true, Ordering::Release);
                old.stop.cancel();
            }
        }
        self.internals.extend(internals);
    }

    /// Starts the supervisor of one of `id`'s processes.
    fn keeper(&self, id: &BackendId, p: Supervised) -> Keeper {
        let stop = CancellationToken::new();
        let revive = self.gateway.clone();
        // The backend as the set holds it now (adopted after the reshape that installed it):
        // a reload that puts another under the same name is not revived by this one.
        let instance = self.gateway.upkeep().instance_of(id);
        let retired = Arc::new(AtomicBool::new(false));
        let gone = retired.clone();
        let replica = p.replica;
        let task = tokio::spawn(switchboard_upstream::supervise(
            p.handle,
            p.config,
            p.sink,
            p.process,
            switchboard_upstream::Stop {
                now: stop.clone(),
                gateway: self.stopping.clone(),
            },
            RESTART_WAIT,
            move |standby| {
                let gateway = revive.clone();
                let instance = instance.clone();
                let gone = gone.clone();
                async move {
                    // Retired: it only drains; its stop is on the way.
                    let ready = match &instance {
                        Some(instance) if !gone.load(Ordering::Acquire) => {
                            (gateway.upkeep())
                                .revive_backend_instance(instance, replica, standby)
                                .await
                        }
                        _ => false,
                    };
                    // Once installed (a replica runs again as its handle reaches the new
                    // process): its breaker half-open (`supervise`).
                    let instance = instance.filter(|_| ready)?;
                    Some(move || gateway.upkeep().restarted(&instance))
                }
            },
        ));
        Keeper {
            stop,
            task,
            retired,
        }
    }

    /// Takes `id`'s keepers out of the set.
    pub(crate) fn retire(&mut self, id: &BackendId) -> Retired {
        let supervisor = self.supervisors.remove(id).unwrap_or_default();
        for k in &supervisor {
            k.retired.store(true, Ordering::Release);
        }
        Retired {
            supervisor,
            internal: self.internals.remove(id),
        }
    }

    /// Ends the gateway's own upstream sessions, then stops every process (pending calls
    /// fail with the backend's exit, so every request gets an answer).
    pub(crate) async fn shutdown(self) {
        for (_, internal) in self.internals {
            internal.shutdown(Duration::from_secs(2)).await;
        }
        for k in self.supervisors.values().flatten() {
            k.stop.cancel();
        }
        for k in self.supervisors.into_values().flatten() {
            let _ = k.task.await;
        }
    }
}

impl Retired {
    /// Stops what kept the backend running.
    pub(crate) async fn stop(self) {
        if let Some(internal) = self.internal {
            internal.shutdown(Duration::from_secs(2)).await;
        }
        for k in &self.supervisor {
            k.stop.cancel();
        }
        for k in self.supervisor {
            let _ = k.task.await;
        }
    }
}
