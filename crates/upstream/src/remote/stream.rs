//! A response's event stream, read until the request's answer: what comes before it is
//! delivered, a stream cut before it is resumed (in its own upstream session), and an answer
//! the gateway does not read fails the call at once.

use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use tracing::{debug, warn};

use switchboard_wire::{Message, MessageKind};

use super::body::EventStream;
use super::{content_type, response_of, RemoteClient, RemoteError, RemoteResponse};
use super::{MAX_RESUMES, MAX_RETRY_WAIT};

impl RemoteClient {
    /// Read an SSE response until the message answering `id`; deliver everything before it.
    /// A stream cut before the answer is resumed only in its upstream `session`, while that
    /// is still the client's.
    pub(super) async fn answer_from_stream(
        &self,
        mut events: EventStream,
        (id, session): (&str, Option<HeaderValue>),
        status: StatusCode,
    ) -> Result<RemoteResponse, RemoteError> {
        let mut last_event: Option<String> = None;
        let mut retry: Option<Duration> = None;
        let mut resumes = 0;
        loop {
            let read = self.read_until_answer(&mut events, id, status).await;
            // What the stream said about resuming it holds until a later stream says otherwise.
            last_event = events.last_event_id().map(str::to_owned).or(last_event);
            retry = events.retry().or(retry);
            let ended = match read {
                // The answer came (read, or not readable: nothing to resume for).
                Ok(answer) => return answer,
                Err(e) => e,
            };
            // A stream cut before the answer is resumed where the remote can replay it (it
            // gave event ids, and this is a session's stream); otherwise the call fails at
            // once, without waiting the remote's `retry` first.
            // The session may have been lost (or replaced) meanwhile.
            let ours = session
                .as_ref()
                .filter(|s| self.inner.session.lock().as_ref() == Some(*s));
            let after = last_event.clone().filter(|_| resumes < MAX_RESUMES);
            let (Some(after), Some(session)) = (after, ours) else {
                return Err(ended);
            };
            resumes += 1;
            // The remote's `retry` is how long it asked to be left alone before the client
            // reconnects (SEP-1699: a MUST); bounded here, and by the call's deadline.
            if let Some(wait) = retry {
                tokio::time::sleep(wait.min(MAX_RETRY_WAIT)).await;
            }
            debug!(error = %ended, resumes, ?retry, "remote response stream cut; resuming");
            events = match self.resume(&after, session).await {
                Ok(events) => events,
                Err(_) => return Err(ended),
            };
        }
    }

    /// The stream until the message answering `id`: `Ok` with that answer (or why it could
    /// not be read), `Err` when the stream ended or broke first.
    async fn read_until_answer(
        &self,
        events: &mut EventStream,
        id: &str,
        status: StatusCode,
    ) -> Result<Result<RemoteResponse, RemoteError>, RemoteError> {
        while let Some(event) = events.next().await? {
            if event.data.is_empty() {
                continue;
            }
            let line = Bytes::from(event.data);
            if let Some(answer) = self.route(line, Some(id), status) {
                return Ok(answer);
            }
        }
        Err(RemoteError::NoAnswer)
    }

    /// Reopens a cut response stream with a GET naming the last event received, in the
    /// stream's own upstream `session` only.
    async fn resume(&self, after: &str, session: &HeaderValue) -> Result<EventStream, RemoteError> {
        let last = HeaderValue::from_str(after)
            .map_err(|_| RemoteError::Malformed("unusable event id".into()))?;
        let extra = [(HeaderName::from_static("last-event-id"), last)];
        let (request, with_session) = self.request(Method::GET, Bytes::new(), false, &extra)?;
        let Some(sent) = with_session.filter(|s| s == session) else {
            return Err(RemoteError::NoAnswer);
        };
        let response = self.send_request(request).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(self.session_lost(&sent));
        }
        if !status.is_success() || content_type(response.headers()) != "text/event-stream" {
            return Err(RemoteError::Status {
                status: status.as_u16(),
            });
        }
        Ok(EventStream::new(response.into_body(), self.inner.limits))
    }

    /// One message from a stream: the answer to `id` is returned, anything else delivered.
    /// An answer to `id` that is not read (malformed, or holding a key the gateway does not
    /// read) fails the call at once.
    pub(super) fn route(
        &self,
        line: Bytes,
        id: Option<&str>,
        status: StatusCode,
    ) -> Option<Result<RemoteResponse, RemoteError>> {
        let msg = match Message::parse(&line) {
            Ok(msg) => msg,
            Err(e) => {
                let ours = id.is_some_and(|id| e.id.as_ref().is_some_and(|m| m.as_json() == id));
                if ours {
                    warn!(
                        "remote answered with a message that is not read; the call gets an error"
                    );
                    return Some(Err(RemoteError::Malformed(
                        "the answer could not be read".into(),
                    )));
                }
                warn!("remote sent an event that is not JSON-RPC; skipped");
                return None;
            }
        };
        if msg.kind != MessageKind::Response {
            self.inner.sink.deliver(&line, &msg);
            return None;
        }
        let ours = id.is_some_and(|id| msg.id.as_ref().is_some_and(|m| m.as_json() == id));
        if !ours {
            debug!("remote response for another request on this stream; dropped");
            return None;
        }
        response_of(&line, &msg, status).map(Ok)
    }
}
