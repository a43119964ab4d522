//! Tokens the gateway obtained, kept until shortly before they expire: keyed by a SHA-256
//! digest (of the subject token and the backend, for an exchange), never by a token itself; at
//! most a fixed number of entries besides those in use (the least recently used goes first);
//! and single-flight per key: concurrent uses of one key wait
//! for one fetch rather than each making their own, and take its outcome, token or error,
//! whatever the token's lifetime. A failed fetch is remembered for a few seconds and answered
//! from memory, so a refusing or unreachable token service is not asked again by every call.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// How long a failed fetch is remembered: its error is the answer meanwhile.
pub(crate) const FAILURE_MEMORY: Duration = Duration::from_secs(5);

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

/// What a key's last fetch left.
#[derive(Debug, Default)]
enum State {
    /// Nothing (never fetched, or its token forgotten).
    #[default]
    Empty,
    Token(Entry),
    /// The fetch failed: its error answers until `until`.
    Failed {
        error: OutgoingAuthError,
        until: Instant,
    },
}

/// One key's place: what its last fetch left, under the lock one fetch at a time holds.
#[derive(Debug, Default)]
struct Slot {
    state: tokio::sync::Mutex<State>,
    /// Fetches finished here: a caller that finds it changed while it queued for the lock
    /// takes the outcome of the fetch it waited on.
    fetched: AtomicU64,
    /// When it was last asked for, on the cache's [`TokenCache::clock`].
    used: AtomicU64,
}

/// A bounded, single-flight token cache.
#[derive(Debug)]
pub(crate) struct TokenCache {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    max: usize,
    failure_memory: Duration,
    /// Counts every use of a slot: the order of last uses, for eviction.
    clock: AtomicU64,
}

impl TokenCache {
    /// A cache of at most `max` tokens.
    pub(crate) fn new(max: usize) -> Self {
        TokenCache {
            slots: Mutex::new(HashMap::new()),
            max: max.max(1),
            failure_memory: FAILURE_MEMORY,
            clock: AtomicU64::new(0),
        }
    }

    /// The same, remembering a failure for `memory` (tests).
    #[cfg(test)]
    pub(crate) fn with_failure_memory(max: usize, memory: Duration) -> Self {
        TokenCache {
            failure_memory: memory,
            ..TokenCache::new(max)
        }
    }

    /// The token under `key` while it is fresh, or the error of a failed fetch while it is
    /// remembered; else `fetch`'s outcome, kept for next time. Callers of one key wait for one
    /// fetch, and those that waited take its outcome even if the token is already past its
    /// margin (a token issued for 0 or 1 s still serves the calls that waited for it).
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
        let queued_at = slot.fetched.load(Ordering::Acquire);
        let mut state = slot.state.lock().await;
        let waited = slot.fetched.load(Ordering::Acquire) != queued_at;
        let now = Instant::now();
        match &*state {
            State::Token(e) if waited || now < e.use_until => return Ok(e.issued.clone()),
            State::Failed { error, until } if waited || now < *until => {
                return Err(error.clone());
            }
            _ => {}
        }
        // The lifetime counts from before the request: the token service's clock started
        // when it answered, somewhere between the two.
        let asked = Instant::now();
        let outcome = fetch().await;
        *state = match &outcome {
            Ok(issued) => State::Token(Entry {
                issued: issued.clone(),
                use_until: asked + issued.lifetime - refresh_margin(issued.lifetime),
            }),
            Err(error) => State::Failed {
                error: error.clone(),
                until: Instant::now() + self.failure_memory,
            },
        };
        slot.fetched.fetch_add(1, Ordering::Release);
        outcome
    }

    /// Forgets `key`'s token if it is still `sent` (the upstream refused it): the next use
    /// fetches a new one. A token fetched meanwhile by someone else is kept.
    pub(crate) async fn forget(&self, key: &Key, sent: &hyper::header::HeaderValue) {
        let slot = self.slots.lock().get(key).cloned();
        if let Some(slot) = slot {
            let mut state = slot.state.lock().await;
            if matches!(&*state, State::Token(e) if e.issued.header == *sent) {
                *state = State::Empty;
            }
        }
    }

    /// Tokens (and fetches under way) held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }

    /// `key`'s slot, marked used now, and made room for when the cache is full: first every
    /// slot whose token (or remembered failure) is past, then the least recently used. A slot
    /// in use (a fetch under way, or callers waiting on it) is never dropped, which would
    /// split its waiters from the fetch they wait on; while every slot is in use the cache
    /// holds more than `max` (bounded by the calls in flight).
    fn slot(&self, key: &Key) -> Arc<Slot> {
        let now_used = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get(key) {
            slot.used.store(now_used, Ordering::Relaxed);
            return slot.clone();
        }
        if slots.len() >= self.max {
            let now = Instant::now();
            // Only the map holds it (nobody waits on it), and nobody holds its lock.
            let idle = |slot: &Arc<Slot>| Arc::strong_count(slot) == 1;
            let live = |slot: &Arc<Slot>| {
                !idle(slot)
                    || slot.state.try_lock().map_or(true, |s| match &*s {
                        State::Token(e) => e.use_until > now,
                        State::Failed { until, .. } => *until > now,
                        State::Empty => false,
                    })
            };
            slots.retain(|_, slot| live(slot));
            if slots.len() >= self.max {
                let least_recent = slots
                    .iter()
                    .filter(|(_, slot)| idle(slot) && slot.state.try_lock().is_ok())
                    .min_by_key(|(_, slot)| slot.used.load(Ordering::Relaxed))
                    .map(|(k, _)| *k);
                if let Some(k) = least_recent {
                    slots.remove(&k);
                }
            }
        }
        let slot = slots.entry(*key).or_default();
        slot.used.store(now_used, Ordering::Relaxed);
        slot.clone()
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
    async fn a_token_near_its_expiry_is_fetched_again_and_a_failure_is_remembered_a_while() {
        let cache = TokenCache::with_failure_memory(16, Duration::from_millis(200));
        // A 0 s token is past its margin at once: every later use fetches.
        let first = cache
            .get_or_fetch(&[1; 32], || async { Ok(token(1, Duration::ZERO)) })
            .await
            .unwrap();
        assert_eq!(shown(&first), "Bearer t1");
        let refused = || async { Err(OutgoingAuthError::refused(Some("invalid_grant"))) };
        let failed = cache.get_or_fetch(&[1; 32], refused).await.unwrap_err();
        assert_eq!(failed, OutgoingAuthError::refused(Some("invalid_grant")));
        // Remembered: answered with the same error, nothing fetched.
        let remembered = cache
            .get_or_fetch(&[1; 32], || async {
                panic!("fetched while a failure is remembered")
            })
            .await;
        assert_eq!(remembered.unwrap_err(), failed);
        tokio::time::sleep(Duration::from_millis(250)).await;
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

    /// A token's lifetime counts from before it was asked for, not from the answer: one whose
    /// answer took longer than its margin is not used again (it might expire on the way).
    #[tokio::test]
    async fn the_lifetime_counts_from_before_the_request() {
        let cache = TokenCache::new(16);
        // Lives 1 s, so is used for 0.5 s from the request: over by the time it arrives.
        let slow = cache
            .get_or_fetch(&[1; 32], || async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                Ok(token(1, Duration::from_secs(1)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&slow), "Bearer t1", "the fetching call still uses it");
        let next = cache
            .get_or_fetch(&[1; 32], || async {
                Ok(token(2, Duration::from_secs(600)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&next), "Bearer t2");
    }

    #[tokio::test]
    async fn those_waiting_on_a_fetch_take_its_outcome_whatever_it_is() {
        for outcome in [
            Ok(token(0, Duration::ZERO)),
            Ok(token(0, Duration::from_secs(1))),
            Err(OutgoingAuthError::Unreachable),
        ] {
            let cache = Arc::new(TokenCache::with_failure_memory(16, Duration::ZERO));
            let fetches = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (cache, fetches, outcome) =
                        (cache.clone(), fetches.clone(), outcome.clone());
                    tokio::spawn(async move {
                        cache
                            .get_or_fetch(&[1; 32], || async {
                                fetches.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                outcome
                            })
                            .await
                            .map(|i| shown(&i).to_owned())
                    })
                })
                .collect();
            for t in tasks {
                assert_eq!(
                    t.await.unwrap(),
                    outcome.clone().map(|i| shown(&i).to_owned())
                );
            }
            assert_eq!(fetches.load(Ordering::SeqCst), 1, "{outcome:?}");
        }
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

    /// Making room never drops a key whose fetch is under way: a caller arriving meanwhile
    /// still waits for that fetch rather than making a second one.
    #[tokio::test]
    async fn eviction_skips_a_key_being_fetched() {
        let cache = Arc::new(TokenCache::new(2));
        let fetches = Arc::new(AtomicUsize::new(0));
        let fetch_a = |fetches: Arc<AtomicUsize>| async move {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(token(n, Duration::from_secs(600)))
        };
        let first = {
            let (cache, fetches) = (cache.clone(), fetches.clone());
            tokio::spawn(async move { cache.get_or_fetch(&[1; 32], || fetch_a(fetches)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        for k in [2u8, 3] {
            cache
                .get_or_fetch(&[k; 32], || async {
                    Ok(token(usize::from(k) * 10, Duration::from_secs(600)))
                })
                .await
                .unwrap();
        }
        let second = cache.get_or_fetch(&[1; 32], || fetch_a(fetches.clone()));
        assert_eq!(shown(&second.await.unwrap()), "Bearer t0");
        assert_eq!(shown(&first.await.unwrap().unwrap()), "Bearer t0");
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "one fetch for key 1");
    }

    /// When full, the least recently used token goes, not the one expiring soonest.
    #[tokio::test]
    async fn the_least_recently_used_token_goes_first() {
        let cache = TokenCache::new(3);
        for k in 1..=3u8 {
            cache
                .get_or_fetch(&[k; 32], || async {
                    Ok(token(
                        usize::from(k),
                        Duration::from_secs(600 + u64::from(k)),
                    ))
                })
                .await
                .unwrap();
        }
        let no_fetch = || async { panic!("fetched a token that should be cached") };
        // Key 1 (the soonest to expire) is used again; key 2 is now the least recently used.
        cache.get_or_fetch(&[1; 32], no_fetch).await.unwrap();
        cache
            .get_or_fetch(&[4; 32], || async {
                Ok(token(4, Duration::from_secs(900)))
            })
            .await
            .unwrap();
        assert_eq!(cache.len(), 3);
        for k in [1u8, 3, 4] {
            let kept = cache.get_or_fetch(&[k; 32], no_fetch).await.unwrap();
            assert_eq!(shown(&kept), format!("Bearer t{k}"));
        }
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
        // The newest survive (the least recently used went first).
        let kept = cache
            .get_or_fetch(&[19; 32], || async {
                Ok(token(99, Duration::from_secs(1)))
            })
            .await
            .unwrap();
        assert_eq!(shown(&kept), "Bearer t19");
    }
}
