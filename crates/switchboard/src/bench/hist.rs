//! A log-linear latency histogram in the HDR style.
//!
//! Values (nanoseconds) below 2^SUB_BITS are counted exactly; above that each power-of-two
//! range is split into 2^(SUB_BITS-1) equal buckets, so any recorded value is known to within
//! 1/128 (< 0.8 %) of itself. Recording is an index computation and one increment, cheap
//! enough to sit on every request of the driver. Each worker owns one and they are merged at
//! the end, so the hot path shares nothing.

/// Bits of exact resolution: 2^8 = 256 exact values, then 128 buckets per octave.
const SUB_BITS: u32 = 8;
const SUB_COUNT: u64 = 1 << SUB_BITS;
const HALF: u64 = SUB_COUNT / 2;
/// Enough buckets for any u64: the top octave starts at shift 64 - SUB_BITS.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * HALF as usize + HALF as usize;

#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB_COUNT {
        return v as usize;
    }
    // `shift` >= 1 here; `v >> shift` lands in [HALF, SUB_COUNT), so consecutive octaves
    // occupy consecutive runs of HALF buckets right after the exact range.
    let shift = 63 - v.leading_zeros() - (SUB_BITS - 1);
    (u64::from(shift) * HALF + (v >> shift)) as usize
}

/// The smallest and largest values that map to bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB_COUNT {
        return (i, i);
    }
    let shift = (i - HALF) / HALF;
    let sub = i - shift * HALF;
    let low = sub << shift;
    (low, low.saturating_add((1u64 << shift) - 1))
}

/// The largest value that maps to bucket `i` (what HDR calls the highest equivalent value).
#[cfg(test)]
fn highest_in(i: usize) -> u64 {
    bounds(i).1
}

impl Histogram {
    pub(crate) fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub(crate) fn count(&self) -> u64 {
        self.total
    }

    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    pub(crate) fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value below which a fraction `q` of samples lie (nearest rank), as the middle of
    /// its bucket (half the bucket width is the most it can be off), clamped to the exact
    /// min/max. 0 when empty.
    pub(crate) fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        if rank >= self.total {
            return self.max;
        }
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bounds(i);
                return (low + (high - low) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_u64() {
        let mut prev = 0;
        for v in [
            0u64,
            1,
            255,
            256,
            257,
            511,
            512,
            1 << 20,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let i = index(v);
            assert!(i < BUCKETS, "{v} -> {i}");
            assert!(i >= prev, "index must be monotonic");
            assert!(
                highest_in(i) >= v,
                "{v} above its bucket's top {}",
                highest_in(i)
            );
            prev = i;
        }
        // Every bucket's top maps back to that bucket, and the next value to the next one.
        for i in 0..BUCKETS - 1 {
            let top = highest_in(i);
            assert_eq!(index(top), i);
            assert_eq!(index(top + 1), i + 1);
        }
        assert_eq!(highest_in(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn exact_below_256_and_within_one_percent_above() {
        let mut h = Histogram::default();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.9), 90);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.quantile(0.0), 1);
        assert_eq!(h.count(), 100);
        assert!((h.mean() - 50.5).abs() < 1e-9);

        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [(0.5, 5_000_000.0), (0.9, 9_000_000.0), (0.99, 9_900_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.01, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), 10_000_000);
        assert_eq!(h.max(), 10_000_000);
    }

    #[test]
    fn merge_adds_up() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        for v in 0..1000u64 {
            a.record(v);
            b.record(v + 1000);
        }
        a.merge(&b);
        assert_eq!(a.count(), 2000);
        // 999 sits in a bucket 8 wide: the middle of it is at most 4 away.
        assert!(a.quantile(0.5).abs_diff(999) <= 4);
        assert_eq!(a.max(), 1999);
        assert_eq!(a.quantile(0.0), 0);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn outlier_sets_max_not_p99() {
        let mut h = Histogram::default();
        for _ in 0..999 {
            h.record(30_000);
        }
        h.record(5_000_000_000);
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 30_000.0).abs() / 30_000.0 < 0.01);
        assert_eq!(h.max(), 5_000_000_000);
    }
}
