//! What keeps the served backends running, per backend: a shared process's supervisor (it
//! restarts the process after a crash and owns its shutdown) and the gateway's own upstream
//! session on a remote. Owned by `serve` (or its reload worker, which adds and retires
//! entries); everything in it is stopped, in order, on shutdown.

use std::collections::HashMap;
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
    supervisors: HashMap<BackendId, (CancellationToken, JoinHandle<()>)>,
    internals: HashMap<BackendId, UpstreamOwner>,
}

/// One backend's keepers, taken out of the set (it left it): stopped once drained.
pub(crate) struct Retired {
    supervisor: Option<(CancellationToken, JoinHandle<()>)>,
    internal: Option<UpstreamOwner>,
}

impl RunningSet {
    pub(crate) fn new(gateway: Arc<Gateway>) -> Self {
        RunningSet {
            gateway,
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
        for (id, p) in processes {
            let stop = CancellationToken::new();
            let revive = self.gateway.clone();
            let named = id.clone();
            let task = tokio::spawn(switchboard_upstream::supervise(
                p.handle,
                p.config,
                p.sink,
                p.process,
                stop.clone(),
                RESTART_WAIT,
                move |standby| {
                    let gateway = revive.clone();
                    let id = named.clone();
                    async move { gateway.revive_backend_named(&id, standby).await }
                },
            ));
            if let Some(old) = self.supervisors.insert(id, (stop, task)) {
                // A name adopted twice without a retire in between: never leave a keeper
                // without an owner.
                old.0.cancel();
            }
        }
        self.internals.extend(internals);
    }

    /// Takes `id`'s keepers out of the set.
    pub(crate) fn retire(&mut self, id: &BackendId) -> Retired {
        Retired {
            supervisor: self.supervisors.remove(id),
            internal: self.internals.remove(id),
        }
    }

    /// Ends the gateway's own upstream sessions, then stops every process (pending calls
    /// fail with the backend's exit, so every request gets an answer).
    pub(crate) async fn shutdown(self) {
        for (_, internal) in self.internals {
            internal.shutdown(Duration::from_secs(2)).await;
        }
        for (stop, _) in self.supervisors.values() {
            stop.cancel();
        }
        for (_, (_, task)) in self.supervisors {
            let _ = task.await;
        }
    }
}

impl Retired {
    /// Stops what kept the backend running.
    pub(crate) async fn stop(self) {
        if let Some(internal) = self.internal {
            internal.shutdown(Duration::from_secs(2)).await;
        }
        if let Some((stop, task)) = self.supervisor {
            stop.cancel();
            let _ = task.await;
        }
    }
}
