//! The audit log: one JSON line per MCP operation, session start (`initialize`) and end, and
//! refused credential (401), written by a thread of its own so that a slow disk never delays
//! a request. The lines are built in `access`.
//!
//! Bounded (invariant 6): lines wait in a queue of [`AUDIT_QUEUE`]; when the writer falls that
//! far behind, further lines are dropped and counted, and the count is reported (warn) with
//! the next line that fits. Lines never contain credentials: entries are built from the
//! principal's issuer and subject, never from headers.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use serde_json::Value;
use tracing::warn;

/// Lines that may wait for the writer.
pub const AUDIT_QUEUE: usize = 8192;

/// Where audit lines go.
#[derive(Debug)]
pub struct AuditLog {
    tx: SyncSender<Vec<u8>>,
    body_limit: Option<usize>,
    dropped: AtomicU64,
}

impl AuditLog {
    /// Appends to `path`, or writes to stdout when `path` is `-`. `body_limit`: include
    /// request params and responses, each truncated to that many bytes.
    pub fn open(path: &str, body_limit: Option<usize>) -> std::io::Result<Arc<Self>> {
        let out: Box<dyn Write + Send> = if path == "-" {
            Box::new(std::io::stdout())
        } else {
            use std::os::unix::fs::OpenOptionsExt;
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .mode(0o600)
                    .append(true)
                    .open(path)?,
            )
        };
        Self::to_writer(out, body_limit)
    }

    /// Writes lines to `out` from a dedicated thread, flushing after each.
    pub fn to_writer(
        mut out: Box<dyn Write + Send>,
        body_limit: Option<usize>,
    ) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = sync_channel::<Vec<u8>>(AUDIT_QUEUE);
        std::thread::Builder::new()
            .name("switchboard-audit".into())
            .spawn(move || {
                // Ends when the log (every sender) is dropped.
                while let Ok(line) = rx.recv() {
                    if out.write_all(&line).and_then(|()| out.flush()).is_err() {
                        warn!("audit log write failed");
                    }
                }
            })?;
        Ok(Arc::new(AuditLog {
            tx,
            body_limit,
            dropped: AtomicU64::new(0),
        }))
    }

    /// Bodies are included, truncated to this many bytes, when set.
    pub fn body_limit(&self) -> Option<usize> {
        self.body_limit
    }

    /// Queues one entry. Never blocks.
    pub(crate) fn record(&self, entry: &Value) {
        let mut line = entry.to_string().into_bytes();
        line.push(b'\n');
        match self.tx.try_send(line) {
            Ok(()) => {
                let lost = self.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    warn!(lost, "audit writer fell behind; lines were dropped");
                }
            }
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The current UTC time as RFC 3339 with milliseconds.
pub(crate) fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_millis())
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn rfc3339(secs: u64, millis: u32) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_785_000_000, 999), "2026-07-25T17:20:00.999Z");
    }
}
