//! Each principal's fair share of the MRTR bridge.
//!
//! The dedicated processes (running or parked calls) are one pool for every caller. A parked
//! call costs its caller nothing to keep (no open connection) and holds its process for the
//! held TTL, so without a per-principal bound one caller could park the whole pool and make
//! every other caller's bridged calls fail for minutes. A [`SharePermit`] is one unit of a
//! principal's share; it is owned by the call (RAII), so every way a call ends (completed,
//! failed, expired, abandoned, gateway shutdown) gives it back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default share: an eighth of the pool, at least one call.
pub(crate) fn default_share(pool: usize) -> usize {
    (pool / 8).max(1)
}

/// Calls in use per principal, each with the time by which it will have ended at the latest
/// (so a refused caller can be told when to retry).
#[derive(Debug)]
pub(crate) struct Shares {
    limit: usize,
    inner: parking_lot::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    by_principal: HashMap<String, HashMap<u64, Instant>>,
}

/// One call's unit of its principal's share. Dropping it releases the unit.
#[derive(Debug)]
pub(crate) struct SharePermit {
    shares: Arc<Shares>,
    principal: String,
    id: u64,
}

impl Shares {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Shares {
            limit: limit.max(1),
            inner: parking_lot::Mutex::new(Inner::default()),
        })
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Takes one unit of `principal`'s share for a call that ends by `until`, or says in how
    /// many seconds (at least 1) the caller's earliest call will have ended.
    pub(crate) fn try_take(
        self: &Arc<Self>,
        principal: &str,
        until: Instant,
    ) -> Result<SharePermit, u64> {
        let mut inner = self.inner.lock();
        inner.next += 1;
        let id = inner.next;
        let held = inner.by_principal.entry(principal.to_owned()).or_default();
        if held.len() >= self.limit {
            let now = Instant::now();
            let soonest = held
                .values()
                .min()
                .map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
            return Err(soonest.as_secs_f64().ceil().max(1.0) as u64);
        }
        held.insert(id, until);
        Ok(SharePermit {
            shares: self.clone(),
            principal: principal.to_owned(),
            id,
        })
    }

    /// Units in use (for tests and the leak accounting).
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.inner
            .lock()
            .by_principal
            .values()
            .map(HashMap::len)
            .sum()
    }
}

impl SharePermit {
    /// The call now ends by `until` at the latest (parked: the held TTL; resumed: the request
    /// deadline).
    pub(crate) fn until(&self, until: Instant) {
        let mut inner = self.shares.inner.lock();
        if let Some(t) = inner
            .by_principal
            .get_mut(&self.principal)
            .and_then(|m| m.get_mut(&self.id))
        {
            *t = until;
        }
    }
}

impl Drop for SharePermit {
    fn drop(&mut self) {
        let mut inner = self.shares.inner.lock();
        if let Some(held) = inner.by_principal.get_mut(&self.principal) {
            held.remove(&self.id);
            if held.is_empty() {
                inner.by_principal.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_per_principal_and_released_on_drop() {
        let shares = Shares::new(2);
        let later = Instant::now() + Duration::from_secs(30);
        let a1 = shares.try_take("a", later).unwrap();
        let a2 = shares
            .try_take("a", later + Duration::from_secs(60))
            .unwrap();
        let retry = shares.try_take("a", later).unwrap_err();
        assert!((29..=30).contains(&retry), "{retry}");
        // Another principal is unaffected.
        let b = shares.try_take("b", later).unwrap();
        drop(a1);
        let a3 = shares.try_take("a", later).unwrap();
        a3.until(Instant::now());
        // The soonest end is now: still at least one second.
        assert_eq!(shares.try_take("a", later).unwrap_err(), 1);
        drop((a2, a3, b));
        assert_eq!(shares.in_use(), 0);
        assert!(shares.inner.lock().by_principal.is_empty());
    }

    #[test]
    fn the_default_is_an_eighth_of_the_pool() {
        assert_eq!(default_share(128), 16);
        assert_eq!(default_share(3), 1);
        assert_eq!(default_share(0), 1);
    }
}
