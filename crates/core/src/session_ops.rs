//! Requests that change per-session routing state: `resources/subscribe`,
//! `resources/unsubscribe`, `logging/setLevel`, and the cleanup when a session ends.

use std::sync::Arc;

use serde_json::json;
use tracing::debug;

use switchboard_upstream::BackendResponse;
use switchboard_wire::{encode_result, method, restore_response, Message, RequestId};

use switchboard_upstream::Upstream;

use crate::access::{Access, Origins};
use crate::backends::BackendEntry;
use crate::in_flight::send_cancel;
use crate::logging;
use crate::registry::Registry;
use crate::resolve::{From, Route};
use crate::send::Sender;
use crate::session::{EndReason, Ended, SessionId, SubKey};
use crate::{Backends, CoreError, Exchange, Gateway};

/// What the requests that change a Legacy session's routing state need, taken explicitly
/// (`Gateway::session_ops` builds it): the way to the backends, the routing tables, the set,
/// the policy and, aggregating, where the merged lists say each item is served.
pub(crate) struct SessionOps<'a> {
    pub(crate) sender: &'a Sender,
    pub(crate) registry: &'a Registry,
    pub(crate) backends: &'a Backends,
    pub(crate) access: &'a Access,
    pub(crate) origins: Option<&'a dyn Origins>,
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
            let recorded = sessions.add_subscription(sid.as_str(), &key);
            if recorded.is_ok() {
                subs.add(&lock, sid.as_str());
            } else {
                // The session ended while we were subscribing: undo upstream.
                let params = json!({ "uri": key.1 });
                let _ = self
                    .sender
                    .internal_call(self.backends, &route.backend, method::UNSUBSCRIBE, params)
                    .await;
            }
        }
        Ok(restore(id, &answer))
    }

    /// Whether `who` may watch `uri` under the current policy: subscribe to it, and see it (a
    /// resource it may not read is hidden, whatever `subscribe` says).
    pub(crate) fn may_subscribe(&self, who: &crate::Principal, uri: &str) -> bool {
        self.access.may_watch(self.origins, who, uri)
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

    /// Sets `backend` to the most verbose level any session wants, if that changed. Returns
    /// the backend's answer when it was asked.
    pub(crate) async fn reconcile_log_level(
        &self,
        backend: &BackendEntry,
    ) -> Option<BackendResponse> {
        let mut current = backend.log_level.lock().await;
        let levels = self.registry.sessions.log_levels();
        let target = logging::target(levels.into_iter());
        if *current == Some(target) {
            return None;
        }
        let params = json!({ "level": logging::name(target) });
        let answer = self
            .sender
            .internal_call(self.backends, &backend.id, method::SET_LEVEL, params)
            .await
            .ok()?;
        if !answer.is_error() {
            *current = Some(target);
        }
        Some(answer)
    }
}

/// A session's end and a restarted backend: what still needs the whole gateway.
impl Gateway {
    /// Whether `who` may watch `uri` under the current policy ([`SessionOps::may_subscribe`]).
    pub(crate) fn may_subscribe(&self, who: &crate::Principal, uri: &str) -> bool {
        self.session_ops().may_subscribe(who, uri)
    }

    /// A changed policy judges every session's subscriptions again, as the principal that
    /// made them: one the new policy denies is dropped as an unsubscribe would drop it (the
    /// backend is told when its last subscriber leaves), so no `resources/updated` reaches a
    /// caller no longer allowed to watch that resource.
    pub(crate) async fn rejudge_subscriptions(&self) {
        let held = self.registry.sessions.judged_subscriptions();
        let mut changed = Vec::new();
        for (sid, who, (backend, uri)) in held {
            if self.may_subscribe(&who, &uri) {
                continue;
            }
            let tables = self.registry.tables(&backend);
            let lock = tables.subs.lock(&uri).await;
            let key: SubKey = (backend.clone(), uri.clone());
            let removed = self
                .registry
                .sessions
                .remove_subscription(&sid, &key)
                .unwrap_or(false);
            if removed && tables.subs.remove(&lock, &sid) {
                let params = json!({ "uri": uri });
                if let Err(e) = self
                    .sender
                    .internal_call(&self.backends, &backend, method::UNSUBSCRIBE, params)
                    .await
                {
                    debug!(error = %e, "unsubscribe after a policy change failed");
                }
            }
            if removed {
                tracing::info!(
                    session = %crate::access::session_label(&sid),
                    "a subscription the new policy denies was dropped"
                );
                changed.push(sid);
            }
        }
        // Subscriptions at sessions' own processes (per-session mode): a URI the caller may
        // no longer watch is revoked there, and its updates are withheld.
        let own = self.registry.sessions.judged_own_watches();
        for (sid, who, uri) in own {
            if !self.may_subscribe(&who, &uri) {
                self.registry.sessions.unwatch_own(&sid, &uri);
            }
        }
        // Modern listen streams, on the gateway's registries and on partitions: a URI the
        // caller may no longer watch stops reaching it.
        let allowed = |who: &crate::Principal, uri: &str| self.may_subscribe(who, uri);
        let mut revoked = self.registry.listeners.rejudge(allowed);
        for listeners in self.mrtr.partitions.listeners() {
            revoked += listeners.rejudge(allowed);
        }
        if revoked > 0 {
            tracing::info!(
                revoked,
                "listen subscriptions the new policy denies were revoked"
            );
        }
        // The store's record too, or another replica adopting the session would subscribe
        // it again.
        changed.dedup();
        for sid in changed {
            if let Err(e) = self.store.write(self, &SessionId::held(&sid)).await {
                debug!(error = %e, "storing a session after a policy change failed");
            }
        }
    }

    /// Readies a restarted process of the primary backend (the one `run` supervises) before
    /// it is installed (see [`Self::revive_backend`]).
    pub async fn revive(&self, standby: switchboard_upstream::StdioHandle) -> bool {
        let primary = self.backends.primary();
        self.revive_backend(&primary, switchboard_upstream::Upstream::Stdio(standby))
            .await
    }

    /// Readies a restarted process of backend `id` (see [`Self::revive_backend`]); false
    /// (retry) for a name the gateway does not front.
    pub async fn revive_backend_named(
        &self,
        id: &crate::BackendId,
        standby: switchboard_upstream::StdioHandle,
    ) -> bool {
        let revived = match self.backends.get(id) {
            Some(entry) => {
                self.revive_backend(&entry, switchboard_upstream::Upstream::Stdio(standby))
                    .await
            }
            None => false,
        };
        if revived {
            self.health.restarted(id);
        }
        revived
    }

    /// Readies a restarted process of `backend` before it is installed: handshake, then
    /// re-subscribe every URI someone is subscribed to there and re-apply the log level, since
    /// the new process knows nothing of the old one's state. Returns false to make the
    /// supervisor retry.
    async fn revive_backend(&self, backend: &BackendEntry, standby: Upstream) -> bool {
        let deadline = self.config.handshake_timeout;
        if let Err(e) = backend.backend.reinitialize(&standby, deadline).await {
            tracing::warn!(error = %e, "restarted backend refused the handshake");
            return false;
        }
        let tables = self.registry.tables(&backend.id);
        // Task ids were the old process's: a new one may hand the same ids to someone else.
        tables.tasks.clear();
        // Its tools (and their `Mcp-Param-*` designations) may differ from the old one's.
        tables.tool_headers.invalidate();
        // The new process may speak another era than the old one (an upgrade).
        let modern = crate::backend::speaks_modern(&standby).await;
        backend.set_modern(modern);
        for uri in tables.subs.uris() {
            let params = json!({ "uri": uri });
            if let Err(e) =
                crate::backend::call(&standby, method::SUBSCRIBE, params, deadline).await
            {
                debug!(error = %e, "re-subscribe after restart failed");
            }
        }
        let level = *backend.log_level.lock().await;
        if let Some(level) = level {
            let params = json!({ "level": logging::name(level) });
            let _ = crate::backend::call(&standby, method::SET_LEVEL, params, deadline).await;
        }
        true
    }

    /// Ends the sessions expired (and, in per-session mode, those whose listen stream was lost
    /// past its grace), each torn down in the background (the reaper's tick).
    pub(crate) fn reap_sessions(self: &Arc<Self>) {
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

    /// Audits an ended session's end at once, then releases its state in the background, in
    /// one of the cleanup slots (see `reaper`). Callable from synchronous code, drop included.
    pub(crate) fn spawn_cleanup(self: &Arc<Self>, ended: Ended, reason: EndReason) {
        self.audit_end(&ended, reason);
        // The session no longer counts against `--max-sessions`, but its process runs until
        // its teardown gets a slot: ask it to exit now, so a well-behaved backend is gone
        // before then and processes cannot pile up behind the slots.
        for process in &ended.processes {
            process.request_stop();
        }
        let gateway = self.clone();
        (self.background).spawn_cleanup(async move { gateway.release(ended).await });
    }

    /// Audits a session's end (see [`EndReason`]) and releases its state.
    pub(crate) async fn cleanup(&self, ended: Ended, reason: EndReason) {
        self.audit_end(&ended, reason);
        self.store
            .release_owner_place(&ended.owner, &ended.id)
            .await;
        self.release(ended).await;
    }

    /// The audit line of a session's end: its owner, its label and `reason` (none for a
    /// session that never reached its client).
    pub(crate) fn audit_end(&self, ended: &Ended, reason: EndReason) {
        if let Some(reason) = reason.audit() {
            self.config
                .access
                .record_session_end(&ended.owner, &ended.id, reason);
        }
    }

    /// Releases a finished session's state: upstream unsubscribes where it was the last
    /// subscriber, log-level reconciliation, cancellation of its in-flight requests. Its
    /// listen stream already closed when it left the table.
    pub(crate) async fn release(&self, ended: Ended) {
        if !ended.processes.is_empty() {
            // The session's own backends: its requests die with them, no cancellations
            // needed. Stopped together, each with its grace.
            let grace = crate::per_session::SHUTDOWN_GRACE;
            let mut stops = tokio::task::JoinSet::new();
            for process in ended.processes {
                stops.spawn(process.shutdown(grace));
            }
            // Each stop is bounded by its grace (then a kill), so this ends.
            while stops.join_next().await.is_some() {}
            // `run --isolation per-session`: the session used nothing else. In a set it also
            // used shared backends, whose state it held is released below.
            if !self.per_session.lazy() {
                return;
            }
        }
        for (backend, key) in &ended.in_flight {
            // A per-session backend's requests went to the session's own upstream, stopped
            // above; the shared handle never saw them.
            if self.per_session.for_backend(backend).is_some() {
                continue;
            }
            let route = self.resolve(From::Teardown(backend), method::CANCELLED, None);
            if let Ok(Some(route)) = route {
                send_cancel(&route.upstream, key, "session ended");
            }
        }
        for tables in self.registry.all_tables() {
            tables.tasks.purge(&ended.id);
        }
        for (backend, uri) in ended.subscriptions {
            let tables = self.registry.tables(&backend);
            let lock = tables.subs.lock(&uri).await;
            if tables.subs.remove(&lock, &ended.id) {
                if let Err(e) = self
                    .sender
                    .internal_call(
                        &self.backends,
                        &backend,
                        method::UNSUBSCRIBE,
                        json!({ "uri": uri }),
                    )
                    .await
                {
                    debug!(error = %e, "upstream unsubscribe on session end failed");
                }
            }
        }
        if ended.had_log_level {
            for backend in self.backends.iter() {
                self.session_ops().reconcile_log_level(&backend).await;
            }
        }
    }
}

/// How a session's own upstreams end their session (`per_session::Ends`).
impl crate::per_session::Ends for Gateway {
    fn spawn_cleanup(self: Arc<Self>, ended: Ended, reason: EndReason) {
        Gateway::spawn_cleanup(&self, ended, reason);
    }

    fn cleanup(&self, ended: Ended, reason: EndReason) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(Gateway::cleanup(self, ended, reason))
    }
}

fn uri_param(msg: &Message<'_>) -> Option<String> {
    msg.param("uri")
        .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
}

fn restore(id: &RequestId, answer: &BackendResponse) -> Vec<u8> {
    restore_response(id, answer.member(), answer.payload())
}
