//! What operators read: `/readyz`, `/status` and the gauges of `/metrics`, from the health
//! table and the backend set. Counts and fixed words only: no URL, header, token, session id
//! or backend text.

use serde_json::{json, Value};

use crate::Gateway;

impl Gateway {
    /// Whether the gateway is ready to serve (`/readyz`): at least one backend serving, or
    /// every one (`ReadyWhen`).
    pub fn ready(&self) -> bool {
        self.health.ready()
    }

    /// `/status`: per backend its name, health state, era, transport, calls in flight, last
    /// error and breaker; the live sessions by transport.
    pub fn status(&self) -> Value {
        let backends: Vec<Value> = self
            .backends
            .iter()
            .map(|b| {
                let era = crate::BackendEra {
                    modern: b.modern_now(),
                    ..b.info().era
                };
                let mut entry = json!({
                    "name": b.id.as_str(),
                    "era": era.to_string(),
                    "transport": b.backend.handle.transport(),
                });
                if let (Some(map), Value::Object(health)) =
                    (entry.as_object_mut(), self.health.status_of(&b.id))
                {
                    map.extend(health);
                }
                entry
            })
            .collect();
        let mut backends = backends;
        backends.extend(self.health.absent_status());
        let (streamable, sse) = self.sessions_by_transport();
        json!({
            "ready": self.ready(),
            "backends": backends,
            "sessions": {"streamableHttp": streamable, "sse": sse},
        })
    }

    /// Backend `id` is configured but failed to start (`why`: fixed words, no remote's text;
    /// `unauthenticated`: the remote refused the gateway's credential). `/status` shows it
    /// until a reshape adds it to the set.
    pub fn backend_not_started(&self, id: &crate::BackendId, unauthenticated: bool, why: String) {
        self.health.not_started(id, unauthenticated, why);
    }

    /// Forgets the backends that did not start and are no longer configured (`configured`:
    /// the names the configuration holds now).
    pub fn forget_absent_except(&self, configured: &[crate::BackendId]) {
        self.health.forget_absent_except(configured);
    }

    /// The text exposition of every metric, with the gauges set from the gateway now.
    pub fn render_metrics(&self) -> String {
        let (streamable, sse) = self.sessions_by_transport();
        crate::metrics::set_sessions("streamable_http", streamable);
        crate::metrics::set_sessions("sse", sse);
        self.health.export();
        crate::metrics::render()
    }

    fn sessions_by_transport(&self) -> (usize, usize) {
        self.registry.sessions.count_by_transport()
    }
}
