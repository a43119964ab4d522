//! One shared stdio backend served by N processes of the same command (`replicas: N`), for
//! servers that keep no per-client state: a request goes to the replica with the fewest calls
//! in flight (one atomic counter per replica, read without a lock).
//!
//! What stays attributed to one process:
//! - a call's answer: each replica's reader resolves the calls in its own pending table;
//! - the backend's own messages: each replica's reader hands them on with a handle pinned to
//!   that replica, so an answer to its request (a `ping`, a refusal) goes back to it, and
//!   progress is attributed by the gateway-minted token whichever replica sent it;
//! - a cancellation: it goes to the replica whose pending table holds the call's key
//!   ([`Replicated::for_key`]), or to the one a request was pinned to;
//! - a subscription: `resources/subscribe` and `resources/unsubscribe` for a URI always go to
//!   the same replica (chosen by the URI, [`Replicated::for_uri`]), whose `resources/updated`
//!   notifications are the ones that come back.
//!
//! A notification with no key (`roots/list_changed`) goes to every replica.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::stdio::StdioHandle;
use crate::{PendingCall, UpstreamError};

/// The most processes one backend may have.
pub const MAX_REPLICAS: usize = 64;

/// Added to a replica's load while its process is down, so it is chosen only when every
/// replica is.
const DOWN: usize = 1 << (usize::BITS - 2);

/// A cloneable handle to the processes of one replicated backend; pinned to one of them, or
/// choosing one per call.
#[derive(Debug, Clone)]
pub struct Replicated {
    set: Arc<Set>,
    pinned: Option<usize>,
}

#[derive(Debug)]
struct Set {
    replicas: Box<[Replica]>,
}

/// One process's slot and its calls in flight, on a cache line of its own (every call writes
/// the counter). Whether it runs is its handle's (`StdioHandle::is_closed`): the process the
/// slot holds now, never one a restart replaced.
#[derive(Debug)]
#[repr(align(64))]
struct Replica {
    handle: StdioHandle,
    in_flight: Arc<AtomicUsize>,
}

/// One call counted in its replica's calls in flight, until dropped.
#[derive(Debug)]
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Replicated {
    /// The set of `replicas`, each a started process's handle. At least one, at most
    /// [`MAX_REPLICAS`].
    pub fn new(replicas: Vec<StdioHandle>) -> Result<Replicated, UpstreamError> {
        if replicas.is_empty() || replicas.len() > MAX_REPLICAS {
            return Err(UpstreamError::Spawn {
                program: String::new(),
                reason: format!("replicas must be 1 to {MAX_REPLICAS}"),
            });
        }
        let replicas = replicas
            .into_iter()
            .map(|handle| Replica {
                handle,
                in_flight: Arc::new(AtomicUsize::new(0)),
            })
            .collect();
        Ok(Replicated {
            set: Arc::new(Set { replicas }),
            pinned: None,
        })
    }

    /// How many processes.
    pub fn len(&self) -> usize {
        self.set.replicas.len()
    }

    /// Never: a set has at least one process.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Which replica this handle is pinned to, if any.
    pub fn pinned(&self) -> Option<usize> {
        self.pinned
    }

    /// Replica `i`'s process ids (for `/status` and tests).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.set.replicas.iter().map(|r| r.handle.pid()).collect()
    }

    /// Calls in flight per replica.
    pub fn loads(&self) -> Vec<usize> {
        let loads = self.set.replicas.iter();
        loads.map(|r| r.in_flight.load(Ordering::Relaxed)).collect()
    }

    fn pin(&self, i: usize) -> Replicated {
        Replicated {
            set: self.set.clone(),
            pinned: Some(i),
        }
    }

    /// Pinned to the replica with the fewest calls in flight (a running one, while there is
    /// one; the first of equals). Reads one atomic per replica, and the slot read lock of the
    /// least busy one (of each, only when that one is down).
    pub fn least_busy(&self) -> Replicated {
        if self.pinned.is_some() {
            return self.clone();
        }
        self.pin(self.least_busy_index())
    }

    fn least_busy_index(&self) -> usize {
        // Whether one runs takes its slot's lock: asked of the least busy one only, and of
        // every one only when that one is down (rare).
        let best = self.least_loaded(|_| false);
        match self.set.replicas[best].handle.is_closed() {
            false => best,
            true => self.least_loaded(|r| r.handle.is_closed()),
        }
    }

    /// The first replica with the fewest calls in flight, those `down` says are down counted
    /// only when every replica is.
    fn least_loaded(&self, down: impl Fn(&Replica) -> bool) -> usize {
        let mut best = (usize::MAX, 0);
        for (i, r) in self.set.replicas.iter().enumerate() {
            let mut load = r.in_flight.load(Ordering::Relaxed);
            if down(r) {
                load = load.saturating_add(DOWN);
            }
            if load < best.0 {
                best = (load, i);
            }
        }
        best.1
    }

    /// Pinned to the replica that serves subscriptions to `uri` (the same one for every
    /// subscribe and unsubscribe of it, for the life of the set).
    pub fn for_uri(&self, uri: &str) -> Replicated {
        self.pin(self.uri_index(uri))
    }

    /// Which replica serves subscriptions to `uri`.
    pub fn uri_index(&self, uri: &str) -> usize {
        // Fixed seeds: the same URI maps to the same replica for the life of the process.
        let mut h = foldhash::fast::FixedState::with_seed(0x5eed).build_hasher();
        h.write(uri.as_bytes());
        (h.finish() % self.len() as u64) as usize
    }

    /// Pinned to the replica whose call under `key` awaits its answer (where its
    /// cancellation goes); `None` when none does. A pinned handle stays pinned.
    pub fn for_key(&self, key: &str) -> Option<Replicated> {
        if self.pinned.is_some() {
            return Some(self.clone());
        }
        let at = self.set.replicas.iter().position(|r| r.handle.holds(key))?;
        Some(self.pin(at))
    }

    fn replica(&self) -> &Replica {
        let i = self.pinned.unwrap_or_else(|| self.least_busy_index());
        &self.set.replicas[i]
    }

    /// Sends one request to the pinned replica (else the least busy), counted in its calls
    /// in flight until answered or dropped.
    pub async fn call(&self, key: &str, line: Vec<u8>) -> Result<PendingCall, UpstreamError> {
        let replica = self.replica();
        replica.in_flight.fetch_add(1, Ordering::Relaxed);
        let counted = Counted(replica.in_flight.clone());
        Ok(replica.handle.call(key, line).await?.counted(counted))
    }

    /// A line that expects no answer: to the pinned replica, else to every replica.
    pub async fn send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        if let Some(i) = self.pinned {
            return self.set.replicas[i].handle.send_line(line).await;
        }
        let mut sent = Err(UpstreamError::Closed("no replica running".into()));
        for r in self.set.replicas.iter() {
            if r.handle.send_line(line.clone()).await.is_ok() {
                sent = Ok(());
            }
        }
        sent
    }

    /// Like [`send_line`](Self::send_line), never waiting.
    pub fn try_send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        if let Some(i) = self.pinned {
            return self.set.replicas[i].handle.try_send_line(line);
        }
        let mut sent = Err(UpstreamError::Closed("no replica running".into()));
        for r in self.set.replicas.iter() {
            if r.handle.try_send_line(line.clone()).is_ok() {
                sent = Ok(());
            }
        }
        sent
    }

    /// Calls awaiting an answer, across the replicas (or the pinned one's).
    pub fn pending_len(&self) -> usize {
        match self.pinned {
            Some(i) => self.set.replicas[i].handle.pending_len(),
            None => self
                .set
                .replicas
                .iter()
                .map(|r| r.handle.pending_len())
                .sum(),
        }
    }

    /// Whether every process (or the pinned one) has ended.
    pub fn is_closed(&self) -> bool {
        match self.pinned {
            Some(i) => self.set.replicas[i].handle.is_closed(),
            None => self.set.replicas.iter().all(|r| r.handle.is_closed()),
        }
    }

    /// The pinned replica's process id, else the first's.
    pub fn pid(&self) -> Option<u32> {
        self.set.replicas[self.pinned.unwrap_or(0)].handle.pid()
    }
}

#[cfg(test)]
mod tests;
