//! Reading a remote's response bodies within bounds: one JSON message, or an SSE stream of
//! messages (decoded by `wire::sse_decode`, bounded per event and per stream).

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use switchboard_wire::sse_decode::{SseDecoder, SseEvent};

use super::RemoteError;

/// Bounds on what one response may make us hold or read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// One JSON body, or one SSE event.
    pub(super) message: usize,
    /// Everything one response stream may carry before it is cut off (a remote streaming
    /// forever without answering is stopped here, or by the call's deadline).
    pub(super) stream: usize,
}

fn transport(e: hyper::Error) -> RemoteError {
    RemoteError::Transport(e.to_string())
}

/// The whole body, refused as soon as it passes `limit`.
pub(super) async fn read_bounded(body: &mut Incoming, limit: usize) -> Result<Bytes, RemoteError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(transport)?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > limit {
                return Err(RemoteError::TooLarge { limit });
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(buf.freeze())
}

/// An SSE response being read event by event.
pub(super) struct EventStream {
    body: Incoming,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<SseEvent>,
    read: usize,
    limits: Limits,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("read", &self.read)
            .finish()
    }
}

impl EventStream {
    pub(super) fn new(body: Incoming, limits: Limits) -> Self {
        Self {
            body,
            decoder: SseDecoder::new(limits.message),
            ready: std::collections::VecDeque::new(),
            read: 0,
            limits,
        }
    }

    /// Lift the per-stream bound (a listen stream is open-ended; each event stays bounded).
    pub(super) fn unbounded_total(&mut self) {
        self.limits.stream = usize::MAX;
    }

    /// The last event id the stream gave (`Last-Event-ID` resumes after it).
    pub(super) fn last_event_id(&self) -> Option<&str> {
        self.decoder.last_event_id().filter(|id| !id.is_empty())
    }

    /// How long the stream asked a client to wait before reconnecting (`retry:`), if it did.
    pub(super) fn retry(&self) -> Option<std::time::Duration> {
        self.decoder
            .reconnection_time()
            .map(std::time::Duration::from_millis)
    }

    /// The next event's data (events without data and comments skipped); `None` at the end.
    pub(super) async fn next(&mut self) -> Result<Option<SseEvent>, RemoteError> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(Some(event));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(transport)?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            self.read += data.len();
            if self.read > self.limits.stream {
                return Err(RemoteError::TooLarge {
                    limit: self.limits.stream,
                });
            }
            let mut out = Vec::new();
            self.decoder.push(data, &mut out).map_err(|e| match e {
                switchboard_wire::sse_decode::SseError::TooLarge(limit) => {
                    RemoteError::TooLarge { limit }
                }
                other => RemoteError::Malformed(other.to_string()),
            })?;
            self.ready.extend(out);
        }
    }
}
