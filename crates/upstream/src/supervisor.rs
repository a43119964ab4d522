//! Keeping a shared backend alive: restart with exponential backoff after a crash.
//!
//! When the process exits on its own, every call pending on it has already failed (the reader
//! closed its pending table), and new calls fail at once until a replacement is ready, so
//! clients learn of the crash through an error, never through silence. The replacement is
//! spawned on the side, initialized by the caller's `ready` hook, and only then installed in
//! the handle's slot: no client request ever reaches an uninitialized backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::stdio::{spawn, StdioConfig, StdioHandle, StdioProcess};
use crate::InboundSink;

/// First restart delay; doubled after each failed attempt up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A backend that ran this long before crashing restarts without accumulated backoff.
const STABLE: Duration = Duration::from_secs(60);
/// How long an exit waits to learn whether the gateway is stopping too: a service manager
/// (systemd's control group, `pkill`) signals the gateway and its backends at once, and the
/// backend's exit may be seen before the gateway's own signal is.
const SETTLE: Duration = Duration::from_millis(250);

/// How a supervisor is told to stop.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    /// Stop the backend now (the gateway's shutdown has reached it, or it left the set):
    /// its process is shut down and the supervisor returns.
    pub now: CancellationToken,
    /// The gateway is stopping (cancelled as soon as it is told to, before it drains): an
    /// exit from then on is part of the stop, logged as such and never restarted.
    pub gateway: CancellationToken,
}

impl Stop {
    /// Whether the gateway is stopping or this backend is being stopped, waiting at most
    /// [`SETTLE`] to hear of it.
    async fn stopping(&self) -> bool {
        tokio::select! {
            () = self.now.cancelled() => true,
            () = self.gateway.cancelled() => true,
            () = tokio::time::sleep(SETTLE) => false,
        }
    }
}

/// Restarts `handle`'s backend whenever it exits, until `stop.now` fires; then shuts it
/// down. An exit while the gateway stops is not a crash: it is logged as part of the stop.
///
/// `ready` gets the replacement (pinned to the new process) and must make it usable (the MCP
/// handshake); `None` discards it and retries after the backoff. `Some(announce)`: the
/// replacement is installed in `handle`, and only then `announce` runs (a breaker
/// half-open): announced before, a call could be sent to the old,
/// ended process in between.
pub async fn supervise<F, Fut, A>(
    handle: StdioHandle,
    config: StdioConfig,
    sink: Arc<dyn InboundSink>,
    mut process: StdioProcess,
    stop: Stop,
    grace: Duration,
    mut ready: F,
) where
    F: FnMut(StdioHandle) -> Fut,
    Fut: Future<Output = Option<A>>,
    A: FnOnce(),
{
    let mut backoff = MIN_BACKOFF;
    let mut started = Instant::now();
    loop {
        let exited = tokio::select! {
            () = stop.now.cancelled() => None,
            status = process.wait() => Some(status),
        };
        let Some(status) = exited else {
            match process.ended() {
                // It ended on its own as the gateway stopped (signalled with it).
                Some(exit) => info!("backend {exit} while the gateway stops; not restarted"),
                None => process.shutdown(grace).await,
            }
            return;
        };
        let how = match &status {
            Ok(exit) => exit.to_string(),
            Err(e) => format!("ended ({e})"),
        };
        if stop.stopping().await {
            // Already ended, and its pending calls failed with how: nothing left to stop.
            info!("backend {how} while the gateway stops; not restarted");
            return;
        }
        warn!(tail = ?handle.stderr_tail(), "backend {how}; restarting");
        if started.elapsed() >= STABLE {
            backoff = MIN_BACKOFF;
        }
        loop {
            tokio::select! {
                () = stop.now.cancelled() => return,
                () = stop.gateway.cancelled() => {
                    stop.now.cancelled().await;
                    return;
                }
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            let (standby, next) = match spawn(&config, sink.clone()) {
                Ok(pair) => pair,
                Err(e) => {
                    warn!(error = %e, ?backoff, "backend restart failed");
                    continue;
                }
            };
            if let Some(announce) = ready(standby.clone()).await {
                handle.adopt(&standby);
                announce();
                process = next;
                started = Instant::now();
                info!(pid = ?handle.pid(), "backend restarted");
                break;
            }
            warn!(?backoff, "restarted backend did not become ready");
            next.shutdown(grace).await;
        }
    }
}

#[cfg(test)]
mod tests;
