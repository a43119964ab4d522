//! Owner-bound workflow handles: a composite run waiting for a Modern client's input is
//! parked here, named by a gateway-minted handle that goes out as the `requestState`.
//!
//! A handle is 256 bits from the CSPRNG (`route::random_hex`, twice), opaque, and bound to
//! the principal (issuer and subject) that started the run. Taking it checks the owner;
//! another principal, an expired handle and an unknown one all get `None` — the caller
//! answers them identically — and a foreign attempt leaves the owner's handle in place (it
//! cannot be used to cancel someone's run), as does the owner's resume through another
//! composite's name. A handle is single use: a resume removes it, and
//! a run that needs input again gets a fresh one. The table is bounded per principal and in
//! total, in number and in bytes; expired entries are reaped whenever the table is written (no timer task: a parked
//! run holds no process, socket or task, only the outputs of its finished steps).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::Principal;

/// Why a run could not be parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParkError {
    #[error("this caller already has {0} workflows waiting for input")]
    PerPrincipal(usize),
    #[error("{0} workflows are already waiting for input")]
    Full(usize),
    #[error("the workflows waiting for input would hold more than {0} bytes")]
    Bytes(usize),
}

/// Bounds of parked runs (each one's lifetime is its composite's `inputTimeout`).
#[derive(Debug, Clone, Copy)]
pub struct HandleLimits {
    pub per_principal: usize,
    pub total: usize,
    /// Bytes all parked runs may hold together (each run's own bound is
    /// `workflow::MAX_PARKED_BYTES`): without it, `total` runs of up to a MiB each.
    pub total_bytes: usize,
}

impl Default for HandleLimits {
    fn default() -> Self {
        HandleLimits {
            per_principal: 16,
            total: 1024,
            total_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug)]
struct Entry<T> {
    owner: (String, String),
    expires: Instant,
    /// What the value holds, in bytes (as its parker measured it).
    weight: usize,
    value: T,
}

/// The table of parked runs (`T`: what a resume needs).
#[derive(Debug)]
pub(crate) struct Handles<T> {
    limits: HandleLimits,
    entries: parking_lot::Mutex<HashMap<String, Entry<T>>>,
}

impl<T> Handles<T> {
    pub(crate) fn new(limits: HandleLimits) -> Self {
        Handles {
            limits,
            entries: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Parks `value` (holding `weight` bytes) for `owner` and returns its handle.
    pub(crate) fn park(
        &self,
        owner: &Principal,
        ttl: Duration,
        value: T,
        weight: usize,
    ) -> Result<String, ParkError> {
        let now = Instant::now();
        let key = (owner.issuer.clone(), owner.subject.clone());
        // Expired values are dropped outside the lock.
        let expired: Vec<Entry<T>>;
        let mut entries = self.entries.lock();
        {
            let gone: Vec<String> = entries
                .iter()
                .filter(|(_, e)| e.expires <= now)
                .map(|(h, _)| h.clone())
                .collect();
            expired = gone.iter().filter_map(|h| entries.remove(h)).collect();
        }
        if entries.len() >= self.limits.total {
            return Err(ParkError::Full(self.limits.total));
        }
        let mine = entries.values().filter(|e| e.owner == key).count();
        if mine >= self.limits.per_principal {
            return Err(ParkError::PerPrincipal(self.limits.per_principal));
        }
        let held: usize = entries.values().map(|e| e.weight).sum();
        if held.saturating_add(weight) > self.limits.total_bytes {
            return Err(ParkError::Bytes(self.limits.total_bytes));
        }
        let handle = format!(
            "wf_{}{}",
            crate::route::random_hex(),
            crate::route::random_hex()
        );
        entries.insert(
            handle.clone(),
            Entry {
                owner: key,
                expires: now + ttl,
                weight,
                value,
            },
        );
        drop(entries);
        drop(expired);
        Ok(handle)
    }

    /// The parked value, removed, when `handle` names a live run of `caller`'s that `fits`
    /// (the resume names the run's own composite); `None` for an unknown, expired or foreign
    /// handle, or one that does not fit — the last two stay in place, for the owner's own
    /// resume.
    pub(crate) fn take(
        &self,
        caller: &Principal,
        handle: &str,
        fits: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        let mut entries = self.entries.lock();
        let entry = entries.get(handle)?;
        if entry.owner.0 != caller.issuer || entry.owner.1 != caller.subject {
            return None;
        }
        if !fits(&entry.value) {
            return None;
        }
        let entry = entries.remove(handle)?;
        drop(entries);
        (entry.expires > Instant::now()).then_some(entry.value)
    }

    /// Runs parked now (expired ones included until the next write).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(sub: &str) -> Principal {
        Principal {
            issuer: "api-key".into(),
            subject: sub.into(),
            claims: serde_json::Map::new(),
            credential: None,
        }
    }

    fn limits(per: usize, total: usize) -> HandleLimits {
        HandleLimits {
            per_principal: per,
            total,
            total_bytes: 1 << 20,
        }
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_handle_is_single_use_and_owned() {
        let table = Handles::new(limits(4, 8));
        let h = table.park(&who("alice"), MIN, 7, 1).unwrap();
        assert!(h.len() >= 3 + 64, "256 bits of hex: {h}");
        let any = |_: &i32| true;
        assert_eq!(table.take(&who("bob"), &h, any), None, "foreign");
        assert_eq!(table.take(&who("alice"), "wf_nope", any), None, "unknown");
        assert_eq!(
            table.take(&who("alice"), &h, |v| *v == 8),
            None,
            "the owner, for another run"
        );
        assert_eq!(
            table.take(&who("alice"), &h, |v| *v == 7),
            Some(7),
            "the owner, after bob and a misfit tried"
        );
        assert_eq!(table.take(&who("alice"), &h, any), None, "single use");
    }

    #[test]
    fn bounded_per_principal_and_in_total() {
        let table = Handles::new(limits(2, 3));
        table.park(&who("a"), MIN, 1, 1).unwrap();
        table.park(&who("a"), MIN, 2, 1).unwrap();
        assert_eq!(
            table.park(&who("a"), MIN, 3, 1),
            Err(ParkError::PerPrincipal(2))
        );
        table.park(&who("b"), MIN, 4, 1).unwrap();
        assert_eq!(table.park(&who("c"), MIN, 5, 1), Err(ParkError::Full(3)));
    }

    #[test]
    fn bounded_in_bytes_all_together() {
        let table = Handles::new(HandleLimits {
            total_bytes: 10,
            ..limits(4, 8)
        });
        let first = table.park(&who("a"), MIN, 1, 6).unwrap();
        assert_eq!(table.park(&who("b"), MIN, 2, 5), Err(ParkError::Bytes(10)));
        table.park(&who("b"), MIN, 3, 4).unwrap();
        // A resumed run gives its bytes back.
        assert_eq!(table.take(&who("a"), &first, |_| true), Some(1));
        table.park(&who("b"), MIN, 2, 5).unwrap();
    }

    #[test]
    fn expired_handles_answer_like_unknown_and_are_reaped() {
        let table = Handles::new(limits(1, 1));
        let h = table.park(&who("a"), Duration::ZERO, 1, 1).unwrap();
        assert_eq!(table.take(&who("a"), &h, |_| true), None);
        let table = Handles::new(limits(1, 1));
        table.park(&who("a"), Duration::ZERO, 1, 1).unwrap();
        // The expired entry is reaped on the next write, so the bound is free again.
        table.park(&who("a"), MIN, 2, 1).unwrap();
        assert_eq!(table.len(), 1);
    }
}
