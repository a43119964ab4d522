//! Idle timeouts: a stream wrapper that stamps each read or write that moved bytes, and a
//! future that resolves once no stamp came for the idle time. One [`Activity`] is shared
//! by both sides of a proxied connection, so traffic either way keeps it alive.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a connection last moved bytes.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: Arc<AtomicU64>,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn stamp(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `idle`.
    pub(crate) async fn idle(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let due = last + idle;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }

    /// `io`, stamping this activity.
    pub(crate) fn wrap<T>(&self, io: T) -> Idle<T> {
        Idle {
            io,
            activity: self.clone(),
        }
    }
}

/// A stream that stamps its [`Activity`].
#[derive(Debug)]
pub(crate) struct Idle<T> {
    io: T,
    activity: Activity,
}

impl<T: AsyncRead + Unpin> AsyncRead for Idle<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let out = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.stamp();
        }
        out
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Idle<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let out = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.stamp();
        }
        out
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
