//! The bench report: one JSON object (`--json`, the contract scripts rely on) or a short
//! human-readable summary.

use std::time::Duration;

use serde_json::{json, Value};

use super::driver::Outcome;
use super::payload::Era;

#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) target: String,
    pub(crate) era: Era,
    pub(crate) tool: String,
    pub(crate) concurrency: usize,
    pub(crate) sessions: usize,
    pub(crate) warmup_secs: f64,
    /// Stdio answers that matched no request (counted as wrong answers).
    pub(crate) stray: u64,
    /// CPU time this driver process spent during the measured phase, when known. On a small
    /// machine the driver competes with the target for cores, so it is part of the result.
    pub(crate) client_cpu: Option<Duration>,
    /// The same for the stdio server the driver spawned (direct runs only).
    pub(crate) server_cpu: Option<Duration>,
    /// `--target-pid`: CPU of that process and all its descendants during the measured phase,
    /// and how many processes the tree had at the end.
    pub(crate) target_tree: Option<(Duration, usize)>,
    pub(crate) outcome: Outcome,
}

/// Nanoseconds to microseconds, to 0.1 µs (the histogram's resolution is finer than that).
fn us(ns: u64) -> f64 {
    (ns as f64 / 100.0).round() / 10.0
}

impl Report {
    fn wrong(&self) -> u64 {
        self.outcome.wrong + self.stray
    }

    /// Verified answers per second of the measured phase. Errors and wrong answers do not
    /// count as throughput.
    fn rate(&self) -> f64 {
        let secs = self.outcome.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.outcome.ok as f64 / secs
        } else {
            0.0
        }
    }

    /// `cpu` per measured request, in µs to 0.1.
    fn per_request(&self, cpu: Option<Duration>) -> Option<f64> {
        let requests = self.outcome.requests();
        let cpu = cpu?;
        (requests > 0).then(|| (cpu.as_secs_f64() * 1e7 / requests as f64).round() / 10.0)
    }

    pub(crate) fn json(&self) -> Value {
        let h = &self.outcome.latency;
        json!({
            "target": self.target,
            "era": self.era.as_str(),
            "tool": self.tool,
            "concurrency": self.concurrency,
            "sessions": self.sessions,
            "warmup_secs": self.warmup_secs,
            "duration_secs": (self.outcome.elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            "requests": self.outcome.requests(),
            "ok": self.outcome.ok,
            "errors": self.outcome.error_count(),
            "errors_by_kind": self.outcome.errors,
            "wrong_answers": self.wrong(),
            "wrong_samples": self.outcome.wrong_samples,
            "requests_per_sec": self.rate().round(),
            "p50_us": us(h.quantile(0.50)),
            "p90_us": us(h.quantile(0.90)),
            "p99_us": us(h.quantile(0.99)),
            "p999_us": us(h.quantile(0.999)),
            "max_us": us(h.max()),
            "mean_us": us(h.mean().round() as u64),
            "client_cpu_us_per_req": self.per_request(self.client_cpu),
            "server_cpu_us_per_req": self.per_request(self.server_cpu),
            "target_tree_cpu_us_per_req": self.per_request(self.target_tree.map(|t| t.0)),
            "target_tree_processes": self.target_tree.map(|t| t.1),
        })
    }

    pub(crate) fn human(&self) -> String {
        use std::fmt::Write;
        let h = &self.outcome.latency;
        let mut s = String::new();
        let _ = writeln!(s, "target       {}", self.target);
        let _ = writeln!(
            s,
            "load         era {} · tool {} · concurrency {} · sessions {}",
            self.era.as_str(),
            self.tool,
            self.concurrency,
            self.sessions
        );
        let _ = writeln!(
            s,
            "requests     {} in {:.2}s ({} ok) → {:.0} req/s",
            self.outcome.requests(),
            self.outcome.elapsed.as_secs_f64(),
            self.outcome.ok,
            self.rate()
        );
        let _ = writeln!(
            s,
            "latency µs   p50 {} · p90 {} · p99 {} · p99.9 {} · max {}",
            us(h.quantile(0.50)),
            us(h.quantile(0.90)),
            us(h.quantile(0.99)),
            us(h.quantile(0.999)),
            us(h.max())
        );
        if let Some(cpu) = self.per_request(self.client_cpu) {
            let _ = writeln!(s, "driver cpu   {cpu} µs per request");
        }
        if let Some(cpu) = self.per_request(self.server_cpu) {
            let _ = writeln!(s, "server cpu   {cpu} µs per request");
        }
        if let (Some(cpu), Some((_, n))) = (
            self.per_request(self.target_tree.map(|t| t.0)),
            self.target_tree,
        ) {
            let _ = writeln!(s, "target tree  {cpu} µs per request ({n} processes)");
        }
        let _ = writeln!(s, "errors       {}", self.outcome.error_count());
        for (kind, n) in &self.outcome.errors {
            let _ = writeln!(s, "  {kind}: {n}");
        }
        let _ = writeln!(s, "wrong        {}", self.wrong());
        for sample in &self.outcome.wrong_samples {
            let _ = writeln!(s, "  {sample}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_contract_fields() {
        let mut outcome = Outcome::default();
        for v in [10_000u64, 20_000, 30_000, 40_000] {
            outcome.latency.record(v);
        }
        outcome.ok = 4;
        outcome.wrong = 1;
        outcome.errors.insert("http_503".into(), 2);
        outcome.elapsed = Duration::from_secs(2);
        let r = Report {
            target: "stdio: x".into(),
            era: Era::Legacy,
            tool: "echo".into(),
            concurrency: 2,
            sessions: 1,
            warmup_secs: 0.0,
            stray: 1,
            client_cpu: Some(Duration::from_millis(7)),
            server_cpu: None,
            target_tree: Some((Duration::from_millis(70), 2)),
            outcome,
        };
        let j = r.json();
        assert_eq!(j["requests"], 7);
        assert_eq!(j["errors"], 2);
        assert_eq!(j["errors_by_kind"]["http_503"], 2);
        assert_eq!(j["wrong_answers"], 2);
        assert_eq!(j["requests_per_sec"], 2.0);
        assert_eq!(j["p50_us"], 20.0);
        assert_eq!(j["max_us"], 40.0);
        for key in [
            "p90_us",
            "p99_us",
            "duration_secs",
            "concurrency",
            "sessions",
            "era",
            "target",
        ] {
            assert!(!j[key].is_null(), "{key} missing");
        }
        assert_eq!(j["client_cpu_us_per_req"], 1000.0);
        assert!(r.human().contains("http_503: 2"));
        assert!(j["server_cpu_us_per_req"].is_null());
        assert_eq!(j["target_tree_cpu_us_per_req"], 10000.0);
        assert_eq!(j["target_tree_processes"], 2);
        assert!(r
            .human()
            .contains("target tree  10000 µs per request (2 processes)"));
    }
}
