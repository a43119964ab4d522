//! The one place that decides where a message goes: [`Resolver::resolve`] maps (who is asking,
//! in which session, method and params) to a [`Route`]: which backend, which of its upstream
//! handles (the shared one, the session's own, the gateway's own, a process started for the
//! caller), and the name at that backend.
//!
//! Everything that talks to a backend on a client's behalf or its own (requests, notifications,
//! cancellations, internal calls, subscription and log-level bookkeeping, Modern passthrough
//! and bridging) takes a `Route` from here instead of reaching for a handle. What the choice
//! reads (the backend set, the merged lists, which backends are per-session, the session
//! table) it is given, as a [`Resolver`] the gateway builds for each decision. The backend is
//! the one a follow-up names, the one the merged lists give the name to (aggregating, through
//! `destination::Picker`), or the only one; the upstream handle is the shared one (a replica of
//! it, chosen here), the session's own (per-session) or one started for the call.

use std::sync::Arc;

use serde_json::value::RawValue;
use switchboard_upstream::Upstream;

use crate::backends::BackendEntry;
pub(crate) use crate::destination::{Name, Picker, Route, Via};
use crate::per_session::Spawner;
use crate::session::{SessionId, Sessions};
use crate::BackendId;
use crate::{Backends, CoreError};

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
    /// Session teardown: cancellations on `backend`'s shared handle for requests that were
    /// still waiting there.
    Teardown(&'a BackendId),
    /// An upstream the gateway just started for the caller on `backend`.
    Started(&'a BackendId, Upstream),
    /// Aggregating: a Legacy client request that goes to every backend (`logging/setLevel`),
    /// here to `backend`, in the session if it has one.
    Fanout(Option<&'a SessionId>, &'a BackendId),
    /// A client request about something that lives at `backend` (a task the gateway's handle
    /// names), in the session if it has one (Legacy).
    Pinned(Option<&'a SessionId>, &'a BackendId),
}

/// What routing reads, as it is now: the gateway builds one per decision
/// (`Gateway::resolver`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolver<'a> {
    /// The backend set.
    pub(crate) backends: &'a Backends,
    /// The merged lists, when aggregating.
    pub(crate) vmcp: Option<&'a dyn Picker>,
    /// Which backends give sessions an upstream of their own.
    pub(crate) per_session: &'a Spawner,
    /// The session table (each session's own upstreams).
    pub(crate) sessions: &'a Sessions,
}

impl Resolver<'_> {
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
        // A replicated backend: a request is pinned here to the replica it goes to (so its
        // cancellation follows it); a notification with no key reaches every replica.
        let shared = || entry.backend.handle.for_request(method, params);
        let every = || entry.backend.handle.clone();
        let per_session_backend = self.per_session.for_backend(&entry.id).is_some();
        Ok(match from {
            From::Request(Some(sid)) | From::Fanout(Some(sid), _) | From::Pinned(Some(sid), _) => {
                let per_session = per_session_backend;
                let own = self
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
                None => route(Via::Shared, every()),
            },
            From::Cancel(sid, _) => match self.own_upstream(sid, &entry.id) {
                Some(own) => route(Via::Own, own),
                // Per-session mode: none of the session's requests went to the shared process,
                // so neither does a cancellation (not even a gateway-minted key of it).
                None if per_session_backend => None,
                // Narrowed by the cancelled call's key where it is sent.
                None => route(Via::Shared, every()),
            },
            From::Request(None)
            | From::Fanout(None, _)
            | From::Pinned(None, _)
            | From::Notification(None)
            | From::Modern
            | From::Initialize => route(Via::Shared, shared()),
            From::Teardown(_) => route(Via::Shared, every()),
            From::Started(_, upstream) => route(Via::Started, upstream),
        })
    }

    /// Which backend: the one a follow-up names (it was routed before); aggregating, the one
    /// the merged lists serve the request's name, URI or reference from (`method` and
    /// `params` say which); else the set's primary.
    pub(crate) fn choose_backend(
        &self,
        from: &From<'_>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(Arc<BackendEntry>, Name), CoreError> {
        let named = match from {
            From::Cancel(_, b)
            | From::Teardown(b)
            | From::Started(b, _)
            | From::Fanout(_, b)
            | From::Pinned(_, b) => Some(*b),
            From::Request(_) | From::Notification(_) | From::Modern | From::Initialize => None,
        };
        let (id, name) = match (named, self.vmcp) {
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
        self.sessions.ready_own(session.as_str(), backend)
    }
}

#[cfg(test)]
mod tests;
