//! The active probe: per backend, every `probe_interval`, one MCP request on the gateway's own
//! route (`Route::internal`: the shared process, or the upstream session the gateway
//! keeps for itself) — Modern `server/discover` for a backend that answers Modern requests,
//! else Legacy `ping`. Its outcome goes to [`super::Health::probed`]. Any answer, an error included,
//! is a backend that works; the probe never sends an HTTP GET.
//!
//! The probes are one future ([`follow`], which `Gateway::run_probes` runs) that the binary
//! spawns and awaits on shutdown after cancelling its token: it owns every backend's loop
//! ([`Health::probe_loop`]), so nothing outlives it.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use switchboard_wire::{encode_request, method};

use super::{Health, Outcome};
use crate::destination::Route;
use crate::route::RouteKey;
use crate::BackendId;
use crate::Backends;

/// The shortest interval honoured (a zero would spin).
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Runs `probe_loop` for every backend of `backends` until `stop` fires. The first probe
/// waits one interval: every backend has just answered its handshake (the set is built
/// from connected backends, and a reload adds only connected ones), which is what a probe
/// would learn. Follows the set: a backend a reload adds gets a loop, a removed one's
/// loop ends (its token is cancelled); every loop is owned here, so nothing outlives `stop`.
pub(crate) async fn follow<F, L>(backends: &Backends, stop: &CancellationToken, probe_loop: F)
where
    F: Fn(BackendId, CancellationToken) -> L,
    L: Future<Output = ()> + Send + 'static,
{
    let mut loops: HashMap<BackendId, CancellationToken> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        // Registered before the set is read: a replace in between still wakes us.
        let changed = backends.changed.notified();
        let now: Vec<BackendId> = backends.iter().map(|b| b.id.clone()).collect();
        loops.retain(|id, token| {
            let keep = now.contains(id);
            if !keep {
                token.cancel();
            }
            keep
        });
        for id in now {
            if loops.contains_key(&id) {
                continue;
            }
            let token = stop.child_token();
            loops.insert(id.clone(), token.clone());
            tasks.spawn(probe_loop(id, token));
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = changed => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

impl Health {
    /// Probes backend `id` of `backends` every `probe_interval` until `stop` fires.
    pub(crate) async fn probe_loop(
        &self,
        backends: &Backends,
        id: &BackendId,
        stop: &CancellationToken,
    ) {
        let interval = self.config.probe_interval.max(MIN_INTERVAL);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let (outcome, unreachable) = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.probe(backends, id) => outcome,
            };
            if let Outcome::Failed(_, why) = &outcome {
                tracing::debug!(backend = %id, "probe failed: {why}");
            }
            self.probed(id, &outcome, unreachable);
        }
    }

    /// One probe of `id`, bounded by `probe_timeout` (the call is withdrawn when it expires),
    /// and whether it failed because the backend cannot be reached at all.
    pub(crate) async fn probe(&self, backends: &Backends, id: &BackendId) -> (Outcome, bool) {
        let Some(entry) = backends.get(id) else {
            return (Outcome::Neutral, false);
        };
        // A backend that answers Modern requests is asked statelessly (a remote's shared
        // handle has no session to carry a Legacy `ping`); a Legacy-only one gets `ping` on
        // the gateway's own upstream (its shared process, or its own upstream session).
        let (name, params) = if entry.modern_now() {
            (
                method::DISCOVER,
                json!({ "_meta": crate::backend::gateway_envelope() }),
            )
        } else {
            (method::PING, json!({}))
        };
        let Ok(params) = RawValue::from_string(params.to_string()) else {
            return (Outcome::Neutral, false);
        };
        let route = Route::internal(&entry);
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), name, Some(&params));
        let exchange = async { route.upstream.call(key.as_str(), line).await?.await };
        let deadline = self.config.probe_timeout;
        match tokio::time::timeout(deadline, exchange).await {
            Ok(Ok(_)) => (Outcome::Answered, false),
            Ok(Err(e)) => {
                let outcome = Outcome::of_upstream(&e);
                let unreachable = matches!(outcome, Outcome::Failed(..)) && super::unreachable(&e);
                (outcome, unreachable)
            }
            Err(_) => (
                Outcome::Failed(
                    "timeout",
                    format!("probe: no answer within {} s", deadline.as_secs_f64()),
                ),
                false,
            ),
        }
    }
}
