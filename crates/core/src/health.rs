//! Backend health: per backend a state (`starting`, `healthy`, `degraded`, `unhealthy`,
//! `unauthenticated`) and a circuit breaker ([`breaker`]), fed by two sources:
//!
//! - real traffic: every request the gateway sends (`Gateway::send`) takes a [`Flight`]
//!   first — refused at once, naming the backend, while the breaker is open — and reports its
//!   outcome through it (an answer of any kind, a backend failure, a timeout);
//! - an active probe per backend (`probe`) that speaks MCP on the gateway's own route: Modern
//!   `server/discover` for a backend that answers Modern requests, else Legacy `ping`. Never
//!   an HTTP GET: POST-only servers refuse one and are still healthy.
//!
//! What counts as a failure: the backend closed or exited, a remote unreachable or answering
//! 5xx or garbage, no answer within the deadline. What does not: any JSON-RPC answer (an error
//! is the backend working), a caller cancelling, the gateway's own bounds (a full queue, too
//! many calls on one upstream session), and 401/403 on a caller's request — with a forwarded
//! caller token one caller's bad token must not open the breaker for everyone; the probe,
//! which carries the gateway's own credential, is what makes a backend `unauthenticated`.
//!
//! A timeout counts only when no other call was answered while it waited: a backend that
//! answers others is not down, and one caller's slow calls must not open the breaker for
//! everyone.
//!
//! A probe that finds the backend unreachable (its process gone, its remote refusing the
//! connection) opens the breaker at once: no call could reach it, and the state an operator
//! reads is the breaker's (`unhealthy` only behind a breaker that is not closed).
//!
//! A process that dies is one event, however many calls it takes with it: only the first
//! failure reported for that process id counts, and the calls still arriving for it do not.
//! Its replacement answering the handshake ([`Health::restarted`]) puts an open breaker to its
//! trial at once: the next call reaches the new process, and its outcome decides.
//!
//! A session's own stdio process (per-session mode) is not the backend's health: one session's
//! process ending says nothing about the others', so those routes are neither gated nor
//! counted. A remote reached through a session's own upstream session is the same server for
//! everyone, so those are.
//!
//! The state is its own table (`Gateway::health`), keyed by backend, so later features (the
//! status page, hot reload adding and removing backends) read and extend it here.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_upstream::{BackendResponse, UpstreamError};

use crate::destination::{Route, Via};
use crate::metrics::{self, Method};
use crate::BackendId;
use crate::CoreError;

pub(crate) mod breaker;
mod flight;
pub(crate) mod probe;
mod recent;
mod status;

pub(crate) use flight::Flight;
pub(crate) use recent::Recent;
pub(crate) use status::ItemCounts;
pub(crate) use status::PrincipalView;

use breaker::{Admission, Breaker};
pub use breaker::{BreakerConfig, BreakerState};

/// How backends are watched.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// Time between two probes of a backend.
    pub probe_interval: Duration,
    /// How long a probe may wait for its answer (the next starts an interval after it ends).
    pub probe_timeout: Duration,
    /// When the gateway is ready (`/readyz`).
    pub ready_when: ReadyWhen,
    /// When breakers open and how long they stay open.
    pub breaker: BreakerConfig,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            probe_interval: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(5),
            ready_when: ReadyWhen::Any,
            breaker: BreakerConfig::default(),
        }
    }
}

/// When `/readyz` says ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadyWhen {
    /// At least one backend serves (healthy or degraded).
    #[default]
    Any,
    /// Every backend serves.
    All,
}

/// A backend's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Nothing learned yet (no probe answered, no call made).
    Starting,
    /// Answering.
    Healthy,
    /// Answering, but its last call or probe failed (its breaker not open on it yet), or its
    /// breaker is trying it again.
    Degraded,
    /// Its breaker is open (or half-open after a failed probe): what `unhealthy` shows is
    /// always what the breaker does.
    Unhealthy,
    /// A remote refusing the gateway's credential (HTTP 401/403 to the probe).
    Unauthenticated,
}

impl HealthState {
    /// Every state's word, in order.
    pub(crate) const WORDS: [&'static str; 5] = [
        "starting",
        "healthy",
        "degraded",
        "unhealthy",
        "unauthenticated",
    ];

    /// As `/status` and `/metrics` spell it.
    pub fn as_str(self) -> &'static str {
        Self::WORDS[self as usize]
    }

    /// Whether the backend serves requests in this state.
    pub fn serves(self) -> bool {
        matches!(self, HealthState::Healthy | HealthState::Degraded)
    }
}

/// How one call or probe ended, for health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The backend answered (a result or a JSON-RPC error).
    Answered,
    /// The backend failed; fixed words for `/status` (no remote's text, no URL).
    Failed(&'static str, String),
    /// The remote refused the credential (401/403).
    Unauthenticated(u16),
    /// Says nothing about the backend (cancelled, the gateway's own bound).
    Neutral,
}

impl Outcome {
    /// What a call's result says about its backend.
    pub(crate) fn of(result: &Result<BackendResponse, CoreError>) -> Outcome {
        match result {
            Ok(_) => Outcome::Answered,
            // A backend that does not answer within the deadline is failing its callers,
            // whatever the reason: it counts, as the README documents.
            Err(CoreError::Timeout(limit) | CoreError::TimeoutOf(_, limit)) => Outcome::Failed(
                "timeout",
                format!("no answer within {}s", limit.as_secs_f64()),
            ),
            Err(CoreError::Backend(e) | CoreError::OfBackend(_, e)) => Outcome::of_upstream(e),
            Err(_) => Outcome::Neutral,
        }
    }

    pub(crate) fn of_upstream(e: &UpstreamError) -> Outcome {
        use switchboard_upstream::remote::RemoteError as R;
        match e {
            UpstreamError::Remote(R::Status { status, .. }) if matches!(status, 401 | 403) => {
                Outcome::Unauthenticated(*status)
            }
            UpstreamError::Remote(R::Status { status, .. }) if *status < 500 => Outcome::Neutral,
            UpstreamError::Remote(R::Timeout) => Outcome::Neutral,
            UpstreamError::Remote(R::SessionLost | R::Refused(_) | R::TooLarge { .. })
            // No credential to send (a caller without a token to exchange, the token service
            // refusing one): the call never reached the remote, which says nothing about it.
            | UpstreamError::Remote(R::OutgoingAuth(_))
            | UpstreamError::Overloaded
            | UpstreamError::DuplicateKey => Outcome::Neutral,
            _ => Outcome::Failed("failed", e.client_text()),
        }
    }

    /// Whether a failure is the remote or process being unreachable (closed, exited,
    /// refused at the transport), whoever asked.
    fn unreachable(&self, result: &Result<BackendResponse, CoreError>) -> bool {
        matches!(self, Outcome::Failed(..))
            && matches!(
                result,
                Err(CoreError::Backend(e) | CoreError::OfBackend(_, e)) if unreachable(e)
            )
    }

    /// Whether the call failed because its backend process ended (or its pipes closed): one
    /// crash fails every call in flight at once, and counts once.
    fn process_gone(result: &Result<BackendResponse, CoreError>) -> bool {
        matches!(
            result,
            Err(CoreError::Backend(e) | CoreError::OfBackend(_, e))
                if matches!(e, UpstreamError::Exited(_) | UpstreamError::Closed(_))
        )
    }

    /// The metric outcome word.
    fn word(&self) -> &'static str {
        match self {
            Outcome::Answered => "ok",
            Outcome::Failed(word, _) => word,
            Outcome::Unauthenticated(_) => "unauthenticated",
            Outcome::Neutral => "other",
        }
    }
}

/// Whether an upstream error is the remote or process being unreachable (its process ended
/// or its pipes closed, or the remote refused at the transport): no call can reach it now.
fn unreachable(e: &UpstreamError) -> bool {
    use switchboard_upstream::remote::RemoteError as R;
    matches!(e, UpstreamError::Remote(R::Transport(_))) || !matches!(e, UpstreamError::Remote(_))
}

/// What is kept about one backend. The breaker and the facts share one mutex, held only to
/// read or update them; `open` mirrors "the breaker is not closed" so the common case (closed)
/// admits a call without taking it. `recent` and `restarts` are atomics, for `/status`.
#[derive(Debug, Default)]
pub(crate) struct BackendHealth {
    open: AtomicBool,
    in_flight: AtomicUsize,
    /// Restarts of its process since the gateway started it (as `/metrics` counts them).
    restarts: AtomicU32,
    /// Its last minute of calls (rate and latency for `/status`).
    pub(crate) recent: Recent,
    inner: parking_lot::Mutex<Facts>,
}

#[derive(Debug, Default)]
struct Facts {
    breaker: Breaker,
    /// The last failure, in fixed words, and when.
    last_error: Option<(String, Instant)>,
    /// The last probe's outcome and when.
    probe: Option<(bool, Instant)>,
    /// The probe was refused the gateway's credential (cleared by any answer).
    unauthenticated: bool,
    /// The process whose death was already counted (its other calls' failures are not).
    crashed: Option<u32>,
    /// When a call was last answered: a call that timed out while others were answered
    /// says more about itself (its arguments, a slow tool) than about the backend.
    answered: Option<Instant>,
    /// Something was learned (a probe, a call).
    seen: bool,
    /// Since when the current process (or connection) has served: its handshake, or its
    /// restart's. `None` for a backend not connected yet.
    up_since: Option<Instant>,
}

/// Every backend's health (`Gateway::health`).
#[derive(Debug)]
pub struct Health {
    pub(crate) config: HealthConfig,
    /// Replaced whole when a reload adds or removes backends ([`Health::reshape`]); a
    /// backend kept across it keeps its entry (breaker and facts).
    backends: crate::snapshot::Snapshot<Table>,
    /// Configured backends that could not be started (yet): shown by `/status`, counted by
    /// `/readyz`, retried by their owner until they join the set.
    absent: parking_lot::Mutex<Vec<Absent>>,
}

/// A configured backend that is not in the set: it failed to start.
#[derive(Debug, Clone)]
struct Absent {
    id: BackendId,
    /// The remote refused the gateway's credential (HTTP 401/403).
    unauthenticated: bool,
    /// Fixed words (no remote's text, no URL).
    why: String,
    since: Instant,
}

/// Keyed by the operator's backend names: a fast hasher is safe here.
type Table = foldhash::HashMap<BackendId, Arc<BackendHealth>>;

impl Health {
    /// The table for `ids`, each backend `connected` (it has just answered its handshake:
    /// healthy until traffic or a probe says otherwise) or not (`starting` until then: a
    /// backend added at run time, for hot reload).
    pub(crate) fn new(
        config: HealthConfig,
        ids: impl Iterator<Item = BackendId>,
        connected: bool,
    ) -> Self {
        let table = ids.map(|id| (id, entry(connected))).collect();
        Health {
            config,
            backends: crate::snapshot::Snapshot::new(Arc::new(table)),
            absent: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Backend `id` is configured but could not be started (`why`: fixed words, no remote's
    /// text; `unauthenticated`: the remote refused the gateway's credential); replaces what
    /// was known of its earlier attempt. `/status` shows it until a reshape adds it to the set.
    pub fn not_started(&self, id: &BackendId, unauthenticated: bool, why: String) {
        let mut absent = self.absent.lock();
        absent.retain(|a| &a.id != id);
        absent.push(Absent {
            id: id.clone(),
            unauthenticated,
            why,
            since: Instant::now(),
        });
        absent.sort_by(|a, b| a.id.cmp(&b.id));
    }

    /// Forgets the absent backends that are no longer configured (`configured`: the names
    /// the configuration holds now).
    pub fn forget_absent_except(&self, configured: &[BackendId]) {
        self.absent.lock().retain(|a| configured.contains(&a.id));
    }

    /// `/status`'s entries for the backends that are configured but not started.
    pub(crate) fn absent_status(&self) -> Vec<Value> {
        let ago = |at: Instant| (at.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        self.absent
            .lock()
            .iter()
            .map(|a| {
                let state = if a.unauthenticated {
                    HealthState::Unauthenticated
                } else {
                    HealthState::Unhealthy
                };
                json!({
                    "name": a.id.as_str(),
                    "state": state.as_str(),
                    "started": false,
                    "inFlight": 0,
                    "lastError": {"message": a.why, "secondsAgo": ago(a.since)},
                })
            })
            .collect()
    }

    /// Follows a reload: `ids` is the new set; a backend already known keeps its entry, a
    /// new one (or a new process under a known name, `fresh`) starts healthy (it has just
    /// answered its handshake), a removed one's entry goes (a call still in flight there
    /// keeps its own reference).
    pub(crate) fn reshape(&self, ids: &[BackendId], fresh: &[BackendId]) {
        let old = self.backends.load();
        let table: Table = ids
            .iter()
            .map(|id| {
                let kept = old.get(id).filter(|_| !fresh.contains(id));
                (id.clone(), kept.cloned().unwrap_or_else(|| entry(true)))
            })
            .collect();
        self.backends.store(Arc::new(table));
        // Those that joined are absent no more.
        self.absent.lock().retain(|a| !ids.contains(&a.id));
    }

    /// Admits one request on `route` (see [`Flight`]): refused, as the backend being down,
    /// while its breaker is open.
    pub(crate) fn flight(&self, route: &Route, method: &str) -> Result<Flight<'_>, CoreError> {
        let method = Method::of(method);
        let started = Instant::now();
        let judged =
            !matches!(route.via, Via::Own | Via::Started) || route.upstream.as_stdio().is_none();
        // Looked up for every route: a session's own process is not judged, but its calls
        // are counted in the backend's last minute, as `/metrics` counts them.
        let entry = self.backends.load().get(&route.backend).cloned();
        let mut trial = false;
        if let Some(b) = entry.as_ref().filter(|_| judged) {
            if b.open.load(Ordering::Acquire) {
                let admission = b.inner.lock().breaker.admit(started, &self.config.breaker);
                match admission {
                    Admission::Refuse => {
                        let recent = Some(&b.recent);
                        call_ended(&route.backend, method, "refused", Duration::ZERO, recent);
                        return Err(b.refusal(&route.backend, started, &self.config.breaker));
                    }
                    Admission::Trial => trial = true,
                    Admission::Pass => {}
                }
            }
            b.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Flight {
            health: self,
            entry,
            judged,
            pid: route.upstream.pid(),
            backend: route.backend.clone(),
            method,
            trial,
            started,
            reported: false,
            forwarded: false,
        })
    }

    /// The backends whose breaker is not closed (their items leave merged lists), sorted.
    /// Usually empty, which costs no allocation.
    pub(crate) fn not_closed(&self) -> Vec<BackendId> {
        let mut open: Vec<BackendId> = self
            .backends
            .load()
            .iter()
            .filter(|(_, b)| b.open.load(Ordering::Acquire))
            .map(|(id, _)| id.clone())
            .collect();
        open.sort();
        open
    }

    /// Records a probe's outcome; `unreachable`: it failed because the backend cannot be
    /// reached at all (see [`unreachable`]), which opens the breaker at once.
    pub(crate) fn probed(&self, id: &BackendId, outcome: &Outcome, unreachable: bool) {
        let Some(b) = self.backends.load().get(id).cloned() else {
            return;
        };
        let now = Instant::now();
        let mut facts = b.inner.lock();
        facts.seen = true;
        let success = match outcome {
            Outcome::Answered => true,
            Outcome::Failed(_, why) => {
                facts.last_error = Some((why.clone(), now));
                false
            }
            Outcome::Unauthenticated(status) => {
                facts.last_error = Some((format!("remote answered HTTP {status}"), now));
                facts.unauthenticated = true;
                // Refusing the gateway is not being down: the breaker is for failures.
                facts.probe = Some((true, now));
                return;
            }
            Outcome::Neutral => return,
        };
        if success {
            facts.unauthenticated = false;
        }
        facts.probe = Some((success, now));
        // A backend no call can reach is not left closed (calls would go to it and fail,
        // and `/status` would show it unhealthy behind a closed breaker): the probe's
        // verdict goes to the breaker, the one thing the state is read from.
        let changed = if unreachable && !success {
            // Past its cool-down an open breaker is not tripped again: the probe is its trial.
            facts.breaker.trip(now) || facts.breaker.probe(false, now, &self.config.breaker)
        } else {
            facts.breaker.probe(success, now, &self.config.breaker)
        };
        let state = facts.breaker.state(now, &self.config.breaker);
        b.open
            .store(state != BreakerState::Closed, Ordering::Release);
        if changed {
            breaker_changed(id, state, "probe");
        }
    }

    /// A backend process was restarted and its replacement answered the handshake: an open
    /// breaker goes straight to half-open, so the next call tries the new process instead of
    /// waiting out the cool-down the old one earned (a closed one stays closed). Late
    /// failures of the old process stay ignored.
    pub(crate) fn restarted(&self, id: &BackendId) {
        metrics::restarted(id);
        let Some(b) = self.backends.load().get(id).cloned() else {
            return;
        };
        b.restarts.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut facts = b.inner.lock();
        facts.seen = true;
        facts.up_since = Some(now);
        facts.probe = Some((true, now));
        if facts.breaker.restarted() {
            breaker_changed(id, BreakerState::HalfOpen, "restart");
        }
    }

    /// One backend's state and breaker now.
    pub(crate) fn state_of(&self, id: &BackendId) -> Option<(HealthState, BreakerState)> {
        let b = self.backends.load().get(id).cloned()?;
        let facts = b.inner.lock();
        Some(self.judge(&facts, Instant::now()))
    }

    /// The state the facts make, with the breaker's: `unhealthy` only behind a breaker that
    /// is not closed (open, or half-open after a failed probe); a failure the breaker has not
    /// opened on (a probe or call failed, the count below the threshold) is `degraded`.
    fn judge(&self, facts: &Facts, now: Instant) -> (HealthState, BreakerState) {
        let breaker = facts.breaker.state(now, &self.config.breaker);
        let probe_failed = facts.probe.is_some_and(|(ok, _)| !ok);
        let state = if facts.unauthenticated {
            HealthState::Unauthenticated
        } else if breaker == BreakerState::Open
            || (breaker == BreakerState::HalfOpen && probe_failed)
        {
            HealthState::Unhealthy
        } else if !facts.seen {
            HealthState::Starting
        } else if breaker == BreakerState::HalfOpen
            || probe_failed
            || facts.breaker.consecutive_failures() > 0
        {
            HealthState::Degraded
        } else {
            HealthState::Healthy
        };
        (state, breaker)
    }

    /// Whether the gateway is ready to serve (`/readyz`): at least one backend serving, or
    /// every one ([`ReadyWhen`]).
    pub fn ready(&self) -> bool {
        let table = self.backends.load();
        let mut serving = table
            .keys()
            .map(|id| self.state_of(id).is_some_and(|(s, _)| s.serves()));
        match self.config.ready_when {
            ReadyWhen::Any => serving.any(|s| s),
            ReadyWhen::All => serving.all(|s| s) && self.absent.lock().is_empty(),
        }
    }

    /// Sets the backend gauges for a scrape.
    pub(crate) fn export(&self) {
        for (id, b) in self.backends.load().iter() {
            if let Some((state, breaker)) = self.state_of(id) {
                let in_flight = b.in_flight.load(Ordering::Relaxed);
                let state = (&HealthState::WORDS[..], state.as_str());
                metrics::set_backend(id, state, breaker.as_str(), in_flight);
            }
        }
    }
}

impl BackendHealth {
    /// The answer to a call the open breaker refuses: names the backend, how many failures
    /// opened it and when it tries again.
    fn refusal(&self, backend: &BackendId, now: Instant, config: &BreakerConfig) -> CoreError {
        let facts = self.inner.lock();
        let retry_in = facts.breaker.retry_in(now, config).unwrap_or_default();
        CoreError::Unavailable {
            backend: backend.clone(),
            failures: facts.breaker.failures(),
            // Whole seconds, rounded up: "retrying in 0s" would invite a retry that fails.
            retry_in: u64::try_from(retry_in.as_millis().div_ceil(1000))
                .unwrap_or(u64::MAX)
                .max(1),
            aggregated: false,
        }
    }
}

fn entry(connected: bool) -> Arc<BackendHealth> {
    let b = BackendHealth::default();
    {
        let mut facts = b.inner.lock();
        facts.seen = connected;
        facts.up_since = connected.then(Instant::now);
    }
    Arc::new(b)
}

/// Every breaker change is one warning: an operator learns of it without `/status`.
fn breaker_changed(backend: &BackendId, state: BreakerState, by: &'static str) {
    tracing::warn!(%backend, breaker = state.as_str(), by, "circuit breaker changed");
}

/// A call to a backend's end, counted once for `/metrics` and in the backend's last minute
/// for `/status` (`recent`: timed unless it was refused), from the same outcome and duration.
pub(crate) fn call_ended(
    backend: &BackendId,
    method: metrics::Method,
    outcome: &'static str,
    took: Duration,
    recent: Option<&Recent>,
) {
    if let Some(recent) = recent {
        let timed = (outcome != "refused").then_some(took);
        recent.record(std::time::Instant::now(), timed);
    }
    metrics::backend_call(backend, method, outcome, took);
}
