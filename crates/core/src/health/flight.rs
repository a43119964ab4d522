//! One request's flight through a backend's health: admitted (or refused) by the breaker,
//! counted in flight, its outcome reported exactly once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_upstream::BackendResponse;

use super::{breaker_changed, BackendHealth, BreakerState, Health, Outcome};
use crate::metrics::Method;
use crate::{BackendId, CoreError};

/// One request on its way to a backend: counted in flight, and its outcome reported to the
/// breaker and the metrics exactly once ([`Flight::finish`]); dropped unreported (the caller
/// went away) it gives back the trial, if it was the trial, and counts as cancelled.
#[derive(Debug)]
pub(crate) struct Flight<'a> {
    pub(super) health: &'a Health,
    /// The backend's entry (`None`: a backend not in the table, removed by a reload).
    pub(super) entry: Option<Arc<BackendHealth>>,
    /// Whether health judges this route (not a session's own process): in flight, breaker.
    pub(super) judged: bool,
    /// The process the call went to, if a process: its death counts once.
    pub(super) pid: Option<u32>,
    pub(super) backend: BackendId,
    pub(super) method: Method,
    pub(super) trial: bool,
    pub(super) started: Instant,
    pub(super) reported: bool,
    /// The call carried the caller's own credential (`forwardCallerToken`).
    pub(crate) forwarded: bool,
}

impl Flight<'_> {
    /// Reports the call's result and hands it back.
    pub(crate) fn finish(
        mut self,
        result: Result<BackendResponse, CoreError>,
    ) -> Result<BackendResponse, CoreError> {
        self.reported = true;
        let mut outcome = Outcome::of(&result);
        if self.forwarded && !outcome.unreachable(&result) {
            // The call carried the caller's own credential: what the remote (or a proxy in
            // front of it) made of that token is the caller's business; only the remote being
            // unreachable says something about it for everyone (the probe judges the rest).
            outcome = Outcome::Neutral;
        }
        let word = match &result {
            Err(CoreError::Cancelled) => "cancelled",
            _ => outcome.word(),
        };
        let recent = self.entry.as_deref().map(|b| &b.recent);
        super::call_ended(
            &self.backend,
            self.method,
            word,
            self.started.elapsed(),
            recent,
        );
        if let Some(b) = self.entry.as_ref().filter(|_| self.judged) {
            let crashed = self.pid.filter(|_| Outcome::process_gone(&result));
            self.report(b, &outcome, crashed);
        }
        result
    }

    /// `crashed`: the call failed because process `pid` ended.
    fn report(&self, b: &BackendHealth, outcome: &Outcome, crashed: Option<u32>) {
        let config = &self.health.config.breaker;
        let now = Instant::now();
        let mut facts = b.inner.lock();
        let success = match outcome {
            Outcome::Answered => {
                facts.answered = Some(now);
                true
            }
            // Others were answered while it waited: one caller's slow call (or a caller
            // making calls slow on purpose) must not open the breaker for everyone.
            Outcome::Failed("timeout", _) if facts.answered.is_some_and(|at| at > self.started) => {
                if self.trial {
                    facts.breaker.trial_abandoned();
                }
                return;
            }
            Outcome::Failed(..) if crashed.is_some() && facts.crashed == crashed => {
                // The same crash, reported by another of its calls: already counted.
                if self.trial {
                    facts.breaker.trial_abandoned();
                }
                return;
            }
            Outcome::Failed(_, why) => {
                if crashed.is_some() {
                    facts.crashed = crashed;
                }
                facts.last_error = Some((why.clone(), now));
                false
            }
            Outcome::Unauthenticated(_) | Outcome::Neutral => {
                if self.trial {
                    facts.breaker.trial_abandoned();
                }
                return;
            }
        };
        facts.seen = true;
        if success {
            facts.unauthenticated = false;
        }
        let changed = facts.breaker.record(success, self.trial, now, config);
        if changed {
            let state = facts.breaker.state(now, config);
            b.open
                .store(state != BreakerState::Closed, Ordering::Release);
            breaker_changed(
                &self.backend,
                state,
                if self.trial { "trial" } else { "call" },
            );
        }
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if !self.reported {
            let recent = self.entry.as_deref().map(|b| &b.recent);
            let (backend, method) = (&self.backend, self.method);
            super::call_ended(backend, method, "cancelled", Duration::ZERO, recent);
        }
        let Some(b) = self.entry.as_ref().filter(|_| self.judged) else {
            return;
        };
        b.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.reported && self.trial {
            b.inner.lock().breaker.trial_abandoned();
        }
    }
}
