//! `subscriptions/listen` for a Legacy backend (shared mode): acknowledged with what the
//! backend can feed, then served from the gateway's registries; resource subscriptions are
//! the gateway's own, reference-counted upstream like Legacy sessions'.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use switchboard_wire::{codes, method, ErrorObject, Message, RequestId};

use super::Adapters;
use crate::modern_listen::Filter;
use crate::reaper::Background;
use crate::registry::Registry;
use crate::resolve::Route;
use crate::route::RouteKey;
use crate::Answer;
use crate::CoreError;
use crate::{BackendId, Backends};

impl<'a> Adapters<'a> {
    /// `subscriptions/listen` for a Legacy backend: acknowledged at once with the subset the
    /// backend can feed, then served from the gateway's registries until the client closes the
    /// stream. Resource subscriptions are reference-counted upstream like Legacy sessions'.
    pub(super) async fn bridged_listen(
        &self,
        caller: &crate::Principal,
        id: &RequestId,
        msg: &Message<'_>,
        stream: Option<mpsc::Sender<Bytes>>,
        route: &Route,
    ) -> Result<Answer, CoreError> {
        let Some(stream) = stream else {
            return Ok(listen_needs_stream(id));
        };
        let honoured = honoured(
            route.entry(self.resolver.backends)?.info(),
            Filter::parse(msg.params),
        );
        let placed = honoured
            .uris
            .iter()
            .map(|uri| (route.backend.clone(), uri.clone()))
            .collect();
        let _listening = self
            .listen_here(caller, id, &stream, &honoured, placed)
            .await;
        crate::mrtr::acknowledge(&stream, id, &honoured).await;
        // Served until the client closes the stream, which drops this future and the guards.
        stream.closed().await;
        Err(CoreError::Cancelled)
    }

    /// `subscriptions/listen` on the virtual server: acknowledged with what the merged
    /// capabilities can feed, each URI subscribed at the backend that serves it (where
    /// `resources/read` goes, and what admission judged), a URI no backend serves left out
    /// of the acknowledgement; list changes come from every backend's sink. The merged lists
    /// are prepared by the caller; `may_subscribe` judges a URI for the caller, `may_use` a
    /// backend (whether the caller may use anything of it: only there is a warm process
    /// started for it, as the caller).
    pub(crate) async fn aggregated_listen(
        &self,
        caller: &crate::Principal,
        (id, msg): (&RequestId, &Message<'_>),
        stream: mpsc::Sender<Bytes>,
        (may_subscribe, may_use): (impl Fn(&str) -> bool, impl Fn(&BackendId) -> bool),
    ) -> Result<Answer, CoreError> {
        let mut honoured = honoured(&self.mrtr.presented, Filter::parse(msg.params));
        let placed: Vec<(BackendId, String)> = std::mem::take(&mut honoured.uris)
            .into_iter()
            // Admission refused a visible URI it may not subscribe to; a hidden one is left
            // out here, as one no backend serves.
            .filter(|uri| may_subscribe(uri))
            .filter_map(|uri| {
                let backend = self.resolver.vmcp?.serving(&uri)?;
                let entry = self.resolver.backends.get(&backend)?;
                let subscribes = entry.info().capabilities["resources"]["subscribe"]
                    .as_bool()
                    .unwrap_or(false);
                subscribes.then_some((backend, uri))
            })
            .collect();
        honoured.uris = placed.iter().map(|(_, uri)| uri.clone()).collect();
        let _listening = self
            .listen_here(caller, id, &stream, &honoured, placed)
            .await;
        crate::mrtr::acknowledge(&stream, id, &honoured).await;
        // A Legacy-only per-session backend runs this caller's Modern calls on its partition:
        // what those calls change, that process announces, to its own listeners. After the
        // acknowledgement (starting one may take seconds: an `npx` server), all at once.
        let keys: Vec<_> = (self.resolver.backends)
            .iter()
            .filter(|e| self.mrtr.spawner.for_backend(&e.id).is_some() && !e.modern_now())
            .filter(|e| may_use(&e.id))
            .map(|e| crate::mrtr::PartitionKey::of(caller, msg, &e.id))
            .collect();
        let credential = caller.credential.as_ref();
        let calls = &self.mrtr;
        let started =
            futures::future::join_all(keys.iter().map(|k| calls.partition(k, credential))).await;
        let partitions: Vec<_> = started.into_iter().filter_map(Result::ok).collect();
        let heard: Vec<_> = partitions.iter().map(|u| u.0.listeners.clone()).collect();
        let changes = Filter {
            uris: Vec::new(),
            ..honoured.clone()
        };
        let _on_partitions: Vec<_> = heard
            .iter()
            .map(|l| {
                l.register(
                    &RouteKey::mint(),
                    id,
                    changes.clone(),
                    stream.clone(),
                    false,
                )
            })
            .collect();
        stream.closed().await;
        Err(CoreError::Cancelled)
    }

    /// A listen served from the gateway's registries: registered for `honoured`, each URI
    /// subscribed at its backend (`placed`); both undone when the returned pair drops.
    async fn listen_here(
        &self,
        caller: &crate::Principal,
        id: &RequestId,
        stream: &mpsc::Sender<Bytes>,
        honoured: &Filter,
        placed: Vec<(BackendId, String)>,
    ) -> (
        crate::modern_listen::ListenerGuard<'a>,
        ListenSubscriptions<'a>,
    ) {
        let key = RouteKey::mint();
        let owner = format!("listen:{}", key.as_str());
        let registry: &'a Arc<Registry> = self.mrtr.registry;
        let guard =
            (registry.listeners).register(&key, id, honoured.clone(), stream.clone(), false);
        if self.mrtr.watched {
            registry.listeners.watched_by(&guard, caller);
        }
        let mut subs = ListenSubscriptions {
            registry,
            background: self.mrtr.background,
            backends: self.resolver.backends,
            deadline: self.sender.request_timeout,
            owner: owner.clone(),
            uris: Vec::new(),
        };
        for (backend, uri) in placed {
            self.subscribe_for(&backend, &owner, &uri).await;
            subs.uris.push((backend, uri));
        }
        (guard, subs)
    }

    /// Adds a gateway-owned subscriber of `uri` at `backend`, subscribing upstream if it is
    /// the first.
    async fn subscribe_for(&self, backend: &BackendId, owner: &str, uri: &str) {
        let tables = self.mrtr.registry.tables(backend);
        let lock = tables.subs.lock(uri).await;
        if !tables.subs.has_subscribers(uri) {
            let ok = self
                .sender
                .internal_call(
                    self.resolver.backends,
                    backend,
                    method::SUBSCRIBE,
                    json!({ "uri": uri }),
                )
                .await
                .is_ok_and(|a| !a.is_error());
            if !ok {
                return;
            }
        }
        tables.subs.add(&lock, owner);
    }
}

/// The part of a listen's filter a Legacy backend can feed (by its capabilities).
pub(crate) fn honoured(backend: &crate::BackendInfo, asked: Filter) -> Filter {
    let caps = &backend.capabilities;
    let flag = |k: &str, f: &str| caps[k][f].as_bool().unwrap_or(false);
    Filter {
        tools: asked.tools && flag("tools", "listChanged"),
        prompts: asked.prompts && flag("prompts", "listChanged"),
        resources: asked.resources && flag("resources", "listChanged"),
        uris: if flag("resources", "subscribe") {
            asked.uris
        } else {
            Vec::new()
        },
    }
}

/// Releases a bridged listen's resource subscriptions when it ends. Upstream unsubscribes
/// need `.await`, so they run in a task of their own, bounded by the request deadline.
struct ListenSubscriptions<'a> {
    /// The subscription tables.
    registry: &'a Arc<Registry>,
    /// Where the unsubscribes run ...
    background: &'a Background,
    /// ... to the backends of this set ...
    backends: &'a Backends,
    /// ... each within this deadline.
    deadline: Duration,
    owner: String,
    /// Each URI with the backend it is subscribed at.
    uris: Vec<(BackendId, String)>,
}

impl Drop for ListenSubscriptions<'_> {
    fn drop(&mut self) {
        if self.uris.is_empty() {
            return;
        }
        // Drop can run during runtime teardown, where spawning would panic.
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (registry, deadline) = (self.registry.clone(), self.deadline);
        let owner = std::mem::take(&mut self.owner);
        // Each with its backend's entry, for the gateway's own route to it (what
        // `Sender::internal_call` takes): a backend gone from the set has nothing to undo.
        let uris: Vec<_> = std::mem::take(&mut self.uris)
            .into_iter()
            .map(|(backend, uri)| (self.backends.get(&backend), backend, uri))
            .collect();
        self.background.spawn(async move {
            for (entry, backend, uri) in uris {
                let tables = registry.tables(&backend);
                let lock = tables.subs.lock(&uri).await;
                if let (true, Some(entry)) = (tables.subs.remove(&lock, &owner), entry) {
                    let route = Route::internal(&entry);
                    let params = json!({ "uri": uri });
                    let upstream = &route.upstream;
                    let _ =
                        crate::backend::call(upstream, method::UNSUBSCRIBE, params, deadline).await;
                }
            }
        });
    }
}

pub(crate) fn listen_needs_stream(id: &RequestId) -> Answer {
    Answer::error(
        id,
        &ErrorObject::new(
            codes::INVALID_REQUEST,
            "subscriptions/listen needs a text/event-stream response",
        ),
    )
}
