//! Whose call each key is, on a stateless handle acting as its callers (which every principal
//! shares, so it has no credential of its own to send a line with): the cancellation of a
//! call carries that call's credential, as the call did, so a remote that checks tokens
//! accepts it.
//!
//! A call's entry lives while the call does; one withdrawn before its answer (core then
//! sends its cancellation: the call is dropped first, the line sent next) stays for a short
//! grace, bounded in number. A cancellation takes the entry: used once.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::Credential;

/// How long a withdrawn call's credential waits for its cancellation.
const GRACE: Duration = Duration::from_secs(5);
/// Most withdrawn calls remembered at once (the oldest go first).
const MAX_WITHDRAWN: usize = 4096;

/// Calls in flight (and lately withdrawn) on one stateless handle, by key.
#[derive(Debug, Default)]
pub(super) struct Callers {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    calls: HashMap<Box<str>, Held>,
    /// Withdrawn calls, oldest first: when each was withdrawn, its key and entry.
    withdrawn: VecDeque<(Instant, Box<str>, u64)>,
    /// Counts entries, so a key reused after its entry went is told from the old one.
    next: u64,
}

#[derive(Debug)]
struct Held {
    credential: Credential,
    id: u64,
}

impl Callers {
    /// Notes that the call under `key` acts for `credential`, until the returned guard is
    /// finished (answered) or dropped (withdrawn: kept for [`GRACE`]).
    pub(super) fn hold(self: &Arc<Self>, key: &str, credential: &Credential) -> Calling {
        let mut inner = self.inner.lock();
        inner.expire(Instant::now());
        let id = inner.next;
        inner.next += 1;
        inner.calls.insert(
            key.into(),
            Held {
                credential: credential.clone(),
                id,
            },
        );
        Calling {
            callers: self.clone(),
            key: key.into(),
            id,
        }
    }

    /// The credential of the call under `key`, taken: its cancellation is being sent.
    pub(super) fn take(&self, key: &str) -> Option<Credential> {
        let mut inner = self.inner.lock();
        inner.expire(Instant::now());
        inner.calls.remove(key).map(|h| h.credential)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().calls.len()
    }
}

impl Inner {
    /// Forgets withdrawn calls past their grace, and the oldest beyond the bound.
    fn expire(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.withdrawn.front() {
            let past = now.saturating_duration_since(*at) >= GRACE;
            if !past && self.withdrawn.len() <= MAX_WITHDRAWN {
                break;
            }
            if let Some((_, key, id)) = self.withdrawn.pop_front() {
                if self.calls.get(&key).is_some_and(|h| h.id == id) {
                    self.calls.remove(&key);
                }
            }
        }
    }
}

/// One call's entry in [`Callers`].
#[derive(Debug)]
pub(super) struct Calling {
    callers: Arc<Callers>,
    key: Box<str>,
    id: u64,
}

impl Calling {
    /// The call was answered: nothing is left to cancel (its drop then finds no entry).
    pub(super) fn finish(self) {
        let mut inner = self.callers.inner.lock();
        if inner.calls.get(&self.key).is_some_and(|h| h.id == self.id) {
            inner.calls.remove(&self.key);
        }
    }
}

impl Drop for Calling {
    /// Withdrawn before its answer: its cancellation may follow.
    fn drop(&mut self) {
        let mut inner = self.callers.inner.lock();
        if inner.calls.get(&self.key).is_none_or(|h| h.id != self.id) {
            return;
        }
        let now = Instant::now();
        inner.withdrawn.push_back((now, self.key.clone(), self.id));
        inner.expire(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Credential {
        Credential::bearer("alice-token", "https://idp", "alice").unwrap()
    }

    #[test]
    fn an_answered_call_leaves_nothing_and_a_withdrawn_one_is_taken_once() {
        let callers = Arc::new(Callers::default());
        callers.hold("k1", &alice()).finish();
        assert_eq!(callers.len(), 0);
        assert!(callers.take("k1").is_none());
        drop(callers.hold("k2", &alice()));
        assert_eq!(callers.len(), 1, "kept for its cancellation");
        assert!(callers.take("k2").is_some_and(|c| c.has_token()));
        assert!(callers.take("k2").is_none(), "used once");
        // A call cancelled while in flight: taken, and its end finds nothing to do.
        let live = callers.hold("k3", &alice());
        assert!(callers.take("k3").is_some());
        drop(live);
        assert_eq!(callers.len(), 0);
    }

    #[test]
    fn withdrawn_calls_are_bounded() {
        let callers = Arc::new(Callers::default());
        for i in 0..MAX_WITHDRAWN + 10 {
            drop(callers.hold(&format!("k{i}"), &alice()));
        }
        assert_eq!(callers.len(), MAX_WITHDRAWN);
        assert!(callers.take("k0").is_none(), "the oldest went first");
        assert!(callers.take(&format!("k{}", MAX_WITHDRAWN + 9)).is_some());
    }
}
