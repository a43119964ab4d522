//! The routing registries the request path and every backend's inbound path share: sessions,
//! progress routes, Modern listen routes, the drop log, and per backend the tables its sink
//! routes by (see [`BackendTables`]). What the sink does with a message is `dispatch`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use switchboard_upstream::InboundSink;

use crate::dispatch::Dispatcher;
use crate::drop_log::DropLog;
use crate::modern_listen::ModernListeners;
use crate::progress::ProgressRoutes;
use crate::session::Sessions;
use crate::subscription::Subscriptions;
use crate::BackendId;

/// The routing registries shared by the request path and the backends' inbound paths.
#[derive(Debug)]
pub struct Registry {
    pub(crate) sessions: Sessions,
    pub(crate) progress: ProgressRoutes,
    pub(crate) listeners: ModernListeners,
    pub(crate) drops: DropLog,
    /// How many listens each principal has watching tasks (`tasks::watch`).
    pub(crate) watchers: crate::tasks::watch::Watchers,
    /// Per backend: what its inbound path routes by or invalidates (see [`BackendTables`]).
    /// Read on every Modern `tools/call` (its designations) and written once per backend id:
    /// a read lock, so requests on many cores do not queue behind one another here.
    per_backend: RwLock<HashMap<BackendId, Arc<BackendTables>>>,
    /// Replicas on one session store: where a message for a session whose listen stream is
    /// held by another replica goes ([`PeerDelivery`], `session_store`). Set once, after start.
    pub(crate) peers: std::sync::OnceLock<Arc<dyn PeerDelivery>>,
    /// This replica's name, with replicas: the task handles minted here carry it, so a
    /// replica receiving one it did not mint sends the request here (`session_store::home`).
    /// Set before any backend's tables are made.
    replica: std::sync::OnceLock<String>,
}

/// Replicas on one session store: the way to the replica holding a session's listen stream.
/// Only messages already attributed to one session are forwarded, with that session's id;
/// the receiving replica delivers them to that session's attached stream or nowhere
/// (`SessionStore::deliver_from_peer`), and never forwards them again.
pub trait PeerDelivery: Send + Sync + std::fmt::Debug {
    /// Hands `data` for `session`'s listen stream on (never blocks; bounded, best effort
    /// like every server-to-client notification).
    fn forward(&self, session: &str, data: bytes::Bytes);
    /// Tells every replica that `session` was ended (DELETE): one holding it ends it
    /// (`Gateway::end_from_peer`).
    fn ended(&self, session: &str);
    /// Tells the other replicas that a backend here changed list `name` (a `list_changed`
    /// method): they pass it, payload-free, to the streams they hold.
    fn list_changed(&self, name: &'static str);
}

/// The tables of one backend that both its sink and the request path use: resource
/// subscriptions (URI → sessions), task owners (task id → owner) and `Mcp-Param-*`
/// designations. Keyed by backend because a URI or a task id means something only at the
/// backend that issued it. Held here rather than in `Backends` because a backend's sink
/// exists before the backend is connected.
#[derive(Debug, Default)]
pub(crate) struct BackendTables {
    pub(crate) subs: Subscriptions,
    pub(crate) tasks: crate::tasks::TaskOwners,
    /// Questions its tasks asked that wait for a sessionless owner's `tasks/update`.
    pub(crate) questions: crate::tasks::TaskQuestions,
    pub(crate) tool_headers: crate::tool_headers::ToolHeaders,
    /// Which of its lists the backend said changed since the gateway last fetched them
    /// (aggregating: `vmcp` fetches those again).
    pub(crate) lists_changed: ListsChanged,
}

impl BackendTables {
    /// Tables whose task handles name `replica` (with replicas).
    fn at_replica(replica: Option<&String>) -> Self {
        BackendTables {
            tasks: crate::tasks::TaskOwners::at_replica(replica.cloned()),
            ..BackendTables::default()
        }
    }
}

/// One flag per list kind, set by the backend's `list_changed` and taken by the fetch.
#[derive(Debug, Default)]
pub(crate) struct ListsChanged([std::sync::atomic::AtomicBool; 4]);

impl ListsChanged {
    /// The backend announced `notification` (a `list_changed` method; others are ignored).
    pub(crate) fn mark(&self, notification: &str) {
        use switchboard_wire::method;
        let kinds: &[usize] = match notification {
            method::TOOLS_LIST_CHANGED => &[0],
            method::PROMPTS_LIST_CHANGED => &[1],
            // Templates have no notification of their own.
            method::RESOURCES_LIST_CHANGED => &[2, 3],
            _ => &[],
        };
        for k in kinds {
            self.0[*k].store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Whether list `kind` (index in `vmcp::KINDS`) changed since it was last taken.
    pub(crate) fn is_set(&self, kind: usize) -> bool {
        self.0
            .get(kind)
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Clears `kind`'s flag (a fetch is starting).
    pub(crate) fn take(&self, kind: usize) -> bool {
        self.0
            .get(kind)
            .is_some_and(|f| f.swap(false, std::sync::atomic::Ordering::AcqRel))
    }
}

impl Registry {
    /// Empty registries around `sessions` (`GatewayConfig::registry` builds them from the
    /// gateway's limits).
    pub fn new(sessions: Sessions) -> Arc<Self> {
        Arc::new(Registry {
            sessions,
            progress: ProgressRoutes::default(),
            listeners: ModernListeners::default(),
            drops: DropLog::default(),
            watchers: crate::tasks::watch::Watchers::default(),
            per_backend: RwLock::new(HashMap::new()),
            peers: std::sync::OnceLock::new(),
            replica: std::sync::OnceLock::new(),
        })
    }

    /// This replica's name, when there are replicas.
    pub(crate) fn replica_id(&self) -> Option<&str> {
        self.replica.get().map(String::as_str)
    }

    /// Names this replica in the task handles minted from now on (`GatewayConfig::registry`,
    /// before any backend's tables exist).
    pub(crate) fn at_replica(&self, replica: &str) {
        let _ = self.replica.set(replica.to_owned());
    }

    /// The sink to give the `default` backend's reader (see [`Self::sink_for`]).
    pub fn sink(self: &Arc<Self>) -> Arc<dyn InboundSink> {
        self.sink_for(&BackendId::default_id())
    }

    /// The sink to give backend `id`'s reader: what it delivers is routed as `id`'s.
    pub fn sink_for(self: &Arc<Self>, id: &BackendId) -> Arc<dyn InboundSink> {
        Arc::new(Dispatcher {
            registry: self.clone(),
            backend: id.clone(),
            tables: self.tables(id),
        })
    }

    /// Backend `id`'s tables (made on first use: ids come only from the gateway's own set).
    pub(crate) fn tables(&self, id: &BackendId) -> Arc<BackendTables> {
        if let Some(tables) = self.per_backend.read().get(id) {
            return tables.clone();
        }
        (self.per_backend.write())
            .entry(id.clone())
            .or_insert_with(|| Arc::new(BackendTables::at_replica(self.replica.get())))
            .clone()
    }

    /// Every backend's tables.
    pub(crate) fn all_tables(&self) -> Vec<Arc<BackendTables>> {
        self.per_backend.read().values().cloned().collect()
    }

    /// The backend holding the task `owner` knows as `handle`, and the backend's own id for
    /// it (`None`: not `owner`'s, or no such handle anywhere — the two look alike).
    pub(crate) fn find_task(
        &self,
        owner: Option<&crate::tasks::Owner>,
        handle: &str,
    ) -> Option<(BackendId, String)> {
        let tables: Vec<_> = self
            .per_backend
            .read()
            .iter()
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect();
        tables
            .into_iter()
            .find_map(|(id, t)| Some((id, t.tasks.task_for(owner, handle)?)))
    }

    /// The backends where `owner` may have tasks (what a merged `tasks/list` asks).
    pub(crate) fn with_tasks_of(&self, owner: &crate::tasks::Owner) -> Vec<BackendId> {
        let mut ids: Vec<BackendId> = (self.per_backend.read().iter())
            .filter(|(_, t)| t.tasks.has_any(owner))
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        ids
    }
}
