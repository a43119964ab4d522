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

/// Restarts `handle`'s backend whenever it exits, until `stop` fires; then shuts it down.
///
/// `ready` gets the replacement (pinned to the new process) and must make it usable (the MCP
/// handshake); returning false discards it and retries after the backoff.
pub async fn supervise<F, Fut>(
    handle: StdioHandle,
    config: StdioConfig,
    sink: Arc<dyn InboundSink>,
    mut process: StdioProcess,
    stop: CancellationToken,
    grace: Duration,
    mut ready: F,
) where
    F: FnMut(StdioHandle) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut backoff = MIN_BACKOFF;
    let mut started = Instant::now();
    loop {
        let exited = tokio::select! {
            () = stop.cancelled() => None,
            status = process.wait() => Some(status),
        };
        let Some(status) = exited else {
            process.shutdown(grace).await;
            return;
        };
        match status {
            Ok(exit) => warn!(tail = ?handle.stderr_tail(), "backend {exit}; restarting"),
            Err(e) => warn!(error = %e, tail = ?handle.stderr_tail(), "backend ended; restarting"),
        }
        if started.elapsed() >= STABLE {
            backoff = MIN_BACKOFF;
        }
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
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
            if ready(standby.clone()).await {
                handle.adopt(&standby);
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
