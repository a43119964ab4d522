//! What keeps the gateway's per-backend session state true when something other than a
//! request changes it: a session's end (expired, deleted, its stream or process gone,
//! shutdown), a restarted backend process, and a policy change.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use tracing::debug;

use switchboard_upstream::{StdioHandle, Upstream};
use switchboard_wire::method;

use crate::access::{Access, Origins};
use crate::backends::BackendEntry;
use crate::health::Health;
use crate::in_flight::send_cancel;
use crate::logging;
use crate::modern_listen::ModernListeners;
use crate::per_session::Spawner;
use crate::reaper::Background;
use crate::registry::Registry;
use crate::resolve::{From, Resolver};
use crate::send::Sender;
use crate::session::{EndReason, Ended, SessionId, SubKey};
use crate::session_store::{Host, SessionStore};
use crate::{BackendId, Backends, Principal};

/// One backend of the set, as a supervisor adopted its processes: a reload that replaces
/// the backend under the same name makes another ([`Upkeep::instance_of`]). Holds no more than
/// a weak reference.
#[derive(Debug, Clone)]
pub struct BackendInstance {
    id: BackendId,
    entry: std::sync::Weak<BackendEntry>,
}

/// The state a session's end, a backend's restart and a policy change act on, shared with
/// the gateway (which builds it in `Gateway::new` and holds it as `Gateway::upkeep`); a
/// session's own upstream holds a weak handle on it to end its session (`per_session::Ends`).
#[derive(Debug)]
pub struct Upkeep {
    pub(crate) registry: Arc<Registry>,
    pub(crate) backends: Arc<Backends>,
    pub(crate) per_session: Arc<Spawner>,
    pub(crate) sender: Arc<Sender>,
    pub(crate) access: Access,
    pub(crate) background: Arc<Background>,
    pub(crate) store: Arc<SessionStore>,
    pub(crate) health: Arc<Health>,
    /// How long a restarted process may take to answer the gateway's `initialize`.
    pub(crate) handshake_timeout: Duration,
    /// Per-session mode: how long a session may be without its listen stream.
    pub(crate) listen_grace: Duration,
}

impl Upkeep {
    /// A changed policy judges every session's subscriptions again, as the principal that
    /// made them: one the new policy denies is dropped as an unsubscribe would drop it (the
    /// backend is told when its last subscriber leaves), so no `resources/updated` reaches a
    /// caller no longer allowed to watch that resource. `origins`: where the merged lists say
    /// each item is served; `partitions`: the partitions' listen registries; `host`: the
    /// session store's (a changed session is written again).
    pub(crate) async fn rejudge_subscriptions(
        &self,
        origins: Option<&dyn Origins>,
        partitions: Vec<Arc<ModernListeners>>,
        host: &impl Host,
    ) {
        let may = |who: &Principal, uri: &str| self.access.may_watch(origins, who, uri);
        let mut changed = self.rejudge_shared(&may).await;
        // Subscriptions at sessions' own processes (per-session mode): a URI the caller may
        // no longer watch is revoked there, and its updates are withheld.
        let own = self.registry.sessions.judged_own_watches();
        for (sid, who, uri) in own {
            if !may(&who, &uri) {
                self.registry.sessions.unwatch_own(&sid, &uri);
            }
        }
        // Modern listen streams, on the gateway's registries and on partitions: a URI the
        // caller may no longer watch stops reaching it.
        let mut revoked = self.registry.listeners.rejudge(may);
        for listeners in partitions {
            revoked += listeners.rejudge(may);
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
            if let Err(e) = self.store.write(host, &SessionId::held(&sid)).await {
                debug!(error = %e, "storing a session after a policy change failed");
            }
        }
    }

    /// The subscriptions the gateway keeps at shared backends that `may` no longer allows,
    /// dropped; returns the sessions that lost one.
    async fn rejudge_shared(&self, may: &impl Fn(&Principal, &str) -> bool) -> Vec<String> {
        let held = self.registry.sessions.judged_subscriptions();
        let mut changed = Vec::new();
        for (sid, who, (backend, uri)) in held {
            if may(&who, &uri) {
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
        changed
    }

    /// Readies a restarted process of the primary backend (the one `run` supervises) before
    /// it is installed (see [`Self::revive_backend`]).
    pub async fn revive(&self, standby: StdioHandle) -> bool {
        let primary = self.backends.primary();
        self.revive_backend(&primary, Upstream::Stdio(standby), None)
            .await
    }

    /// The backend of the set named `id` as it is now, for a supervisor adopting its
    /// processes ([`BackendInstance`]); `None` for a name the set does not hold.
    pub fn instance_of(&self, id: &BackendId) -> Option<BackendInstance> {
        let entry = self.backends.get(id)?;
        Some(BackendInstance {
            id: id.clone(),
            entry: Arc::downgrade(&entry),
        })
    }

    /// `instance`'s entry, while the set still holds that very one (not another a reload
    /// put under its name since).
    fn in_set(&self, instance: &BackendInstance) -> Option<Arc<BackendEntry>> {
        let now = self.backends.get(&instance.id)?;
        let then = instance.entry.upgrade()?;
        Arc::ptr_eq(&now, &then).then_some(now)
    }

    /// Readies a restarted process of `instance` (see [`Self::revive_backend`]); false
    /// (retry) once the set no longer holds it: a reload retired it, or replaced it under
    /// the same name (the new backend's tables, era and log level are never touched by the
    /// old one's process). Once the supervisor installed it, [`Self::restarted`] says so.
    /// `replica`: which of a replicated backend's processes it replaces.
    pub async fn revive_backend_instance(
        &self,
        instance: &BackendInstance,
        replica: Option<usize>,
        standby: StdioHandle,
    ) -> bool {
        match self.in_set(instance) {
            Some(entry) => {
                let standby = Upstream::Stdio(standby);
                self.revive_backend(&entry, standby, replica).await
            }
            None => false,
        }
    }

    /// A restarted process of `instance` is installed: its health starts again (counted, the
    /// breaker half-open), while the set still holds it.
    pub fn restarted(&self, instance: &BackendInstance) {
        if self.in_set(instance).is_some() {
            self.health.restarted(&instance.id);
        }
    }

    /// Readies a restarted process of `backend` before it is installed: handshake, then
    /// re-subscribe every URI someone is subscribed to there and re-apply the log level, since
    /// the new process knows nothing of the old one's state. Returns false to make the
    /// supervisor retry.
    /// A replica re-subscribes only the URIs it serves (the others' are elsewhere).
    async fn revive_backend(
        &self,
        backend: &BackendEntry,
        standby: Upstream,
        replica: Option<usize>,
    ) -> bool {
        let deadline = self.handshake_timeout;
        if let Err(e) = backend.backend.reinitialize(&standby, deadline).await {
            tracing::warn!(error = %e, "restarted backend refused the handshake");
            return false;
        }
        let tables = self.registry.tables(&backend.id);
        // Task ids were the old process's: a new one may hand the same ids to someone else.
        tables.tasks.clear();
        tables.questions.forget_all();
        // Its tools (and their `Mcp-Param-*` designations) may differ from the old one's.
        tables.tool_headers.invalidate();
        // The new process may speak another era than the old one (an upgrade).
        let modern = crate::backend::speaks_modern(&standby).await;
        backend.set_modern(modern);
        let set = backend.backend.handle.as_replicated();
        let here = |uri: &str| match (set, replica) {
            (Some(set), Some(i)) => set.uri_index(uri) == i,
            _ => true,
        };
        for uri in tables.subs.uris().into_iter().filter(|u| here(u)) {
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
        if self.per_session.any() {
            let grace = self.listen_grace;
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
        let upkeep = self.clone();
        (self.background).spawn_cleanup(async move { upkeep.release(ended).await });
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
    fn audit_end(&self, ended: &Ended, reason: EndReason) {
        if let Some(reason) = reason.audit() {
            (self.access).record_session_end(&ended.owner, &ended.id, reason);
        }
    }

    /// Releases a finished session's state: upstream unsubscribes where it was the last
    /// subscriber, log-level reconciliation, cancellation of its in-flight requests. Its
    /// listen stream already closed when it left the table.
    async fn release(&self, mut ended: Ended) {
        if !ended.processes.is_empty() {
            // The session's own backends: its requests die with them, no cancellations
            // needed. Stopped together, each with its grace.
            let grace = crate::per_session::SHUTDOWN_GRACE;
            let mut stops = tokio::task::JoinSet::new();
            for process in std::mem::take(&mut ended.processes) {
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
        self.cancel_in_flight(&ended);
        for tables in self.registry.all_tables() {
            tables.tasks.purge(&ended.id);
        }
        for (backend, uri) in ended.subscriptions {
            self.unsubscribe_last(&ended.id, &backend, uri).await;
        }
        if ended.had_log_level {
            for backend in self.backends.iter() {
                let with = (&*self.sender, &*self.registry, &*self.backends);
                super::reconcile_log_level(with, &backend).await;
            }
        }
    }

    /// The ended session's requests at shared backends, cancelled there.
    fn cancel_in_flight(&self, ended: &Ended) {
        let resolver = Resolver {
            backends: &self.backends,
            vmcp: None,
            per_session: &self.per_session,
            sessions: &self.registry.sessions,
        };
        for (backend, key) in &ended.in_flight {
            // A per-session backend's requests went to the session's own upstream, stopped
            // above; the shared handle never saw them.
            if self.per_session.for_backend(backend).is_some() {
                continue;
            }
            let route = resolver.resolve(From::Teardown(backend), method::CANCELLED, None);
            if let Ok(Some(route)) = route {
                send_cancel(&route.upstream, key, "session ended");
            }
        }
    }

    /// The ended session's subscription to `uri` at `backend` goes; the backend is told when
    /// it was the last subscriber.
    async fn unsubscribe_last(&self, session: &str, backend: &BackendId, uri: String) {
        let tables = self.registry.tables(backend);
        let lock = tables.subs.lock(&uri).await;
        if !tables.subs.remove(&lock, session) {
            return;
        }
        let params = json!({ "uri": uri });
        let sent = (self.sender)
            .internal_call(&self.backends, backend, method::UNSUBSCRIBE, params)
            .await;
        if let Err(e) = sent {
            debug!(error = %e, "upstream unsubscribe on session end failed");
        }
    }
}

/// How a session's own upstreams end their session.
impl crate::per_session::Ends for Upkeep {
    fn spawn_cleanup(self: Arc<Self>, ended: Ended, reason: EndReason) {
        Upkeep::spawn_cleanup(&self, ended, reason);
    }

    fn cleanup(&self, ended: Ended, reason: EndReason) -> BoxFuture<'_, ()> {
        Box::pin(Upkeep::cleanup(self, ended, reason))
    }
}
