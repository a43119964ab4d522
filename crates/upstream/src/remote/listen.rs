//! The GET listen stream of an upstream session: what the remote sends outside any request
//! (list changes, resource updates, session-level logs, its own requests).

use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use tracing::debug;

use super::body::EventStream;
use super::{content_type, RemoteClient, RemoteError, LISTEN_MAX_BACKOFF, LISTEN_MIN_BACKOFF};

/// Owns the listen stream's task; dropping it closes the stream.
#[derive(Debug)]
pub struct ListenHandle {
    task: tokio::task::JoinHandle<()>,
    opened: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl ListenHandle {
    /// Resolves once the remote accepted the stream (true), or when it failed to open (false).
    /// From then on the remote has it, so whatever it sends afterwards reaches the sink.
    pub async fn opened(&mut self) -> bool {
        match self.opened.take() {
            Some(rx) => rx.await.is_ok(),
            None => false,
        }
    }
}

impl ListenHandle {
    /// What [`Self::opened`] would wait on, for a waiter elsewhere (`None` once taken).
    pub(crate) fn take_opened(&mut self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        self.opened.take()
    }
}

impl Drop for ListenHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RemoteClient {
    /// Open the GET listen stream; its messages go to the sink until the session is lost or the
    /// remote offers no stream (then [`RemoteSink::listen_closed`]), or the handle is dropped.
    /// A stream that merely drops is reopened with backoff, resuming after the last event id
    /// the remote gave (`Last-Event-ID`), so a flaky network loses nothing the remote replays.
    pub fn listen(&self) -> ListenHandle {
        let me = self.clone();
        let (opened, opened_rx) = tokio::sync::oneshot::channel();
        ListenHandle {
            task: tokio::spawn(async move {
                let reason = me.listen_resuming(opened).await;
                me.inner.sink.listen_closed(&reason);
            }),
            opened: Some(opened_rx),
        }
    }

    async fn listen_resuming(&self, opened: tokio::sync::oneshot::Sender<()>) -> RemoteError {
        let mut opened = Some(opened);
        let mut backoff = LISTEN_MIN_BACKOFF;
        // The remote's `retry`, once given: how long to wait before reopening (SEP-1699).
        let mut asked: Option<Duration> = None;
        loop {
            let (reason, was_open, retry) = self.listen_loop(&mut opened).await;
            asked = retry.or(asked);
            // Only the first attempt answers `opened`: a caller waiting on it learns "not now".
            opened = None;
            let retry = match &reason {
                RemoteError::Status { status, .. } => *status >= 500 || *status == 429,
                RemoteError::Transport(_) | RemoteError::Timeout | RemoteError::NoAnswer => true,
                RemoteError::TooLarge { .. } | RemoteError::Malformed(_) => true,
                _ => false,
            };
            if !retry {
                return reason;
            }
            if was_open {
                backoff = LISTEN_MIN_BACKOFF;
            }
            // A stream that was open is reopened after what the remote asked for, where it
            // asked; failures to open back off as before.
            let wait = reopen_wait(was_open, asked, backoff);
            debug!(error = %reason, ?wait, "remote listen stream dropped; reopening");
            tokio::time::sleep(wait).await;
            self.inner.sink.reopening().await;
            backoff = (backoff * 2).min(LISTEN_MAX_BACKOFF);
        }
    }

    /// One listen stream, until it ends; whether it was ever open, and the `retry` it gave.
    async fn listen_loop(
        &self,
        opened: &mut Option<tokio::sync::oneshot::Sender<()>>,
    ) -> (RemoteError, bool, Option<Duration>) {
        let resume = self.inner.last_event.lock().clone();
        let extra: Vec<(HeaderName, HeaderValue)> = resume
            .map(|id| (HeaderName::from_static("last-event-id"), id))
            .into_iter()
            .collect();
        let (request, with_session) = match self.request(Method::GET, Bytes::new(), false, &extra) {
            Ok(r) => r,
            Err(e) => return (e, false, None),
        };
        let response = match self.send_request(request).await {
            Ok(r) => r,
            Err(e) => return (e, false, None),
        };
        let status = response.status();
        if let (StatusCode::NOT_FOUND, Some(sent)) = (status, &with_session) {
            return (self.session_lost(sent), false, None);
        }
        let content_type = content_type(response.headers());
        if !status.is_success() {
            return (
                RemoteError::Status {
                    status: status.as_u16(),
                },
                false,
                None,
            );
        }
        if content_type != "text/event-stream" {
            let status = status.as_u16();
            return (
                RemoteError::NotJson {
                    status,
                    content_type,
                },
                false,
                None,
            );
        }
        if let Some(opened) = opened.take() {
            let _ = opened.send(());
        }
        let mut events = EventStream::new(response.into_body(), self.inner.limits);
        // The listen stream has no natural end; its total bound does not apply to it.
        events.unbounded_total();
        loop {
            let next = events.next().await;
            if let Some(id) = events.last_event_id() {
                *self.inner.last_event.lock() = HeaderValue::from_str(id).ok();
            }
            match next {
                Ok(Some(event)) => {
                    if !event.data.is_empty() {
                        self.route(Bytes::from(event.data), None, status);
                    }
                }
                Ok(None) => return (RemoteError::NoAnswer, true, events.retry()),
                Err(e) => return (e, true, events.retry()),
            }
        }
    }
}

/// How long to wait before reopening a listen stream: what the remote asked for (`retry`)
/// after a stream that was open, within [`LISTEN_MIN_BACKOFF`, `LISTEN_MAX_BACKOFF`] (a
/// hostile `retry: 0` must not make the gateway reopen in a tight loop); the backoff after a
/// failure to open.
fn reopen_wait(was_open: bool, asked: Option<Duration>, backoff: Duration) -> Duration {
    match (was_open, asked) {
        (true, Some(asked)) => asked.clamp(LISTEN_MIN_BACKOFF, LISTEN_MAX_BACKOFF),
        _ => backoff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_asked_retry_is_kept_within_the_bounds() {
        let backoff = Duration::from_secs(2);
        let zero = Some(Duration::ZERO);
        assert_eq!(reopen_wait(true, zero, backoff), LISTEN_MIN_BACKOFF);
        let hours = Some(Duration::from_secs(7200));
        assert_eq!(reopen_wait(true, hours, backoff), LISTEN_MAX_BACKOFF);
        let second = Some(Duration::from_secs(1));
        assert_eq!(reopen_wait(true, second, backoff), Duration::from_secs(1));
        assert_eq!(reopen_wait(false, zero, backoff), backoff);
        assert_eq!(reopen_wait(true, None, backoff), backoff);
    }
}
