//! A gateway's stdout after its listening line, kept for tests that wait for a later line.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The stdout lines a gateway printed after listening, each taken at most once by a waiter,
/// so that a test can wait for a report line the gateway prints later (a config reload's)
/// without racing the task that drains the pipe.
#[derive(Default)]
pub struct StdoutLog {
    /// Each line, and whether a waiter has taken it.
    lines: parking_lot::Mutex<Vec<(String, bool)>>,
    /// Signalled on every new line (and when stdout closes).
    changed: tokio::sync::Notify,
    closed: AtomicBool,
}

impl StdoutLog {
    /// Bounded: a chatty gateway cannot grow the test's memory without limit.
    const MAX_LINES: usize = 100_000;

    pub(crate) fn push(&self, line: String) {
        let mut lines = self.lines.lock();
        if lines.len() < Self::MAX_LINES {
            lines.push((line, false));
        }
        drop(lines);
        self.changed.notify_waiters();
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Takes the first line starting with `prefix` that no waiter has taken yet.
    fn take(&self, prefix: &str) -> Option<String> {
        let mut lines = self.lines.lock();
        let (line, taken) = lines
            .iter_mut()
            .find(|(l, taken)| !*taken && l.starts_with(prefix))?;
        *taken = true;
        Some(line.clone())
    }

    /// Every line so far, in order (taken or not).
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().iter().map(|(l, _)| l.clone()).collect()
    }

    /// Waits (at most `bound`) for stdout to close (the process exited); whether it did.
    pub async fn closed(&self, bound: Duration) -> bool {
        let seek = async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.closed.load(Ordering::SeqCst) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(bound, seek).await.is_ok()
    }

    /// Waits (at most `bound`) for the next not yet taken line starting with `prefix` and
    /// takes it; `None` on timeout or when stdout closed without one.
    pub async fn wait(&self, prefix: &str, bound: Duration) -> Option<String> {
        let seek = async {
            loop {
                // Registered before looking, so a line pushed in between still wakes us.
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(line) = self.take(prefix) {
                    return Some(line);
                }
                if self.closed.load(Ordering::SeqCst) {
                    return None;
                }
                changed.await;
            }
        };
        tokio::time::timeout(bound, seek).await.ok().flatten()
    }
}
