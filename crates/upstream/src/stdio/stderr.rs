//! A backend's stderr, relayed into the gateway's log without letting one backend flood it:
//! at most [`BURST`] lines per [`WINDOW`] are logged as written; the rest of that window is
//! counted and logged as one line with the count when the window ends (every line still goes
//! to the tail kept for error reports). A server that writes a 90-line validation report in
//! reply to one request (the Python SDK 1.x does for the era probe's `server/discover`) adds
//! four lines to the log, and one that logs a line now and then is relayed as it writes.

use std::sync::Arc;
use std::time::Duration;

use tokio::process::ChildStderr;
use tokio::time::Instant;
use tracing::info;

use super::Shared;
use crate::framing::{Frame, LineReader};

/// Lines logged as written per window.
pub(crate) const BURST: usize = 3;
/// The window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// The window's count: what was logged and what was held back.
#[derive(Debug, Default)]
pub(crate) struct Burst {
    started: Option<Instant>,
    shown: usize,
    held: usize,
}

impl Burst {
    /// Whether a line written at `now` is logged as written (else it is counted).
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        if self.started.is_none_or(|s| now.duration_since(s) >= WINDOW) {
            *self = Burst {
                started: Some(now),
                ..Burst::default()
            };
        }
        if self.shown < BURST {
            self.shown += 1;
            true
        } else {
            self.held += 1;
            false
        }
    }

    /// When the window with held lines ends (none held: nothing to wait for).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.started.filter(|_| self.held > 0).map(|s| s + WINDOW)
    }

    /// The count of held lines, once (the window is over, or the stream ended).
    pub(crate) fn take_held(&mut self) -> Option<usize> {
        let held = std::mem::take(&mut self.held);
        (held > 0).then_some(held)
    }
}

fn held_back(program: &str, n: usize) {
    info!(target: "switchboard::backend", %program, "{n} more line(s) of stderr within {} s not logged (the last are kept for error reports)", WINDOW.as_secs());
}

pub(super) async fn stderr_loop(stderr: ChildStderr, shared: Arc<Shared>) {
    let mut lines = LineReader::new(stderr, 8 * 1024);
    let program = shared.program.clone();
    let mut burst = Burst::default();
    loop {
        // `LineReader::next` keeps its state in the reader: dropping it for the timer loses
        // nothing.
        let frame = match burst.deadline() {
            Some(at) => tokio::select! {
                frame = lines.next() => frame,
                () = tokio::time::sleep_until(at) => {
                    if let Some(n) = burst.take_held() {
                        held_back(&program, n);
                    }
                    continue;
                }
            },
            None => lines.next().await,
        };
        let Ok(Some(frame)) = frame else { break };
        let text = match frame {
            Frame::Line(l) => String::from_utf8_lossy(&l).into_owned(),
            Frame::TooLong(n) => format!("<{n} bytes of stderr>"),
        };
        let now = Instant::now();
        if burst.deadline().is_some_and(|at| now >= at) {
            if let Some(n) = burst.take_held() {
                held_back(&program, n);
            }
        }
        if burst.admit(now) {
            info!(target: "switchboard::backend", %program, "{text}");
        }
        let mut tail = shared.stderr_tail.lock();
        if tail.len() == super::STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(text);
    }
    if let Some(n) = burst.take_held() {
        held_back(&program, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_cut_to_its_first_lines_and_a_count() {
        let t0 = Instant::now();
        let mut b = Burst::default();
        let shown = (0..94).filter(|_| b.admit(t0)).count();
        assert_eq!(shown, BURST);
        assert_eq!(b.deadline(), Some(t0 + WINDOW));
        assert_eq!(b.take_held(), Some(94 - BURST));
        assert_eq!(b.take_held(), None, "a count is reported once");
        assert_eq!(b.deadline(), None);
    }

    #[test]
    fn steady_lines_are_all_logged() {
        let t0 = Instant::now();
        let mut b = Burst::default();
        for i in 0..20u32 {
            assert!(b.admit(t0 + WINDOW * i), "line {i}");
        }
        assert_eq!(b.take_held(), None);
        // A new window starts the count again.
        let t1 = t0 + WINDOW * 30;
        assert!((0..BURST).all(|_| b.admit(t1)));
        assert!(!b.admit(t1 + WINDOW / 2));
        assert!(b.admit(t1 + WINDOW));
    }
}
