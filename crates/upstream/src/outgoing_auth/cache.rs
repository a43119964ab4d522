//! Tokens the gateway obtained, kept until shortly before they expire: keyed by a SHA-256
//! digest (of the subject token and the backend, for an exchange), never by a token itself; at
//! most a fixed number of entries; and single-flight per key: concurrent first uses of one key
//! wait for one fetch rather than each making their own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::token_endpoint::Issued;
use super::OutgoingAuthError;

/// A cache key: a digest, never a token.
pub(crate) type Key = [u8; 32];

/// The most seconds before expiry a token is fetched again (less for short-lived ones: see
/// [`refresh_margin`]).
const MAX_MARGIN: Duration = Duration::from_secs(30);

/// How long before its expiry a token of `lifetime` stops being used: 30 s, or half its
/// lifetime when that is shorter (a 10 s token is used for 5 s).
pub(crate) fn refresh_margin(lifetime: Duration) -> Duration {
    MAX_MARGIN.min(lifetime / 2)
}

/// One cached token, and until when it is used.
#[derive(Debug, Clone)]
struct Entry {
    issued: Issued,
    use_until: Instant,
}

/// One key's place: its token, and the lock one fetch at a time holds.
#[derive(Debug, Default)]
struct Slot {
    entry: tokio::sync::Mutex<Option<Entry>>,
}

/// A bounded, single-flight token cache.
#[derive(Debug)]
pub(crate) struct TokenCache {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    max: usize,
}

impl TokenCache {
    /// A cache of at most `max` tokens.
    pub(crate) fn new(max: usize) -> Self {
        TokenCache {
            slots: Mutex::new(HashMap::new()),
            max: max.max(1),
        }
    }

    /// The token under `key` while it is fresh; else `fetch`'s, kept for next time. Callers
    /// of one key wait for one fetch; a failed fetch is not kept (the next caller tries again).
    pub(crate) async fn get_or_fetch<F, Fut>(
        &self,
        key: &Key,
        fetch: F,
    ) -> Result<Issued, OutgoingAuthError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Issued, OutgoingAuthError>>,
    {
        let slot = self.slot(key);
        let mut entry = slot.entry.lock().await;
        if let Some(e) = entry.as_ref().filter(|e| Instant::now() < e.use_until) {
            return Ok(e.issued.clone());
        }
        let issued = fetch().await?;
        let use_until = Instant::now() + issued.lifetime - refresh_margin(issued.lifetime);
        *entry = Some(Entry {
            issued: issued.clone(),
            use_until,
        });
        Ok(issued)
    }

    /// Forgets `key`'s token if it is still `sent` (the upstream refused it): the next use
    /// fetches a new one. A token fetched meanwhile by someone else is kept.
    pub(crate) async fn forget(&self, key: &Key, sent: &hyper::header::HeaderValue) {
        let slot = self.slots.lock().get(key).cloned();
        if let Some(slot) = slot {
            let mut entry = slot.entry.lock().await;
            if entry.as_ref().is_some_and(|e| e.issued.header == *sent) {
                *entry = None;
            }
        }
    }

    /// Tokens (and fetches under way) held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }

    /// `key`'s slot, made room for when the cache is full: first every expired token goes,
    /// then the one expiring soonest (a slot being fetched counts as expiring now; whoever
    /// waits on it still gets its token).
    fn slot(&self, key: &Key) -> Arc<Slot> {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        if slots.len() >= self.max {
            let now = Instant::now();
            let until = |slot: &Slot| {
                slot.entry
                    .try_lock()
                    .ok()
                    .and_then(|e| e.as_ref().map(|e| e.use_until))
            };
            slots.retain(|_, slot| until(slot).is_some_and(|u| u > now));
            if slots.len() >= self.max {
                let soonest = slots
                    .iter()
                    .min_by_key(|(_, slot)| until(slot).unwrap_or(now))
                    .map(|(k, _)| *k);
                if let Some(k) = soonest {
                    slots.remove(&k);
                }
            }
        }
        slots.entry(*key).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn token(n: usize, lifetime: Duration) -> Issued {
        Issued {
            header: HeaderValue::from_str(&format!("Bearer t{n}")).unwrap(),
            lifetime,
        }
    }

    fn shown(i: &Issued) -> &str {
        i.header.to_str().unwrap()
    }

    #[test]
    fn the_margin_is_thirty_seconds_or_half_the_lifetime() {
        assert_eq!(
            refresh_margin(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            refresh_margin(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(refresh_margin(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test]
    async fn concurrent_first_uses_of_a_key_make_one_fetch() {
        let cache = Arc::new(TokenCache::new(16));
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cache, fetches) = (cache.clone(), fetches.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_fetch(&[1; 32], || async {
                        let n = fetches.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(token(n, Duration::from_secs(600)))
                    })
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(shown(&t.await.unwrap()), "Bearer t0");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Another key is another fetch.
        let other = cache
            .get_or_fetch(&[2; 32], || async {
                Ok(token(9, Duration::from_secs(600)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&other), "Bearer t9");
    }

    #[tokio::test]
    async fn a_token_near_its_expiry_is_fetched_again_and_a_failure_is_not_kept() {
        let cache = TokenCache::new(16);
        // A 0 s token is past its margin at once: every use fetches.
        let first = cache
            .get_or_fetch(&[1; 32], || async { Ok(token(1, Duration::ZERO)) })
            .await
            .unwrap();
        assert_eq!(shown(&first), "Bearer t1");
        let failed = cache
            .get_or_fetch(&[1; 32], || async {
                Err(OutgoingAuthError::refused(Some("invalid_grant")))
            })
            .await;
        assert!(failed.is_err());
        let again = cache
            .get_or_fetch(&[1; 32], || async {
                Ok(token(2, Duration::from_secs(600)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&again), "Bearer t2");
        let kept = cache
            .get_or_fetch(&[1; 32], || async {
                Ok(token(3, Duration::from_secs(600)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&kept), "Bearer t2");
    }

    #[tokio::test]
    async fn a_refused_token_is_forgotten_only_if_still_current() {
        let cache = TokenCache::new(16);
        let long = Duration::from_secs(600);
        cache
            .get_or_fetch(&[1; 32], || async { Ok(token(1, long)) })
            .await
            .unwrap();
        let stale = HeaderValue::from_static("Bearer t0");
        cache.forget(&[1; 32], &stale).await;
        let same = cache
            .get_or_fetch(&[1; 32], || async { Ok(token(2, long)) })
            .await
            .unwrap();
        assert_eq!(shown(&same), "Bearer t1");
        cache
            .forget(&[1; 32], &HeaderValue::from_static("Bearer t1"))
            .await;
        let fresh = cache
            .get_or_fetch(&[1; 32], || async { Ok(token(3, long)) })
            .await
            .unwrap();
        assert_eq!(shown(&fresh), "Bearer t3");
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = TokenCache::new(4);
        for i in 0..20u8 {
            cache
                .get_or_fetch(&[i; 32], || async {
                    Ok(token(
                        usize::from(i),
                        Duration::from_secs(600 + u64::from(i)),
                    ))
                })
                .await
                .unwrap();
            assert!(cache.len() <= 4);
        }
        // The newest survive (the soonest-expiring went first).
        let kept = cache
            .get_or_fetch(&[19; 32], || async {
                Ok(token(99, Duration::from_secs(1)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&kept), "Bearer t19");
    }
}
