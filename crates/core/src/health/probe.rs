//! The active probe: per backend, every `probe_interval`, one MCP request on the gateway's own
//! route (`resolve::From::Gateway`: the shared process, or the upstream session the gateway
//! keeps for itself) — Modern `server/discover` for a backend that answers Modern requests,
//! else Legacy `ping`. Its outcome goes to [`super::Health::probed`]. Any answer, an error included,
//! is a backend that works; the probe never sends an HTTP GET.
//!
//! The probes are one future ([`Gateway::run_probes`]) that the binary spawns and awaits on
//! shutdown after cancelling its token: it owns every backend's loop, so nothing outlives it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use switchboard_wire::{encode_request, method};

use super::Outcome;
use crate::backends::BackendId;
use crate::resolve::From;
use crate::route::RouteKey;
use crate::Gateway;

/// The shortest interval honoured (a zero would spin).
const MIN_INTERVAL: Duration = Duration::from_millis(10);

impl Gateway {
    /// Probes every backend every `probe_interval` until `stop` fires. The first probe
    /// waits one interval: every backend has just answered its handshake (the set is built
    /// from connected backends), which is what a probe would learn.
    pub async fn run_probes(self: Arc<Self>, stop: CancellationToken) {
        let loops = self.backends.iter().map(|b| {
            let (gateway, stop, id) = (self.clone(), stop.clone(), b.id.clone());
            async move { gateway.probe_loop(&id, &stop).await }
        });
        futures::future::join_all(loops).await;
    }

    async fn probe_loop(&self, id: &BackendId, stop: &CancellationToken) {
        let interval = self.health.config.probe_interval.max(MIN_INTERVAL);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.probe(id) => outcome,
            };
            if let Outcome::Failed(_, why) = &outcome {
                tracing::debug!(backend = %id, "probe failed: {why}");
            }
            self.health.probed(id, &outcome);
        }
    }

    /// One probe of `id`, bounded by `probe_timeout` (the call is withdrawn when it expires).
    pub(crate) async fn probe(&self, id: &BackendId) -> Outcome {
        let Some(entry) = self.backends.get(id) else {
            return Outcome::Neutral;
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
            return Outcome::Neutral;
        };
        let route = match self.resolve(From::Gateway(id), name, Some(&params)) {
            Ok(Some(route)) => route,
            // Nothing of the gateway's own to probe on: nothing learned.
            Ok(None) | Err(_) => return Outcome::Neutral,
        };
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), name, Some(&params));
        let exchange = async { route.upstream.call(key.as_str(), line).await?.await };
        let deadline = self.health.config.probe_timeout;
        match tokio::time::timeout(deadline, exchange).await {
            Ok(Ok(_)) => Outcome::Answered,
            Ok(Err(e)) => Outcome::of_upstream(&e),
            Err(_) => Outcome::Failed(
                "timeout",
                format!("probe: no answer within {} s", deadline.as_secs_f64()),
            ),
        }
    }
}
