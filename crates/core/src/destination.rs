//! Where one message goes, once `resolve` has chosen: the backend, which of its
//! upstream handles, and the name the message uses there. Data that the request path below
//! the features (`send`, `health`) reads; moved here from `resolve.rs` unchanged.

use std::sync::Arc;

use serde_json::value::RawValue;
use switchboard_upstream::Upstream;

use crate::backends::BackendEntry;
use crate::BackendId;
use crate::{Backends, CoreError};

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

impl Route {
    /// Whether the gateway may hand out and follow up tasks the backend creates here: not on
    /// a backend with more than one replica (a task lives in one process, and a follow-up
    /// could reach another, where another caller's task may have the same id).
    pub(crate) fn keeps_tasks(&self) -> bool {
        self.upstream.replicas() == 1
    }

    /// Who holds the tasks an answer on this route creates (`tasks::finished`).
    pub(crate) fn task_holder(&self) -> crate::tasks::Holder {
        match (self.via, self.keeps_tasks()) {
            (Via::Own, _) => crate::tasks::Holder::Own,
            (_, false) => crate::tasks::Holder::Replicas,
            (_, true) => crate::tasks::Holder::Shared,
        }
    }

    /// The entry of the route's backend in `backends` (routes name only backends of the set).
    pub(crate) fn entry(&self, backends: &Backends) -> Result<Arc<BackendEntry>, CoreError> {
        backends
            .get(&self.backend)
            .ok_or_else(|| CoreError::UnknownBackend(self.backend.clone()))
    }

    /// The gateway's own route to `entry` (what `Sender::internal_call` sends on): the upstream
    /// it keeps for its own requests, else the shared handle; the name as the gateway asks.
    pub(crate) fn internal(entry: &BackendEntry) -> Route {
        let backend = &entry.backend;
        Route {
            backend: entry.id.clone(),
            upstream: (backend.internal.clone()).unwrap_or_else(|| backend.handle.clone()),
            via: Via::Internal,
            name: Name::AsClient,
        }
    }
}

/// Where an aggregated request goes: the backend the merged lists name, and the name it
/// has there.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) backend: BackendId,
    pub(crate) name: Name,
}

/// What chooses a backend by a request's name, URI or reference when aggregating (the
/// virtual server's merged lists). Routing reads it through this, so `resolve` does not
/// depend on the virtual server that implements it.
pub(crate) trait Picker: std::fmt::Debug + Sync {
    /// Where a client's `method` with `params` goes, or why it goes nowhere.
    fn pick(&self, method: &str, params: Option<&RawValue>) -> Result<Pick, CoreError>;
    /// The backend that serves `uri` (as `resources/read` routes it), if the lists know one.
    fn serving(&self, uri: &str) -> Option<BackendId>;
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
