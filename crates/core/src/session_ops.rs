//! Requests that change per-session routing state: `resources/subscribe`,
//! `resources/unsubscribe`, `logging/setLevel`, and the cleanup when a session ends.

use serde_json::json;

use switchboard_upstream::BackendResponse;
use switchboard_wire::{encode_result, method, restore_response, Message, RequestId};

use crate::access::Access;
use crate::backends::BackendEntry;
use crate::logging;
use crate::registry::Registry;
use crate::resolve::Route;
use crate::send::Sender;
use crate::session::{SessionId, SubKey};
use crate::{Backends, CoreError, Exchange};

mod upkeep;

pub use upkeep::{BackendInstance, Upkeep};

/// What the requests that change a Legacy session's routing state need, taken explicitly
/// (`Gateway::session_ops` builds it): the way to the backends, the routing tables, the set
/// and the policy.
pub(crate) struct SessionOps<'a> {
    pub(crate) sender: &'a Sender,
    pub(crate) registry: &'a Registry,
    pub(crate) backends: &'a Backends,
    pub(crate) access: &'a Access,
}

impl SessionOps<'_> {
    /// The adapter for what the gateway keeps per Legacy session: `resources/subscribe`,
    /// `resources/unsubscribe` and `logging/setLevel` (each needs a session).
    pub(crate) async fn session_op(
        &self,
        ex: &Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let Some(sid) = ex.session() else {
            return Err(match name {
                method::SUBSCRIBE => CoreError::SessionRequired(method::SUBSCRIBE),
                method::UNSUBSCRIBE => CoreError::SessionRequired(method::UNSUBSCRIBE),
                _ => CoreError::SessionRequired(method::SET_LEVEL),
            });
        };
        match name {
            method::SUBSCRIBE => self.subscribe(sid, ex.caller, id, ex.msg, route).await,
            method::UNSUBSCRIBE => self.unsubscribe(sid, id, ex.msg, route).await,
            _ => self.set_level(sid, id, ex.msg, route).await,
        }
    }

    /// A subscription request without a usable `uri`: nothing to track, so the backend judges
    /// it as it is.
    async fn untracked(
        &self,
        sid: &SessionId,
        (id, name): (&RequestId, &str),
        msg: &Message<'_>,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let answer = self
            .sender
            .call_backend(Some(sid), id, name, msg, (None, None), route)
            .await?;
        Ok(restore(id, &answer))
    }

    /// `resources/subscribe`: the backend sees the first subscriber of a URI only; later ones
    /// are answered by the gateway. A failed upstream subscribe is not recorded, so the next
    /// subscriber tries again.
    pub(crate) async fn subscribe(
        &self,
        sid: &SessionId,
        caller: &crate::Principal,
        id: &RequestId,
        msg: &Message<'_>,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        if self.access.has_policy() {
            let subscriber = std::sync::Arc::new(crate::Principal {
                credential: None,
                ..caller.clone()
            });
            self.registry
                .sessions
                .set_subscriber(sid.as_str(), subscriber);
        }
        let Some(uri) = uri_param(msg) else {
            return self
                .untracked(sid, (id, method::SUBSCRIBE), msg, route)
                .await;
        };
        let tables = self.registry.tables(&route.backend);
        let subs = &tables.subs;
        let lock = subs.lock(&uri).await;
        let sessions = &self.registry.sessions;
        let key: SubKey = (route.backend.clone(), uri);
        if sessions.is_subscribed(sid.as_str(), &key)? {
            return Ok(encode_result(id, "{}"));
        }
        sessions.may_subscribe(sid.as_str(), &key)?;
        if subs.has_subscribers(&key.1) {
            sessions.add_subscription(sid.as_str(), &key)?;
            subs.add(&lock, sid.as_str());
            return Ok(encode_result(id, "{}"));
        }
        let answer = self
            .sender
            .call_backend(Some(sid), id, method::SUBSCRIBE, msg, (None, None), route)
            .await?;
        if !answer.is_error() {
            match sessions.add_subscription(sid.as_str(), &key) {
                Ok(_) => subs.add(&lock, sid.as_str()),
                // The session ended, or took its last subscription elsewhere, while we were
                // subscribing: undo upstream.
                Err(e) => {
                    let params = json!({ "uri": key.1 });
                    let _ = (self.sender)
                        .internal_call(self.backends, &route.backend, method::UNSUBSCRIBE, params)
                        .await;
                    return Err(e);
                }
            }
        }
        Ok(restore(id, &answer))
    }

    /// `resources/unsubscribe`: the backend sees it only when the last subscriber leaves. The
    /// table is updated first, so a failing upstream unsubscribe still leaves it consistent.
    pub(crate) async fn unsubscribe(
        &self,
        sid: &SessionId,
        id: &RequestId,
        msg: &Message<'_>,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let Some(uri) = uri_param(msg) else {
            return self
                .untracked(sid, (id, method::UNSUBSCRIBE), msg, route)
                .await;
        };
        let tables = self.registry.tables(&route.backend);
        let lock = tables.subs.lock(&uri).await;
        let key: SubKey = (route.backend.clone(), uri);
        let was_subscribed = self
            .registry
            .sessions
            .remove_subscription(sid.as_str(), &key)?;
        if !was_subscribed || !tables.subs.remove(&lock, sid.as_str()) {
            return Ok(encode_result(id, "{}"));
        }
        let answer = self
            .sender
            .call_backend(Some(sid), id, method::UNSUBSCRIBE, msg, (None, None), route)
            .await?;
        Ok(restore(id, &answer))
    }

    /// `logging/setLevel`: recorded per session; the backend runs at the most verbose level
    /// any session wants. The client is answered `{}` unless the backend refuses the change.
    pub(crate) async fn set_level(
        &self,
        sid: &SessionId,
        id: &RequestId,
        msg: &Message<'_>,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        let entry = route.entry(self.backends)?;
        if entry.info().capabilities.get("logging").is_none() {
            // The backend does not do logging: let it answer for itself.
            let answer = self
                .sender
                .call_backend(Some(sid), id, method::SET_LEVEL, msg, (None, None), route)
                .await?;
            return Ok(restore(id, &answer));
        }
        let level = msg
            .param("level")
            .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
            .and_then(|l| logging::rank(&l))
            .ok_or(CoreError::InvalidParams("level must be a logging level"))?;
        self.registry.sessions.set_log_level(sid.as_str(), level)?;
        match self.reconcile_log_level(&entry).await {
            Some(refused) if refused.is_error() => Ok(restore(id, &refused)),
            _ => Ok(encode_result(id, "{}")),
        }
    }

    /// Sets `backend` to the most verbose level any session wants ([`reconcile_log_level`]).
    pub(crate) async fn reconcile_log_level(
        &self,
        backend: &BackendEntry,
    ) -> Option<BackendResponse> {
        reconcile_log_level((self.sender, self.registry, self.backends), backend).await
    }
}

/// Sets `backend` to the most verbose level any session wants, if that changed. Returns
/// the backend's answer when it was asked.
pub(crate) async fn reconcile_log_level(
    (sender, registry, backends): (&Sender, &Registry, &Backends),
    backend: &BackendEntry,
) -> Option<BackendResponse> {
    let mut current = backend.log_level.lock().await;
    let levels = registry.sessions.log_levels();
    let target = logging::target(levels.into_iter());
    if *current == Some(target) {
        return None;
    }
    let params = json!({ "level": logging::name(target) });
    let answer = sender
        .internal_call(backends, &backend.id, method::SET_LEVEL, params)
        .await
        .ok()?;
    if !answer.is_error() {
        *current = Some(target);
    }
    Some(answer)
}

/// Whether a subscribe's `uri` is longer than the gateway watches
/// ([`crate::session::MAX_URI_BYTES`]).
pub(crate) fn uri_too_long(msg: &Message<'_>) -> bool {
    uri_param(msg).is_some_and(|u| u.len() > crate::session::MAX_URI_BYTES)
}

fn uri_param(msg: &Message<'_>) -> Option<String> {
    msg.param("uri")
        .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
}

fn restore(id: &RequestId, answer: &BackendResponse) -> Vec<u8> {
    restore_response(id, answer.member(), answer.payload())
}
