//! One backend's circuit breaker, as a pure state machine (time is passed in, nothing here
//! sleeps or locks): `closed` lets calls through and counts their outcomes; `open` refuses
//! them at once; after the cool-down the next call (or the probe) is the one *trial* of
//! `half-open`, and its outcome closes the breaker or opens it again.
//!
//! It opens on `consecutive` failures in a row, or when at least `min_calls` of the last
//! `window` outcomes are recorded and the failed share of them reaches `failure_rate`. A
//! count-based window (the last N outcomes, a bit each) rather than a time-based one: it
//! costs a shift and a popcount per call, and a backend that gets few calls is still judged
//! on enough of them.

use std::time::{Duration, Instant};

/// Most outcomes the rate window can hold (one bit each in a `u64`).
pub(crate) const MAX_WINDOW: u32 = 64;

/// When a breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Failures in a row that open it.
    pub consecutive_failures: u32,
    /// Share of failed outcomes in the window (0..=1) that opens it.
    pub failure_rate: f64,
    /// Outcomes the rate is computed over (at most 64).
    pub window: u32,
    /// Outcomes the window must hold before the rate is judged.
    pub min_calls: u32,
    /// How long it stays open before a trial is let through.
    pub cool_down: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            failure_rate: 0.5,
            window: 20,
            min_calls: 10,
            cool_down: Duration::from_secs(10),
        }
    }
}

/// What the breaker shows (for `/status` and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls pass.
    Closed,
    /// Calls are refused at once.
    Open,
    /// The cool-down has passed: the next call or probe is the trial.
    HalfOpen,
}

impl BreakerState {
    /// As `/status` and `/metrics` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Whether a call may go to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed: go, and report the outcome.
    Pass,
    /// Half-open: go as the one trial; its outcome decides.
    Trial,
    /// Open (or a trial is already out): fail fast.
    Refuse,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Closed,
    Open {
        since: Instant,
    },
    /// `trial`: the trial is out (every other call is refused until it reports).
    HalfOpen {
        trial: bool,
    },
}

/// The state machine. See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    phase: Phase,
    consecutive: u32,
    /// The last `len` outcomes, newest in bit 0; a set bit is a failure.
    window: u64,
    len: u32,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            phase: Phase::Closed,
            consecutive: 0,
            window: 0,
            len: 0,
        }
    }
}

impl Breaker {
    /// What it shows at `now`: an open breaker past its cool-down shows as half-open.
    pub(crate) fn state(&self, now: Instant, config: &BreakerConfig) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { since } if now.duration_since(since) >= config.cool_down => {
                BreakerState::HalfOpen
            }
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Failures in a row so far.
    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.consecutive
    }

    /// The failures that opened it (in a row, or in the window, whichever is more).
    pub(crate) fn failures(&self) -> u32 {
        self.consecutive.max(self.window.count_ones())
    }

    /// How long until a refused call may be the trial: the rest of the cool-down, or (a
    /// trial is out) nothing known. `None` while it admits calls.
    pub(crate) fn retry_in(&self, now: Instant, config: &BreakerConfig) -> Option<Duration> {
        match self.phase {
            Phase::Closed | Phase::HalfOpen { trial: false } => None,
            Phase::Open { since } => Some(config.cool_down.saturating_sub(now - since)),
            Phase::HalfOpen { trial: true } => Some(Duration::ZERO),
        }
    }

    /// A restarted process answered its handshake: an open breaker lets the next call try
    /// the new process at once (half-open, without waiting out the cool-down); its outcome
    /// decides. A closed one keeps its counts, so a process that crashes on every call still
    /// opens it, one crash at a time. Returns whether it changed.
    pub(crate) fn restarted(&mut self) -> bool {
        match self.phase {
            Phase::Open { .. } => {
                self.phase = Phase::HalfOpen { trial: false };
                true
            }
            Phase::Closed | Phase::HalfOpen { .. } => false,
        }
    }

    /// Whether a call may go now (taking the trial when it is the one).
    pub(crate) fn admit(&mut self, now: Instant, config: &BreakerConfig) -> Admission {
        match self.phase {
            Phase::Closed => Admission::Pass,
            Phase::Open { since } if now.duration_since(since) >= config.cool_down => {
                self.phase = Phase::HalfOpen { trial: true };
                Admission::Trial
            }
            Phase::HalfOpen { trial: false } => {
                self.phase = Phase::HalfOpen { trial: true };
                Admission::Trial
            }
            Phase::Open { .. } | Phase::HalfOpen { trial: true } => Admission::Refuse,
        }
    }

    /// A call's outcome (`trial`: it was admitted as the trial). Returns whether the breaker
    /// changed between open and closed.
    pub(crate) fn record(
        &mut self,
        success: bool,
        trial: bool,
        now: Instant,
        config: &BreakerConfig,
    ) -> bool {
        if trial {
            return self.decide(success, now);
        }
        // A call admitted while closed that ends after the breaker opened says nothing new.
        if self.phase != Phase::Closed {
            return false;
        }
        self.push(success, config);
        if self.should_open(config) {
            self.phase = Phase::Open { since: now };
            return true;
        }
        false
    }

    /// The trial went away without an outcome (its caller left): the next call is the trial.
    pub(crate) fn trial_abandoned(&mut self) {
        if self.phase == (Phase::HalfOpen { trial: true }) {
            self.phase = Phase::HalfOpen { trial: false };
        }
    }

    /// The active probe's outcome: counted like a call while closed; past the cool-down (and
    /// with no call out as the trial) it *is* the trial. Returns whether the breaker changed.
    pub(crate) fn probe(&mut self, success: bool, now: Instant, config: &BreakerConfig) -> bool {
        match self.phase {
            Phase::Closed => self.record(success, false, now, config),
            Phase::Open { since } if now.duration_since(since) >= config.cool_down => {
                self.decide(success, now)
            }
            Phase::HalfOpen { trial: false } => self.decide(success, now),
            Phase::Open { .. } | Phase::HalfOpen { trial: true } => false,
        }
    }

    /// The backend cannot be reached at all (the probe found its process gone or its remote
    /// refusing connections): open now, whatever the counts, and count it as a failure. An
    /// open breaker (or one whose trial is out) is left as it is. Returns whether it changed.
    pub(crate) fn trip(&mut self, now: Instant) -> bool {
        match self.phase {
            Phase::Closed | Phase::HalfOpen { trial: false } => {
                self.consecutive = self.consecutive.saturating_add(1);
                self.phase = Phase::Open { since: now };
                true
            }
            Phase::Open { .. } | Phase::HalfOpen { trial: true } => false,
        }
    }

    fn decide(&mut self, success: bool, now: Instant) -> bool {
        if success {
            *self = Breaker::default();
        } else {
            self.consecutive = self.consecutive.saturating_add(1);
            self.phase = Phase::Open { since: now };
        }
        true
    }

    fn push(&mut self, success: bool, config: &BreakerConfig) {
        let size = config.window.clamp(1, MAX_WINDOW);
        self.window = (self.window << 1) | u64::from(!success);
        if size < MAX_WINDOW {
            self.window &= (1u64 << size) - 1;
        }
        self.len = (self.len + 1).min(size);
        self.consecutive = if success {
            0
        } else {
            self.consecutive.saturating_add(1)
        };
    }

    fn should_open(&self, config: &BreakerConfig) -> bool {
        if self.consecutive >= config.consecutive_failures.max(1) {
            return true;
        }
        if self.len < config.min_calls.max(1) {
            return false;
        }
        let failed = f64::from(self.window.count_ones());
        failed / f64::from(self.len) >= config.failure_rate
    }
}

#[cfg(test)]
mod tests;
