//! Resource subscriptions, reference-counted per URI.
//!
//! The backend sees one `resources/subscribe` per URI however many sessions subscribe, and one
//! `resources/unsubscribe` when the last one leaves. Operations on the same URI are serialized
//! by a per-URI async lock held across the upstream call, so a concurrent last-unsubscribe and
//! first-subscribe reach the backend in the order they took the lock. `notifications/resources/
//! updated` goes only to the sessions in the table.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

/// URI → subscribed session ids, and the per-URI operation locks.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    table: Mutex<HashMap<String, HashSet<String>>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds the operation lock of one URI; releases and forgets it on drop.
#[derive(Debug)]
pub(crate) struct UriLock<'a> {
    subs: &'a Subscriptions,
    uri: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for UriLock<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.subs.locks.lock();
        // Only the map holds it now: nobody waits, so the entry can go (bounded by live URIs).
        if locks
            .get(&self.uri)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.uri);
        }
    }
}

impl Subscriptions {
    /// Waits for exclusive use of `uri`.
    pub(crate) async fn lock(&self, uri: &str) -> UriLock<'_> {
        let lock = self.locks.lock().entry(uri.to_owned()).or_default().clone();
        let guard = lock.lock_owned().await;
        UriLock {
            subs: self,
            uri: uri.to_owned(),
            guard: Some(guard),
        }
    }

    /// Whether anyone is subscribed to `uri`.
    pub(crate) fn has_subscribers(&self, uri: &str) -> bool {
        self.table.lock().contains_key(uri)
    }

    /// Records `session` as a subscriber of `uri`.
    pub(crate) fn add(&self, _lock: &UriLock<'_>, session: &str) {
        let uri = &_lock.uri;
        self.table
            .lock()
            .entry(uri.clone())
            .or_default()
            .insert(session.to_owned());
    }

    /// Removes `session` from `uri`; returns true when it was the last subscriber.
    pub(crate) fn remove(&self, _lock: &UriLock<'_>, session: &str) -> bool {
        let uri = &_lock.uri;
        let mut table = self.table.lock();
        let Some(set) = table.get_mut(uri) else {
            return false;
        };
        let removed = set.remove(session);
        if set.is_empty() {
            table.remove(uri);
            return removed;
        }
        false
    }

    /// The sessions subscribed to `uri`.
    pub(crate) fn subscribers(&self, uri: &str) -> Vec<String> {
        self.table
            .lock()
            .get(uri)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every URI with at least one subscriber.
    pub(crate) fn uris(&self) -> Vec<String> {
        self.table.lock().keys().cloned().collect()
    }

    /// Subscribed URIs plus live per-URI locks (for leak tests).
    pub(crate) fn len(&self) -> usize {
        self.table.lock().len() + self.locks.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reference_counting_and_cleanup() {
        let subs = Subscriptions::default();
        {
            let l = subs.lock("u").await;
            assert!(!subs.has_subscribers("u"));
            subs.add(&l, "a");
            subs.add(&l, "b");
        }
        assert_eq!(subs.subscribers("u").len(), 2);
        {
            let l = subs.lock("u").await;
            assert!(!subs.remove(&l, "a"));
            assert!(!subs.remove(&l, "nobody"));
            assert!(subs.remove(&l, "b"), "last one out");
        }
        assert_eq!(subs.len(), 0, "no table rows and no locks left");
    }

    #[tokio::test]
    async fn same_uri_operations_are_serialized() {
        let subs = Arc::new(Subscriptions::default());
        let first = subs.lock("u").await;
        let s2 = subs.clone();
        let waiter = tokio::spawn(async move {
            let _l = s2.lock("u").await;
        });
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "second operation waits for the first"
        );
        let other = subs.lock("v").await;
        drop(other);
        drop(first);
        waiter.await.unwrap();
        assert_eq!(subs.len(), 0);
    }
}
