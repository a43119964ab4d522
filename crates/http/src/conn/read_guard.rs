//! Deadlines on what a connection reads while no request is in progress.
//!
//! Two limits, as a reverse proxy sets them: a request's headers must arrive within the
//! header-read timeout of its first byte (of the accept, for a connection's first request),
//! and a keep-alive connection may sit with no request for at most the idle timeout. Neither
//! applies while a request is being handled or its response streamed: a long SSE stream reads
//! nothing for hours, and a client that stops reading it is the send timeout's business
//! ([`crate::stall`]).
//!
//! hyper's own `header_read_timeout` is not used: its timer starts when the connection becomes
//! ready for the next request, so it is also the keep-alive idle timeout and the two could not
//! be set apart (a short header limit would close every keep-alive connection as quickly).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::table::Activity;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A request is in progress: no deadline.
    Busy,
    /// Waiting for the next request: the idle deadline.
    Idle,
    /// Some of a request's head has arrived (or the connection is new): the header deadline.
    Head,
}

/// A stream whose reads fail with `TimedOut` once the header or idle deadline has passed.
#[derive(Debug)]
pub(crate) struct ReadGuard<S> {
    inner: S,
    activity: Arc<Activity>,
    header_timeout: Duration,
    idle_timeout: Duration,
    phase: Phase,
    /// One timer per connection, reset at each phase change.
    deadline: Pin<Box<Sleep>>,
}

impl<S> ReadGuard<S> {
    pub(crate) fn new(
        inner: S,
        activity: Arc<Activity>,
        header_timeout: Duration,
        idle_timeout: Duration,
    ) -> Self {
        ReadGuard {
            inner,
            activity,
            header_timeout,
            idle_timeout,
            phase: Phase::Head,
            deadline: Box::pin(tokio::time::sleep(header_timeout)),
        }
    }

    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        let limit = match phase {
            Phase::Busy => return,
            Phase::Idle => self.idle_timeout,
            Phase::Head => self.header_timeout,
        };
        self.deadline.as_mut().reset(Instant::now() + limit);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.activity.is_busy() {
            self.phase = Phase::Busy;
            let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
            if poll.is_pending() {
                self.activity.wake_when_idle(cx.waker());
            }
            return poll;
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &poll {
            // The first bytes of a new request start its header deadline.
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if self.phase != Phase::Head {
                    self.enter(Phase::Head);
                }
            }
            // End of stream or an error: nothing to time out.
            Poll::Ready(_) => return poll,
            // The response just finished: waiting for the next request.
            Poll::Pending if self.phase == Phase::Busy => self.enter(Phase::Idle),
            Poll::Pending => {}
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                match self.phase {
                    Phase::Head => "the request headers did not arrive in time",
                    _ => "the connection was idle for the idle timeout",
                },
            ))),
            Poll::Pending => poll,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReadGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn guarded(
        header: u64,
        idle: u64,
    ) -> (
        ReadGuard<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<Activity>,
    ) {
        let (ours, theirs) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let guard = ReadGuard::new(
            ours,
            activity.clone(),
            Duration::from_secs(header),
            Duration::from_secs(idle),
        );
        (guard, theirs, activity)
    }

    /// A peer that trickles its headers is cut off at the header deadline, however often it
    /// sends a byte.
    #[tokio::test(start_paused = true)]
    async fn trickled_headers_time_out() {
        let (mut guard, mut peer, _activity) = guarded(5, 3600);
        let started = Instant::now();
        let mut buf = [0u8; 16];
        let err = loop {
            peer.write_all(b"x").await.expect("peer writes");
            if let Err(e) = guard.read(&mut buf).await {
                break e;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
    }

    /// While a request is in progress nothing times out; once it ends (even with the read
    /// already parked), the idle deadline runs.
    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_never_times_out_and_an_idle_one_does() {
        let (mut guard, _peer, activity) = guarded(5, 60);
        let busy = activity.begin();
        let parked = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let err = guard.read(&mut buf).await.expect_err("idle deadline");
            (err.kind(), Instant::now())
        });
        // Far beyond both deadlines while busy.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!parked.is_finished(), "no deadline while busy");
        drop(busy);
        let ended = Instant::now();
        let (kind, at) = tokio::time::timeout(Duration::from_secs(7200), parked)
            .await
            .expect("the parked read saw the request end")
            .expect("read task");
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert!(at - ended >= Duration::from_secs(60));
    }
}
