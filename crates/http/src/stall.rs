//! Connections whose client stopped reading are closed.
//!
//! A client that keeps its connection open but reads nothing pins whatever the gateway was
//! writing to it: the response body waiting on a full socket is never dropped, so neither is
//! the stream queue behind it, nor (for HTTP+SSE) the session. The kernel never times out a
//! peer that is alive but not reading. So a write that makes no progress for the send timeout
//! fails the connection, the way a proxy's `send_timeout` does; hyper then drops the body and
//! everything it held is released through the usual paths (stream detached, session ended).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose writes fail with `TimedOut` once one has been pending for `limit`.
#[derive(Debug)]
pub(crate) struct StallGuard<S> {
    inner: S,
    limit: Duration,
    /// Armed while a write is pending; disarmed by any write that makes progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> StallGuard<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        StallGuard {
            inner,
            limit,
            stalled: None,
        }
    }

    /// `poll` returned by the inner write: progress disarms the timer, `Pending` arms it (or
    /// fails the write once it has run out).
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the send timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A peer that reads nothing: once the pipe is full, the pending write fails after the
    /// limit instead of waiting forever. A peer that reads keeps the stream alive.
    #[tokio::test(start_paused = true)]
    async fn a_write_with_no_progress_fails_after_the_limit() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(ours, Duration::from_secs(5));
        let chunk = [b'x'; 512];
        guarded.write_all(&chunk).await.expect("fits the pipe");
        guarded.write_all(&chunk).await.expect("fits the pipe");
        // Full now. With the peer reading, writes keep succeeding past the limit.
        for _ in 0..4 {
            let mut sink = [0u8; 512];
            theirs.read_exact(&mut sink).await.expect("peer reads");
            tokio::time::advance(Duration::from_secs(4)).await;
            guarded
                .write_all(&chunk)
                .await
                .expect("progress disarms the timer");
        }
        // The peer stops reading: the next write stalls and fails at the limit.
        let started = tokio::time::Instant::now();
        let err = guarded.write_all(&chunk).await.expect_err("no progress");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
    }
}
