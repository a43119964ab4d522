//! One backend's last minute of calls, for `/status`: its request rate and latency
//! percentiles. Recorded at the same point, with the same outcome and duration, as
//! `/metrics`'s `switchboard_backend_requests` and `mcp_client_operation_duration_seconds`
//! (one call of [`crate::health::call_ended`] does both), in the same latency buckets.
//!
//! A ring of [`SECONDS`] per-second slots, each holding one counter per latency bucket plus one
//! for calls that have no duration (refused by the breaker). Every counter is an `AtomicU64`
//! that carries its own second in the high half and its count in the low half, so a counter
//! left from a minute ago is told apart (and restarted) without a lock or a sweep: recording a
//! call is one load and one `fetch_add` (a compare-and-swap when the second turns over), with
//! no allocation. Reading sums the counters stamped within the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use crate::metrics::LATENCY_BOUNDS;

/// The window, in one-second slots.
pub(crate) const SECONDS: u64 = 60;

/// Counters per slot: one per latency bucket (the last is `+Inf`), then the refused calls.
const PER_SLOT: usize = LATENCY_BOUNDS.len() + 2;
const REFUSED: usize = PER_SLOT - 1;

/// The seconds are counted from here (a monotonic clock; the stamp 0 means "never").
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Recent {
    counters: Box<[AtomicU64]>,
}

impl Default for Recent {
    fn default() -> Self {
        LazyLock::force(&EPOCH);
        Recent {
            counters: (0..SECONDS as usize * PER_SLOT)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

/// What the window holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LastMinute {
    /// Calls ended in the window (refused ones included, as `/metrics` counts them).
    pub(crate) requests: u64,
    /// Median and 99th percentile duration, in seconds; `None` with no timed call.
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
}

impl Recent {
    /// One call's end at `now`: `took` is `None` for a call that was not timed (refused).
    pub(crate) fn record(&self, now: Instant, took: Option<Duration>) {
        let second = second_of(now);
        let bucket = took.map_or(REFUSED, |t| bucket_of(t.as_secs_f64()));
        let slot = usize::try_from(second % SECONDS).unwrap_or(0);
        bump(&self.counters[slot * PER_SLOT + bucket], second);
    }

    /// The last [`SECONDS`] seconds up to `now`, the current one included.
    pub(crate) fn last_minute(&self, now: Instant) -> LastMinute {
        let newest = second_of(now);
        let oldest = newest.saturating_sub(SECONDS - 1);
        let mut buckets = [0u64; PER_SLOT];
        for slot in self.counters.chunks_exact(PER_SLOT) {
            for (sum, counter) in buckets.iter_mut().zip(slot) {
                let word = counter.load(Ordering::Relaxed);
                let stamp = word >> 32;
                if stamp != 0 && (oldest..=newest).contains(&stamp) {
                    *sum += word & u64::from(u32::MAX);
                }
            }
        }
        let timed = &buckets[..REFUSED];
        LastMinute {
            requests: buckets.iter().sum(),
            p50: quantile(0.5, timed),
            p99: quantile(0.99, timed),
        }
    }
}

/// Seconds since [`EPOCH`], plus one (0 is "never"), kept within the stamp's 32 bits.
fn second_of(now: Instant) -> u64 {
    (now.saturating_duration_since(*EPOCH).as_secs() + 1) & u64::from(u32::MAX)
}

/// The bucket of a duration: the first whose upper bound holds it (`le`, as Prometheus).
fn bucket_of(seconds: f64) -> usize {
    LATENCY_BOUNDS
        .iter()
        .position(|bound| seconds <= *bound)
        .unwrap_or(LATENCY_BOUNDS.len())
}

/// Adds one to `counter` for `second`, restarting it if it holds an older second.
fn bump(counter: &AtomicU64, second: u64) {
    let mut word = counter.load(Ordering::Relaxed);
    loop {
        if word >> 32 == second {
            // Four billion calls to one backend within one second do not happen; were they
            // to, the count would carry into the stamp and the slot would read as stale.
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match counter.compare_exchange_weak(
            word,
            (second << 32) | 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(now) => word = now,
        }
    }
}

/// The `q` quantile of bucketed counts, as Prometheus's `histogram_quantile` computes it:
/// linear within the bucket that holds the rank, the lowest bucket starting at 0, the
/// `+Inf` bucket answering its lower bound.
fn quantile(q: f64, buckets: &[u64]) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = LATENCY_BOUNDS.get(i) else {
                return LATENCY_BOUNDS.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { LATENCY_BOUNDS[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += count;
    }
    LATENCY_BOUNDS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rate_and_percentiles_over_the_last_minute() {
        let recent = Recent::default();
        let t = Instant::now();
        assert_eq!(recent.last_minute(t).requests, 0);
        assert_eq!(recent.last_minute(t).p50, None);
        for _ in 0..98 {
            recent.record(t, Some(Duration::from_micros(300)));
        }
        recent.record(t, Some(Duration::from_millis(700)));
        recent.record(t, Some(Duration::from_millis(700)));
        recent.record(t, None);
        let m = recent.last_minute(t);
        assert_eq!(m.requests, 101);
        // Within the first bucket (0 to 0.5 ms), as histogram_quantile would say.
        let p50 = m.p50.unwrap();
        assert!(p50 > 0.0 && p50 <= 0.0005, "{p50}");
        // The 99th of 100 timed calls is one of the two slow ones: 0.512 s to 1.024 s.
        let p99 = m.p99.unwrap();
        assert!((0.512..=1.024).contains(&p99), "{p99}");
    }

    #[test]
    fn seconds_older_than_the_window_are_not_counted_and_their_slots_are_reused() {
        let recent = Recent::default();
        let t = Instant::now();
        recent.record(t, Some(Duration::from_millis(1)));
        let later = t + Duration::from_secs(30);
        recent.record(later, Some(Duration::from_millis(1)));
        assert_eq!(recent.last_minute(later).requests, 2);
        // A minute after the first: only the second call is left.
        let minute = t + Duration::from_secs(SECONDS);
        assert_eq!(recent.last_minute(minute).requests, 1);
        // The same slot, a minute on, starts again from one.
        recent.record(minute, Some(Duration::from_millis(1)));
        assert_eq!(recent.last_minute(minute).requests, 2);
        let much_later = t + Duration::from_secs(10 * SECONDS);
        assert_eq!(recent.last_minute(much_later).requests, 0);
    }

    #[test]
    fn a_slow_call_past_the_last_bound_reads_as_the_last_bound() {
        let recent = Recent::default();
        let t = Instant::now();
        recent.record(t, Some(Duration::from_secs(3600)));
        let m = recent.last_minute(t);
        assert_eq!(m.p99, LATENCY_BOUNDS.last().copied());
    }

    #[test]
    fn concurrent_records_are_all_counted() {
        let recent = std::sync::Arc::new(Recent::default());
        let t = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = recent.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        r.record(t, Some(Duration::from_millis(2)));
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        assert_eq!(recent.last_minute(t).requests, 4000);
    }
}
