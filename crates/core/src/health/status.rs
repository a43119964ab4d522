//! What operators read: `/readyz`, `/status` and the gauges of `/metrics`, from the health
//! table and the backend set. Counts and fixed words only: no URL, header, token, session id
//! or backend text.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{json, Value};

use super::{BackendHealth, Health};
use crate::session::Sessions;
use crate::{BackendId, Backends};

/// Principals listed by `/status` at most (the most sessions first); the rest are counted.
const MAX_PRINCIPALS: usize = 100;

/// Whose sessions `/status` lists by principal: every principal's for an operator (a
/// `trust.approvers` principal), the caller's own for anyone else, and nobody's on an open
/// `/status` (who is asking is not known). One caller never learns who else uses the gateway.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PrincipalView<'a> {
    Every,
    Own(&'a crate::Principal),
    Nobody,
}

impl PrincipalView<'_> {
    fn shows(&self, owner: &(String, String)) -> bool {
        match self {
            PrincipalView::Every => true,
            PrincipalView::Own(p) => p.issuer == owner.0 && p.subject == owner.1,
            PrincipalView::Nobody => false,
        }
    }
}

/// Seconds, to a tenth.
fn tenths(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

/// Milliseconds, to a hundredth.
fn millis(seconds: f64) -> f64 {
    (seconds * 100_000.0).round() / 100.0
}

impl Health {
    /// `/status`: per backend of `backends` its name, health state, era, transport, process,
    /// calls in flight and in the last minute, item counts (`items`, when aggregating), last
    /// error and breaker; the live `sessions` by transport and by principal.
    pub(crate) fn status(
        &self,
        backends: &Backends,
        (sessions, view): (&Sessions, PrincipalView<'_>),
        items: &dyn Fn(&BackendId) -> Option<ItemCounts>,
    ) -> Value {
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
                    "pid": b.backend.handle.pid(),
                    "items": items(&b.id).map(|c| json!({
                        "tools": c.tools,
                        "prompts": c.prompts,
                        "resources": c.resources,
                        "resourceTemplates": c.resource_templates,
                    })),
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
            "sessions": sessions_status(streamable, sse, sessions, view),
        })
    }

    /// `/status`'s view of one backend's health (no secrets: fixed words and counts).
    pub(crate) fn status_of(&self, id: &BackendId) -> Value {
        let Some(b) = self.backends.load().get(id).cloned() else {
            return Value::Null;
        };
        let now = Instant::now();
        let facts = b.inner.lock();
        let (state, breaker) = self.judge(&facts, now);
        let ago = |at: Instant| tenths(now.saturating_duration_since(at).as_secs_f64());
        json!({
            "state": state.as_str(),
            "inFlight": b.in_flight.load(Ordering::Relaxed),
            "breaker": {
                "state": breaker.as_str(),
                "consecutiveFailures": facts.breaker.consecutive_failures(),
            },
            "lastError": facts.last_error.as_ref().map(|(why, at)| json!({
                "message": why,
                "secondsAgo": ago(*at),
            })),
            "lastProbe": facts.probe.map(|(ok, at)| json!({"ok": ok, "secondsAgo": ago(at)})),
            "restarts": b.restarts.load(Ordering::Relaxed),
            "uptimeSeconds": facts.up_since.map(ago),
            "lastMinute": last_minute(&b, now),
        })
    }
}

/// The backend's calls in the last minute: how many, per second, and their p50 and p99 in
/// milliseconds (`null` with no timed call), as `/metrics`'s series for it would give them.
fn last_minute(b: &BackendHealth, now: Instant) -> Value {
    let m = b.recent.last_minute(now);
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let per_second = m.requests as f64 / super::recent::SECONDS as f64;
    json!({
        "requests": m.requests,
        "perSecond": (per_second * 100.0).round() / 100.0,
        "p50Ms": m.p50.map(millis),
        "p99Ms": m.p99.map(millis),
    })
}

/// Sessions by transport, and by principal (issuer and subject, never a session id or a
/// credential) as `view` shows them, the principals with most sessions first.
fn sessions_status(
    streamable: usize,
    sse: usize,
    sessions: &Sessions,
    view: PrincipalView<'_>,
) -> Value {
    let mut by_principal = sessions.count_by_principal();
    by_principal.sort_by(|a, b| (b.1 + b.2).cmp(&(a.1 + a.2)).then_with(|| a.0.cmp(&b.0)));
    let all = by_principal.len();
    let listed: Vec<Value> = by_principal
        .into_iter()
        .filter(|(owner, ..)| view.shows(owner))
        .take(MAX_PRINCIPALS)
        .map(|((issuer, subject), streamable, sse)| {
            json!({
                "issuer": issuer,
                "subject": subject,
                "streamableHttp": streamable,
                "sse": sse,
            })
        })
        .collect();
    let hidden = all - listed.len();
    json!({
        "streamableHttp": streamable,
        "sse": sse,
        "byPrincipal": listed,
        "principalsNotListed": hidden,
    })
}

/// One backend's item counts; `None` for a kind never listed from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ItemCounts {
    pub(crate) tools: Option<usize>,
    pub(crate) prompts: Option<usize>,
    pub(crate) resources: Option<usize>,
    pub(crate) resource_templates: Option<usize>,
}
