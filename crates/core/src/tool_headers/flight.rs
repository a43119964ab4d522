//! The cache behind `tool_headers`, single-flight: at most one walk of the backend's
//! `tools/list` runs at a time, and every caller that arrives while it runs waits for that
//! walk's outcome instead of starting its own (a cold burst of Modern `tools/call`s would
//! otherwise send one walk each).
//!
//! - Only a complete walk is kept. A failed one (backend error, error answer, too many pages,
//!   deadline) is shared with the callers that waited for it, then remembered for
//!   [`RETRY_AFTER`] only, so a broken backend is asked at most once per second, and a working
//!   one again is noticed a second later.
//! - Every walk is bounded by [`LEARN_DEADLINE`]: a stalled backend cannot hold the callers.
//! - [`SingleFlight::invalidate`] bumps a generation: a walk that started before it installs
//!   nothing (its answer may predate the change), and later callers start a fresh walk.
//! - The walk runs inside the first caller's future. If that caller goes away, its walk is
//!   dropped with it and one of the waiters leads the next one.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

/// Bound on one whole walk (every page).
pub(crate) const LEARN_DEADLINE: Duration = Duration::from_secs(10);

/// How long a failed walk is remembered: callers meanwhile go without a table rather than
/// each asking a broken backend again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A walk's outcome as its waiters see it: `None` while it runs, then `Some(None)` for a
/// failure or `Some(Some(value))`.
type Outcome<T> = Option<Option<T>>;

/// A value learned at most one walk at a time (see the module docs).
#[derive(Debug)]
pub(crate) struct SingleFlight<T> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    /// Bumped by every invalidation.
    generation: u64,
    /// The value of a complete walk of this generation.
    value: Option<T>,
    /// Set by a failed walk: no new walk before then.
    retry_at: Option<Instant>,
    /// The walk in progress, if any.
    flight: Option<Flight<T>>,
    /// Flights started so far, to name them.
    flights: u64,
}

#[derive(Debug)]
struct Flight<T> {
    id: u64,
    done: watch::Receiver<Outcome<T>>,
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        SingleFlight {
            state: Mutex::new(State {
                generation: 0,
                value: None,
                retry_at: None,
                flight: None,
                flights: 0,
            }),
        }
    }
}

impl<T> SingleFlight<T> {
    /// Clears flight `id` if it is still the current one (its leader is gone).
    fn forget_flight(&self, id: u64) {
        let mut s = self.state.lock();
        if s.flight.as_ref().is_some_and(|f| f.id == id) {
            s.flight = None;
        }
    }
}

/// What a caller does next.
enum Step<'a, T> {
    Ready(Option<T>),
    /// The flight's id and its outcome channel.
    Wait(u64, watch::Receiver<Outcome<T>>),
    Lead(Leader<'a, T>),
}

impl<T: Clone + std::fmt::Debug> SingleFlight<T> {
    /// The value, learned by `learn` if nobody has it and nobody is learning it; `None` when
    /// the walk this caller waited for failed (or one failed less than [`RETRY_AFTER`] ago).
    /// `learn` is only polled when this caller leads the walk.
    pub(crate) async fn get<E: Display>(
        &self,
        learn: impl Future<Output = Result<T, E>>,
    ) -> Option<T> {
        loop {
            match self.step() {
                Step::Ready(value) => return value,
                Step::Lead(leader) => return leader.run(learn).await,
                Step::Wait(id, mut done) => {
                    if let Ok(outcome) = done.wait_for(Option::is_some).await {
                        return outcome.clone().flatten();
                    }
                    // The walk's caller went away mid-walk: look again (and maybe lead).
                    self.forget_flight(id);
                }
            }
        }
    }

    /// Forgets the value (the backend's tools changed), and any walk in progress with it.
    pub(crate) fn invalidate(&self) {
        let mut s = self.state.lock();
        s.generation += 1;
        s.value = None;
        s.retry_at = None;
        // Callers waiting for that walk still get its outcome: they arrived before the change.
        s.flight = None;
    }

    fn step(&self) -> Step<'_, T> {
        let mut s = self.state.lock();
        if let Some(value) = &s.value {
            return Step::Ready(Some(value.clone()));
        }
        if let Some(flight) = &s.flight {
            return Step::Wait(flight.id, flight.done.clone());
        }
        if s.retry_at.is_some_and(|at| Instant::now() < at) {
            return Step::Ready(None);
        }
        s.flights += 1;
        let (done, waiters) = watch::channel(None);
        s.flight = Some(Flight {
            id: s.flights,
            done: waiters,
        });
        Step::Lead(Leader {
            cache: self,
            id: s.flights,
            generation: s.generation,
            done,
        })
    }
}

/// The caller running the walk. Dropped unfinished (its caller went away), it clears its
/// flight so that the next caller leads a new walk; its waiters see the channel close.
struct Leader<'a, T> {
    cache: &'a SingleFlight<T>,
    id: u64,
    generation: u64,
    done: watch::Sender<Outcome<T>>,
}

impl<T: Clone> Leader<'_, T> {
    async fn run<E: Display>(self, learn: impl Future<Output = Result<T, E>>) -> Option<T> {
        let value = match tokio::time::timeout(LEARN_DEADLINE, learn).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(e)) => {
                warn!(error = %e, retry_after = ?RETRY_AFTER, "learning tool header designations failed");
                None
            }
            Err(_) => {
                warn!(deadline = ?LEARN_DEADLINE, retry_after = ?RETRY_AFTER, "learning tool header designations timed out");
                None
            }
        };
        {
            let mut s = self.cache.state.lock();
            if s.flight.as_ref().is_some_and(|f| f.id == self.id) {
                s.flight = None;
            }
            // Cleared in the same critical section as the install, so no caller sees neither
            // and starts a redundant walk. Only a walk of the current generation may install
            // (or block) anything.
            if s.generation == self.generation {
                match &value {
                    Some(v) => s.value = Some(v.clone()),
                    None => s.retry_at = Some(Instant::now() + RETRY_AFTER),
                }
            }
        }
        self.done.send_replace(Some(value.clone()));
        value
    }
}

impl<T> Drop for Leader<'_, T> {
    fn drop(&mut self) {
        // A no-op after `run` finished (which clears the flight together with installing).
        self.cache.forget_flight(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;

    /// A walk that counts itself and answers `value`.
    async fn walk<T>(
        walks: &AtomicUsize,
        value: Result<T, &'static str>,
    ) -> Result<T, &'static str> {
        walks.fetch_add(1, Ordering::SeqCst);
        value
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_walk_is_not_kept_and_is_retried() {
        let cache = SingleFlight::<u32>::default();
        let walks = AtomicUsize::new(0);
        assert_eq!(cache.get(walk(&walks, Err("backend down"))).await, None);
        // Within the retry window nobody asks the backend again ...
        assert_eq!(cache.get(walk(&walks, Ok(7))).await, None);
        assert_eq!(walks.load(Ordering::SeqCst), 1);
        // ... after it the next caller does, and a complete walk is kept.
        tokio::time::advance(RETRY_AFTER).await;
        assert_eq!(cache.get(walk(&walks, Ok(7))).await, Some(7));
        assert_eq!(cache.get(walk(&walks, Ok(8))).await, Some(7));
        assert_eq!(walks.load(Ordering::SeqCst), 2);
    }

    /// Every caller arrives (single-threaded runtime: each runs synchronously from its arrival
    /// through its cache look-up to its first await) before the walk may finish, so without
    /// single flight each of them would have started a walk of its own.
    #[tokio::test]
    async fn concurrent_cold_callers_share_one_walk() {
        const CALLERS: usize = 16;
        let cache = Arc::new(SingleFlight::<u32>::default());
        let walks = Arc::new(AtomicUsize::new(0));
        let (arrived, all_in) = watch::channel(0usize);
        let arrived = Arc::new(arrived);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..CALLERS {
            let (cache, walks, arrived) = (cache.clone(), walks.clone(), arrived.clone());
            let mut all_in = all_in.clone();
            tasks.spawn(async move {
                arrived.send_modify(|n| *n += 1);
                cache
                    .get(async {
                        walks.fetch_add(1, Ordering::SeqCst);
                        let _ = all_in.wait_for(|n| *n == CALLERS).await;
                        Ok::<_, Infallible>(42)
                    })
                    .await
            });
        }
        let results = tokio::time::timeout(Duration::from_secs(10), tasks.join_all())
            .await
            .expect("callers finished");
        assert_eq!(results, vec![Some(42); CALLERS]);
        assert_eq!(walks.load(Ordering::SeqCst), 1, "one walk for everyone");
    }

    #[tokio::test]
    async fn a_walk_overtaken_by_invalidate_installs_nothing() {
        let cache = Arc::new(SingleFlight::<&'static str>::default());
        let (started, walk_running) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let stale = tokio::spawn({
            let cache = cache.clone();
            async move {
                cache
                    .get(async {
                        let _ = started.send(());
                        let _ = released.await;
                        Ok::<_, Infallible>("old")
                    })
                    .await
            }
        });
        walk_running.await.expect("walk started");
        cache.invalidate();
        // A caller after the change does not join the old walk: it learns afresh.
        assert_eq!(
            cache.get(async { Ok::<_, Infallible>("new") }).await,
            Some("new")
        );
        let _ = release.send(());
        let stale = tokio::time::timeout(Duration::from_secs(10), stale)
            .await
            .expect("old walk finished")
            .expect("old walk task");
        assert_eq!(stale, Some("old"), "its own caller gets what it waited for");
        // The old walk, finishing last, did not overwrite the current value.
        assert_eq!(
            cache.get(async { Ok::<_, Infallible>("other") }).await,
            Some("new")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_walk_is_abandoned_at_the_deadline() {
        let cache = SingleFlight::<u32>::default();
        let begun = Instant::now();
        let stalled = std::future::pending::<Result<u32, Infallible>>();
        let got = tokio::time::timeout(LEARN_DEADLINE * 2, cache.get(stalled))
            .await
            .expect("the walk is bounded");
        assert_eq!(got, None);
        assert!(begun.elapsed() >= LEARN_DEADLINE);
    }

    #[tokio::test]
    async fn a_waiter_takes_over_when_the_leader_goes_away() {
        let cache = Arc::new(SingleFlight::<u32>::default());
        let (started, walk_running) = oneshot::channel();
        let leader = tokio::spawn({
            let cache = cache.clone();
            async move {
                cache
                    .get(async {
                        let _ = started.send(());
                        std::future::pending::<Result<u32, Infallible>>().await
                    })
                    .await
            }
        });
        walk_running.await.expect("walk started");
        let (waiting, waiter_in) = oneshot::channel();
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move {
                let _ = waiting.send(());
                cache.get(async { Ok::<_, Infallible>(5) }).await
            }
        });
        // The waiter ran from its signal straight into its wait on the leader's walk.
        waiter_in.await.expect("waiter waiting");
        leader.abort();
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter is not stranded")
            .expect("waiter task");
        assert_eq!(got, Some(5));
    }
}
