//! What every transport resolves a call with: one [`BackendResponse`] (or the reason there is
//! none), through one [`PendingCall`]. Transport-neutral, so `core` awaits a stdio process and
//! a remote server the same way.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::UpstreamError;

/// A backend's answer to one call: the raw message and where its `result`/`error` value sits.
#[derive(Debug, Clone)]
pub struct BackendResponse {
    line: Bytes,
    payload: Range<usize>,
    is_error: bool,
}

impl BackendResponse {
    /// An answer whose `result`/`error` member is `line[payload]`. The range must come from a
    /// `&str` slice of `line` (so it lies on UTF-8 boundaries).
    pub(crate) fn new(line: Bytes, payload: Range<usize>, is_error: bool) -> Self {
        BackendResponse {
            line,
            payload,
            is_error,
        }
    }

    /// `"result"` or `"error"`.
    pub fn member(&self) -> &'static str {
        if self.is_error {
            "error"
        } else {
            "result"
        }
    }

    /// Whether the backend answered with a JSON-RPC error.
    pub fn is_error(&self) -> bool {
        self.is_error
    }

    /// The raw JSON of the `result` or `error` member.
    pub fn payload(&self) -> &str {
        // The range was computed from a &str slice of this same line, so it is valid UTF-8 on
        // char boundaries; the fallback is unreachable but keeps this free of panics.
        std::str::from_utf8(&self.line[self.payload.clone()]).unwrap_or("null")
    }
}

pub(crate) type Reply = oneshot::Sender<Result<BackendResponse, UpstreamError>>;

/// How an abandoned call is withdrawn, so it leaves nothing behind.
#[derive(Debug)]
pub(crate) enum Withdraw {
    /// Forget the key in a stdio process's pending table (a late answer is then dropped).
    Stdio(crate::stdio::Withdrawal),
    /// Stop the task carrying the HTTP exchange (its connection is dropped with it).
    Task(tokio::task::AbortHandle),
}

/// The answer to one call. Resolves exactly once; dropping it withdraws the call.
#[derive(Debug)]
pub struct PendingCall {
    rx: oneshot::Receiver<Result<BackendResponse, UpstreamError>>,
    withdraw: Option<Withdraw>,
    /// A replica's count of calls in flight, held until the call is answered or dropped.
    counted: Option<crate::replicated::Counted>,
}

impl PendingCall {
    pub(crate) fn new(
        rx: oneshot::Receiver<Result<BackendResponse, UpstreamError>>,
        withdraw: Withdraw,
    ) -> Self {
        PendingCall {
            rx,
            withdraw: Some(withdraw),
            counted: None,
        }
    }

    /// Counts this call in a replica's calls in flight until it is answered or dropped.
    pub(crate) fn counted(mut self, counted: crate::replicated::Counted) -> Self {
        self.counted = Some(counted);
        self
    }
}

impl Future for PendingCall {
    type Output = Result<BackendResponse, UpstreamError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let out = match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(answer)) => answer,
            Poll::Ready(Err(_)) => Err(UpstreamError::Closed("backend closed".into())),
        };
        // Resolved: whoever answered already removed the entry.
        self.withdraw = None;
        self.counted = None;
        Poll::Ready(out)
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        match self.withdraw.take() {
            Some(Withdraw::Stdio(w)) => w.run(),
            Some(Withdraw::Task(task)) => task.abort(),
            None => {}
        }
    }
}
