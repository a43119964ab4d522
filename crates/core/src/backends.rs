//! The gateway's backends as a set: each named by a [`BackendId`], each with what the request
//! path keeps about it (its [`Backend`]: handle and declared info; whether it answers Modern
//! requests now; the log level it was last set to).
//!
//! `run` builds a set of one ([`Backends::single`], id `default`). Which backend a request
//! goes to is decided only by `resolve`; this module only holds the set. What a backend's
//! *inbound* path also touches (subscriptions, task owners, `Mcp-Param-*` designations) is
//! per backend too, but lives in the `Registry` (`registry::BackendTables`), because the
//! backend's sink exists before the backend is connected and the set is built.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{Backend, BackendId};

/// One backend of the set and what the request path keeps about it.
#[derive(Debug)]
pub(crate) struct BackendEntry {
    pub(crate) id: BackendId,
    /// Handle and declared info.
    pub(crate) backend: Backend,
    /// Whether the backend answers Modern requests *now*: learned at startup, re-learned when
    /// it refuses a Modern request on era grounds or is restarted.
    modern_live: AtomicBool,
    /// The level the backend was last set to (rank); the async lock orders reconciliations.
    pub(crate) log_level: tokio::sync::Mutex<Option<u8>>,
}

impl BackendEntry {
    pub(crate) fn new(id: BackendId, backend: Backend) -> Self {
        let modern = backend.info.era.modern;
        BackendEntry {
            id,
            backend,
            modern_live: AtomicBool::new(modern),
            log_level: tokio::sync::Mutex::new(None),
        }
    }

    /// Whether the gateway keeps tasks the backend creates: not with replicas (the same rule
    /// as `destination::Route::keeps_tasks`, for the backend rather than one route to it).
    pub(crate) fn keeps_tasks(&self) -> bool {
        self.backend.handle.replicas() == 1
    }

    /// Whether Modern requests pass through to this backend (else they are bridged).
    pub(crate) fn modern_now(&self) -> bool {
        self.modern_live.load(Ordering::Relaxed)
    }

    /// Records what a probe learned; returns what was known before.
    pub(crate) fn set_modern(&self, modern: bool) -> bool {
        self.modern_live.swap(modern, Ordering::Relaxed)
    }

    /// The backend's declared info.
    pub(crate) fn info(&self) -> &crate::BackendInfo {
        &self.backend.info
    }
}

/// The set of backends a gateway fronts (never empty). Replaced whole on a hot reload
/// ([`Backends::replace`]): a reader takes the set (or one entry) as it is at that moment, so
/// work that started keeps the entry it routed to, and an entry that stays in the set across
/// a reload is the same `Arc` (its era, log level and handle carry over).
#[derive(Debug)]
pub struct Backends {
    /// In configuration order; the first is the primary (see [`Backends::primary`]).
    entries: crate::snapshot::Snapshot<Vec<Arc<BackendEntry>>>,
    /// Fired after every [`Backends::replace`] (the probes follow the set).
    pub(crate) changed: tokio::sync::Notify,
}

impl Backends {
    fn of(entries: Vec<Arc<BackendEntry>>) -> Self {
        Backends {
            entries: crate::snapshot::Snapshot::new(Arc::new(entries)),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// A set of one backend, named `default` (what `switchboard run` fronts).
    pub fn single(backend: Backend) -> Self {
        Self::of(vec![Arc::new(BackendEntry::new(
            BackendId::default_id(),
            backend,
        ))])
    }

    /// A set of `backends`, in configured order (the first is the primary). Names must be
    /// distinct; `None` for an empty list or a repeated name.
    pub fn new(backends: Vec<(BackendId, Backend)>) -> Option<Self> {
        if !distinct(backends.iter().map(|(id, _)| id)) {
            return None;
        }
        Some(Self::of(
            backends
                .into_iter()
                .map(|(id, b)| Arc::new(BackendEntry::new(id, b)))
                .collect(),
        ))
    }

    /// Puts `entries` in place of the set (hot reload); `false` (nothing changed) for an
    /// empty list or a repeated name.
    pub(crate) fn replace(&self, entries: Vec<Arc<BackendEntry>>) -> bool {
        if !distinct(entries.iter().map(|e| &e.id)) {
            return false;
        }
        self.entries.store(Arc::new(entries));
        self.changed.notify_waiters();
        true
    }

    /// The backend the gateway presents as itself (its `initialize` answer, `server/discover`,
    /// `serverInfo`) and the one the public one-backend accessors report. With one backend,
    /// that one; aggregation will replace what it presents with a merged view.
    pub(crate) fn primary(&self) -> Arc<BackendEntry> {
        // Never empty: every constructor and `replace` keep at least one entry.
        self.entries.load()[0].clone()
    }

    /// The backend named `id`, if the set has it.
    pub(crate) fn get(&self, id: &BackendId) -> Option<Arc<BackendEntry>> {
        self.entries.load().iter().find(|e| &e.id == id).cloned()
    }

    /// Every backend, in configuration order (the set as it is now).
    pub(crate) fn iter(&self) -> std::vec::IntoIter<Arc<BackendEntry>> {
        self.entries.load().as_ref().clone().into_iter()
    }

    /// Whether a backend of the set speaks Modern only, so that its `input_required` is
    /// relayed to a Legacy client as questions (`ClientAsk::may_ask`). Reads the set in place:
    /// asked on every Legacy request's plan.
    pub(crate) fn relays_questions(&self) -> bool {
        self.entries.load().iter().any(|e| !e.info().era.legacy)
    }

    /// The primary backend's eras (for logs and `/stats`).
    pub fn primary_era(&self) -> crate::BackendEra {
        let primary = self.primary();
        crate::BackendEra {
            modern: primary.modern_now(),
            ..primary.info().era
        }
    }

    /// Whether the primary backend is still running (for `/healthz`).
    pub fn primary_alive(&self) -> bool {
        self.primary().backend.handle.is_reachable()
    }

    /// The primary backend's process id, when it is a local process.
    pub fn primary_pid(&self) -> Option<u32> {
        self.primary().backend.handle.pid()
    }

    /// What the gateway presents as its server (`initialize`, `server/discover`,
    /// `serverInfo`): the virtual server's merged declaration when aggregating (`merged`),
    /// else the primary backend's (see [`Backends::primary`]).
    pub(crate) fn presented(&self, merged: Option<Arc<crate::BackendInfo>>) -> Presented {
        match merged {
            Some(info) => Presented::Merged(info),
            None => Presented::Backend(self.primary()),
        }
    }

    /// Learns `backend`'s Modern era again: after it refused a Modern request on era grounds,
    /// or after a restart. A backend that is Legacy too is then bridged instead of passed
    /// through. (The gateway runs it in the background.)
    pub(crate) async fn reprobe(&self, backend: &BackendId) {
        let Some(entry) = self.get(backend) else {
            return;
        };
        let modern = crate::backend::speaks_modern(&entry.backend.handle).await;
        if entry.set_modern(modern) != modern {
            tracing::info!(%backend, modern, "backend era re-learned");
        }
    }

    /// How many backends the set holds.
    pub fn len(&self) -> usize {
        self.entries.load().len()
    }

    /// Always false (a set is never empty); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.entries.load().is_empty()
    }
}

/// What the gateway presents as its server, as it is now: the one backend's own
/// declaration, or the virtual server's merged one.
#[derive(Debug)]
pub(crate) enum Presented {
    Backend(Arc<BackendEntry>),
    Merged(Arc<crate::BackendInfo>),
}

impl std::ops::Deref for Presented {
    type Target = crate::BackendInfo;

    fn deref(&self) -> &crate::BackendInfo {
        match self {
            Presented::Backend(entry) => entry.info(),
            Presented::Merged(info) => info,
        }
    }
}

/// Non-empty, and no name twice.
pub(crate) fn distinct<'a>(mut ids: impl Iterator<Item = &'a BackendId>) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut any = false;
    ids.all(|id| {
        any = true;
        seen.insert(id.clone())
    }) && any
}
