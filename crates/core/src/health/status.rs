//! What operators read: `/readyz`, `/status` and the gauges of `/metrics`, from the health
//! table and the backend set. Counts and fixed words only: no URL, header, token, session id
//! or backend text.

use serde_json::{json, Value};

use super::Health;
use crate::session::Sessions;
use crate::Backends;

impl Health {
    /// `/status`: per backend of `backends` its name, health state, era, transport, calls in
    /// flight, last error and breaker; the live `sessions` by transport.
    pub(crate) fn status(&self, backends: &Backends, sessions: &Sessions) -> Value {
        let mut entries: Vec<Value> = backends
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
                    (entry.as_object_mut(), self.status_of(&b.id))
                {
                    map.extend(health);
                }
                entry
            })
            .collect();
        entries.extend(self.absent_status());
        let (streamable, sse) = sessions.count_by_transport();
        json!({
            "ready": self.ready(),
            "backends": entries,
            "sessions": {"streamableHttp": streamable, "sse": sse},
        })
    }
}
