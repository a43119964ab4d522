//! Token buckets per principal and per (principal, tool).
//!
//! Bounded (invariant 6): at most [`MAX_BUCKETS`] buckets. A bucket that has refilled to
//! capacity is the same as no bucket, so when the table is full those are dropped first; if it
//! is still full, the request is admitted untracked (and a warning logged) rather than letting
//! one flood of identities lock everyone out.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::Mutex;
use tracing::warn;

/// Most buckets kept at once.
pub const MAX_BUCKETS: usize = 100_000;

/// A sustained rate with a burst of the same size: `N/s`, `N/m` or `N/h`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Burst size (tokens when full).
    pub capacity: f64,
    /// Tokens added per second.
    pub per_sec: f64,
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected a rate like 10/s, 600/m or 1000/h, got {s:?}");
        let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" | "sec" | "second" => 1.0,
            "m" | "min" | "minute" => 60.0,
            "h" | "hour" => 3600.0,
            _ => return Err(bad()),
        };
        if n == 0 {
            return Err(bad());
        }
        Ok(Rate {
            capacity: f64::from(n),
            per_sec: f64::from(n) / secs,
        })
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_sec).min(rate.capacity);
        self.at = now;
    }

    /// Seconds until one token is available (0 when one is).
    fn wait(&self, rate: Rate) -> f64 {
        if self.tokens >= 1.0 {
            0.0
        } else {
            (1.0 - self.tokens) / rate.per_sec
        }
    }
}

/// The configured limits and their buckets.
#[derive(Debug)]
pub struct RateLimiter {
    per_principal: Option<Rate>,
    /// By tool name; `*` applies to tools without their own entry.
    per_tool: HashMap<String, Rate>,
    buckets: Mutex<HashMap<(String, Option<String>), Bucket>>,
}

impl RateLimiter {
    /// Limits every request of a principal to `per_principal`, and its `tools/call`s of each
    /// tool to `per_tool[name]` (or `per_tool["*"]`).
    pub fn new(per_principal: Option<Rate>, per_tool: HashMap<String, Rate>) -> Self {
        RateLimiter {
            per_principal,
            per_tool,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token from each applicable bucket, or none of them: `Err(seconds)` until the
    /// request could be admitted (rounded up, at least 1).
    pub(crate) fn check(&self, principal: &str, tool: Option<&str>) -> Result<(), u64> {
        let tool_rate = tool.and_then(|t| {
            self.per_tool
                .get(t)
                .or_else(|| self.per_tool.get("*"))
                .map(|r| (t, *r))
        });
        let mut wanted: Vec<((String, Option<String>), Rate)> = Vec::with_capacity(2);
        if let Some(rate) = self.per_principal {
            wanted.push(((principal.to_owned(), None), rate));
        }
        if let Some((t, rate)) = tool_rate {
            wanted.push(((principal.to_owned(), Some(t.to_owned())), rate));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        if buckets.len() + wanted.len() > MAX_BUCKETS {
            self.sweep(&mut buckets, now);
            if buckets.len() + wanted.len() > MAX_BUCKETS {
                warn!("rate-limit table full; admitting untracked");
                return Ok(());
            }
        }
        let mut wait: f64 = 0.0;
        for (key, rate) in &wanted {
            let bucket = buckets.entry(key.clone()).or_insert(Bucket {
                tokens: rate.capacity,
                at: now,
            });
            bucket.refill(*rate, now);
            wait = wait.max(bucket.wait(*rate));
        }
        if wait > 0.0 {
            // Saturating float → int cast; at least one second.
            return Err((wait.ceil() as u64).max(1));
        }
        for (key, _) in &wanted {
            if let Some(b) = buckets.get_mut(key) {
                b.tokens -= 1.0;
            }
        }
        Ok(())
    }

    fn sweep(&self, buckets: &mut HashMap<(String, Option<String>), Bucket>, now: Instant) {
        buckets.retain(|(_, tool), b| {
            let rate = match tool {
                None => self.per_principal,
                Some(t) => self
                    .per_tool
                    .get(t)
                    .or_else(|| self.per_tool.get("*"))
                    .copied(),
            };
            rate.is_some_and(|r| {
                b.refill(r, now);
                b.tokens < r.capacity
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(
            "10/s".parse::<Rate>().unwrap(),
            Rate {
                capacity: 10.0,
                per_sec: 10.0
            }
        );
        assert_eq!("120/m".parse::<Rate>().unwrap().per_sec, 2.0);
        for bad in ["", "10", "0/s", "x/s", "10/d", "-1/s"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn buckets_are_per_principal_and_per_tool() {
        let tools = HashMap::from([("slow".to_owned(), "2/h".parse().unwrap())]);
        let l = RateLimiter::new(Some("3/h".parse().unwrap()), tools);
        assert!(l.check("a", Some("slow")).is_ok());
        assert!(l.check("a", Some("slow")).is_ok());
        let retry = l.check("a", Some("slow")).unwrap_err();
        assert!(retry > 1000, "{retry}");
        // The refused call took no principal token: one other call still fits.
        assert!(l.check("a", Some("fast")).is_ok());
        assert!(l.check("a", None).is_err());
        // Another principal has its own buckets.
        assert!(l.check("b", Some("slow")).is_ok());
    }
}
