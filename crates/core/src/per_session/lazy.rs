//! A session's own upstreams in a set, opened on first use.
//!
//! Aggregating, the gateway answers a Legacy client's `initialize` itself (the merged view),
//! so no backend sees it then. The first request of the session that routes to a per-session
//! backend (an `isolation: per-session` process, a Legacy-only remote) opens the session's own
//! upstream there: started off the runtime, handed the client's `initialize` (its protocol
//! version as negotiated, its capabilities and clientInfo, so the backend knows what it may
//! ask), `initialized`, and the session's log level. Until that handshake is done the
//! upstream is in the session (its end stops it; what it asks the client meanwhile is the
//! session's) but no request is routed to it. One opening per (session, backend) at a time:
//! concurrent first requests wait for the same one. Its death drops only it (`OnClose::DropOwn`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use switchboard_upstream::Credential;
use switchboard_wire::{encode_notification, method, RequestId};

use super::Spawner;
use super::{spawn_off_runtime, OnClose, SessionSink};
use crate::registry::Registry;
use crate::resolve::{From, Resolver, Route};
use crate::send::Sender;
use crate::session::{OwnBackend, SessionId, Sessions};
use crate::BackendId;
use crate::CoreError;

/// The members of a client's `initialize` a session's own upstreams are handed later, with
/// the version the gateway negotiated: what the client declared, nothing it did not.
pub(crate) fn client_init(negotiated: &str, params: Option<&RawValue>) -> Option<Box<RawValue>> {
    let params: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    let mut init = json!({
        "protocolVersion": negotiated,
        "capabilities": {},
        "clientInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    });
    for member in ["capabilities", "clientInfo"] {
        if let Some(v) = params.get(member).filter(|v| v.is_object()) {
            init[member] = v.clone();
        }
    }
    RawValue::from_string(init.to_string()).ok()
}

/// Keeps the client's `initialize` on its new session, when some backend of the set opens
/// a session's own upstream later (what `spawner` says).
pub(crate) fn remember_client_init(
    (registry, spawner): (&Registry, &Spawner),
    session: &SessionId,
    negotiated: &str,
    params: Option<&RawValue>,
) {
    crate::client_ask::remember(registry, session, params);
    if !spawner.lazy() {
        return;
    }
    let init = client_init(negotiated, params);
    registry.sessions.set_client_init(session.as_str(), init);
}

/// A Legacy session's own upstreams in a set, opened on first use: what opening one and
/// talking to it takes, given explicitly (the gateway builds one per request).
pub(crate) struct Opener<'a> {
    /// Reaches the session's own upstreams.
    pub(crate) sender: &'a Sender,
    /// The backend set, the per-session spawners and the session table: where a request goes.
    pub(crate) resolver: Resolver<'a>,
    /// Where a new upstream's sink delivers.
    pub(crate) registry: &'a Arc<Registry>,
    /// How long an upstream may take to answer its `initialize`.
    pub(crate) handshake_timeout: Duration,
}

impl Opener<'_> {
    /// The backend a session request is waiting for: routed to a per-session backend whose
    /// own upstream the session has not opened (or lost). `None` when nothing is to open.
    pub(crate) fn own_to_open(
        &self,
        session: Option<&SessionId>,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<BackendId> {
        let session = session?;
        if !self.resolver.per_session.lazy() {
            return None;
        }
        let (entry, _) = (self.resolver)
            .choose_backend(&From::Request(Some(session)), method, params)
            .ok()?;
        self.resolver.per_session.for_backend(&entry.id)?;
        Some(entry.id.clone())
    }

    /// Opens `session`'s own upstream on `backend` unless it has a live one (see the module
    /// docs). `credential`: the caller's, for a remote that forwards it.
    pub(crate) async fn open_own(
        &self,
        session: &SessionId,
        backend: &BackendId,
        credential: Option<&Credential>,
    ) -> Result<(), CoreError> {
        let spawner = (self.resolver.per_session)
            .for_backend(backend)
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?
            .clone();
        let sessions = &self.registry.sessions;
        let gate = sessions.opening_gate(session.as_str(), backend)?;
        let _opening = gate.lock().await;
        let (live, init) = sessions.live_own_and_init(session.as_str(), backend)?;
        if live {
            return Ok(());
        }
        let sink = Arc::new(SessionSink {
            registry: Arc::downgrade(self.registry),
            session: session.as_str().to_owned(),
            backend: backend.clone(),
            on_close: OnClose::DropOwn,
        });
        let (handle, process) = spawn_off_runtime(&spawner, sink).await?;
        // A dead one is replaced (dropped after the lock: its process is killed). Ended
        // meanwhile: the new one is dropped with the closure, and killed.
        let replaced = sessions.install_own(
            session.as_str(),
            backend,
            OwnBackend::opening(handle.clone(), process),
        )?;
        drop(replaced);
        // Until it is ready, failing or being dropped (the client left) takes it out again.
        let mut half_open = HalfOpen {
            sessions,
            session,
            backend,
            armed: true,
        };
        let route = self
            .handshake_own(backend, handle, init.as_deref(), credential)
            .await?;
        // Ready first, then the level: a `logging/setLevel` from now on reaches it through
        // the fan-out, and one that came while it handshook is read here.
        let level = sessions.mark_own_ready(session.as_str(), backend)?;
        half_open.armed = false;
        self.apply_level(&route, level, credential).await;
        Ok(())
    }

    /// A set: a client notification to every ready own upstream of its session (not
    /// `initialized`: each had its own at opening). True when they were sent.
    pub(crate) async fn notify_own_backends(
        &self,
        session: Option<&SessionId>,
        name: &str,
        params: Option<&RawValue>,
    ) -> bool {
        let Some(session) = session.filter(|_| self.resolver.per_session.lazy()) else {
            return false;
        };
        if name == method::INITIALIZED {
            return true;
        }
        let owns = self
            .registry
            .sessions
            .ready_owns(session.as_str())
            .unwrap_or_default();
        let line = encode_notification(name, params);
        for own in owns {
            let _ = own.send_line(line.clone()).await;
        }
        true
    }

    /// The client's `initialize` and `initialized` on a session's new own upstream; the
    /// route to it.
    async fn handshake_own(
        &self,
        backend: &BackendId,
        handle: switchboard_upstream::Upstream,
        init: Option<&RawValue>,
        credential: Option<&Credential>,
    ) -> Result<Route, CoreError> {
        let fallback = client_init(switchboard_wire::version::LATEST_LEGACY, None);
        let params = init.or(fallback.as_deref());
        let route = (self.resolver)
            .resolve(
                From::Started(backend, handle.clone()),
                method::INITIALIZE,
                params,
            )?
            .ok_or_else(|| CoreError::UnknownBackend(backend.clone()))?;
        let answer = self
            .own_call(&route, method::INITIALIZE, params, credential)
            .await?;
        if answer.is_error() {
            return Err(CoreError::BackendInit(format!(
                "backend {backend} refused initialize"
            )));
        }
        handle
            .send_line(encode_notification(method::INITIALIZED, None))
            .await?;
        Ok(route)
    }

    /// The level the session asked every backend for, on its new own upstream (a backend
    /// that does logging); a refusal is the backend's business (the client was answered).
    async fn apply_level(&self, route: &Route, level: Option<u8>, credential: Option<&Credential>) {
        let logs = (self.resolver.backends)
            .get(&route.backend)
            .is_some_and(|e| e.info().capabilities.get("logging").is_some());
        let Some(level) = level.filter(|_| logs) else {
            return;
        };
        let params = json!({ "level": crate::logging::name(level) }).to_string();
        let params = RawValue::from_string(params).ok();
        let _ = self
            .own_call(route, method::SET_LEVEL, params.as_deref(), credential)
            .await;
    }

    /// One request of the gateway's on a session's own upstream, within the handshake
    /// deadline: a process that never answers is a broken backend, and says so.
    async fn own_call(
        &self,
        route: &Route,
        name: &str,
        params: Option<&RawValue>,
        credential: Option<&Credential>,
    ) -> Result<switchboard_upstream::BackendResponse, CoreError> {
        let out = crate::send::Outgoing {
            session: None,
            id: &RequestId::from_string("switchboard-open"),
            name,
            params,
            stream: None,
            listen: None,
            route,
            credential,
        };
        let limit = self.handshake_timeout;
        tokio::time::timeout(limit, self.sender.send(out))
            .await
            .map_err(|_| crate::backend::no_answer(name, limit))?
    }
}

/// A session's own upstream that is not handshaken: taken out of the session (and stopped as
/// it drops) unless it becomes ready (then disarmed).
struct HalfOpen<'a> {
    sessions: &'a Sessions,
    session: &'a SessionId,
    backend: &'a BackendId,
    armed: bool,
}

impl Drop for HalfOpen<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Only this opening (it holds the session's gate for the backend) puts a not-ready
        // one there. Dropped outside the table lock.
        let gone = self
            .sessions
            .remove_half_open(self.session.as_str(), self.backend);
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_of(params: &str) -> Value {
        let raw = RawValue::from_string(params.to_owned()).unwrap();
        let init = client_init("2025-06-18", Some(&raw)).unwrap();
        serde_json::from_str(init.get()).unwrap()
    }

    #[test]
    fn the_backend_gets_the_negotiated_version_and_what_the_client_declared() {
        let init = init_of(
            r#"{"protocolVersion":"2099-01-01","capabilities":{"sampling":{}},
                "clientInfo":{"name":"c","version":"1"},"extra":1}"#,
        );
        assert_eq!(
            init,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
                   "clientInfo": {"name": "c", "version": "1"}})
        );
        // Members of the wrong type are not passed on.
        let init = init_of(r#"{"capabilities":[1],"clientInfo":"x"}"#);
        assert_eq!(init["capabilities"], json!({}));
        assert_eq!(init["clientInfo"]["name"], "switchboard");
    }
}
