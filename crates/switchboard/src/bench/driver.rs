//! The load loop: a fixed set of worker tasks, each with one request in flight at a time.
//!
//! Closed-loop by design (a worker sends its next request only after the previous answer), so
//! `--concurrency` is exactly the number of requests outstanding and nothing is spawned per
//! request. Each worker keeps its own histogram and counters and hands them back when it ends;
//! only the progress counters are shared (relaxed atomics).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinSet;

use super::hist::Histogram;
use super::http::HttpTarget;
use super::payload::{Template, Verdict};
use super::stdio::StdioTarget;

/// Where requests go.
#[derive(Debug)]
pub(crate) enum Target {
    Http(HttpTarget),
    Stdio(StdioTarget),
}

impl Target {
    async fn call(&self, lane: usize, id: u64, body: Vec<u8>) -> Result<Bytes, String> {
        match self {
            Target::Http(t) => t.call(lane, id, body).await,
            Target::Stdio(t) => t.call(id, body).await,
        }
    }

    /// Sends one request from worker `lane` and judges the answer, with the per-request
    /// deadline.
    pub(crate) async fn exchange(
        &self,
        lane: usize,
        template: &Template,
        id: u64,
        timeout: Duration,
    ) -> Verdict {
        let body = template.body(id);
        match tokio::time::timeout(timeout, self.call(lane, id, body)).await {
            Err(_) => Verdict::Error("timeout".into()),
            Ok(Err(kind)) => Verdict::Error(kind),
            Ok(Ok(answer)) => template.verify(id, &answer),
        }
    }
}

/// When a phase ends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    After(Duration),
    Requests(u64),
}

/// What the workers of one phase measured, merged.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) latency: Histogram,
    pub(crate) ok: u64,
    pub(crate) wrong: u64,
    pub(crate) errors: BTreeMap<String, u64>,
    /// The first few wrong answers, described, so a failure can be diagnosed from the report.
    pub(crate) wrong_samples: Vec<String>,
    pub(crate) elapsed: Duration,
}

impl Outcome {
    pub(crate) fn requests(&self) -> u64 {
        self.ok + self.wrong + self.error_count()
    }

    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn merge(&mut self, other: Outcome) {
        self.latency.merge(&other.latency);
        self.ok += other.ok;
        self.wrong += other.wrong;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        let room = MAX_SAMPLES.saturating_sub(self.wrong_samples.len());
        self.wrong_samples
            .extend(other.wrong_samples.into_iter().take(room));
    }
}

const MAX_SAMPLES: usize = 5;

/// Counters the progress line reads while workers run.
#[derive(Debug, Default)]
pub(crate) struct Live {
    done: AtomicU64,
    failed: AtomicU64,
    wrong: AtomicU64,
}

/// Request ids: unique across the probe, the warmup and the measured phase, so a late or
/// misrouted answer from one phase can never pass for an answer in another.
#[derive(Debug)]
pub(crate) struct Ids(AtomicU64);

impl Ids {
    pub(crate) fn new() -> Self {
        // 0 is the stdio handshake's id.
        Ids(AtomicU64::new(1))
    }

    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Runs one phase with `concurrency` workers until `stop`, printing a progress line labelled
/// `label` to stderr every second.
pub(crate) async fn run_phase(
    target: &Arc<Target>,
    template: &Arc<Template>,
    ids: &Arc<Ids>,
    concurrency: usize,
    stop: Stop,
    timeout: Duration,
    label: &'static str,
) -> Outcome {
    let live = Arc::new(Live::default());
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = match stop {
        Stop::After(d) => Some(started + d),
        Stop::Requests(_) => None,
    };
    let limit = match stop {
        Stop::Requests(n) => n,
        Stop::After(_) => u64::MAX,
    };
    let progress = tokio::spawn(progress(live.clone(), started, label));
    let mut workers = JoinSet::new();
    for lane in 0..concurrency {
        let (target, template, ids, live, issued) = (
            target.clone(),
            template.clone(),
            ids.clone(),
            live.clone(),
            issued.clone(),
        );
        workers.spawn(async move {
            let mut out = Outcome::default();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if issued.fetch_add(1, Ordering::Relaxed) >= limit {
                    break;
                }
                let id = ids.next();
                let sent = Instant::now();
                let verdict = target.exchange(lane, &template, id, timeout).await;
                let took = sent.elapsed();
                live.done.fetch_add(1, Ordering::Relaxed);
                match verdict {
                    Verdict::Ok => {
                        out.ok += 1;
                        // Only verified answers are timed: a fast error must not make the
                        // latency look better.
                        out.latency
                            .record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
                    }
                    Verdict::Wrong(why) => {
                        live.wrong.fetch_add(1, Ordering::Relaxed);
                        out.wrong += 1;
                        if out.wrong_samples.len() < MAX_SAMPLES {
                            out.wrong_samples.push(format!("request {id}: {why}"));
                        }
                    }
                    Verdict::Error(kind) => {
                        live.failed.fetch_add(1, Ordering::Relaxed);
                        *out.errors.entry(kind).or_default() += 1;
                    }
                }
            }
            out
        });
    }
    let mut total = Outcome::default();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(o) => total.merge(o),
            Err(e) => {
                *total
                    .errors
                    .entry(format!("worker_panic: {e}"))
                    .or_default() += 1
            }
        }
    }
    total.elapsed = started.elapsed();
    progress.abort();
    total
}

async fn progress(live: Arc<Live>, started: Instant, label: &'static str) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last = 0;
    loop {
        tick.tick().await;
        let done = live.done.load(Ordering::Relaxed);
        eprintln!(
            "bench {label}: {:>5.1}s {done:>9} requests {:>8} req/s  errors {}  wrong {}",
            started.elapsed().as_secs_f64(),
            done - last,
            live.failed.load(Ordering::Relaxed),
            live.wrong.load(Ordering::Relaxed),
        );
        last = done;
    }
}
