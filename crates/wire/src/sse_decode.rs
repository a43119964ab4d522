//! Incremental Server-Sent Events decoder (the client side, for remote upstreams), bounded per
//! event. Pure: bytes in, events out.
//!
//! Why not a crate: the maintained SSE parsers buffer an event until its blank line with no
//! limit, so a remote that streams one endless `data:` line would grow memory without bound.
//! Here a line or an event over `max_event` bytes is an error as soon as it crosses the bound.

/// One dispatched event. `event` defaults to `"message"`, as the SSE spec says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field.
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
    /// The `id:` field of this event, if it had one.
    pub id: Option<String>,
    /// The `retry:` field (milliseconds), if it had one.
    pub retry: Option<u64>,
}

/// The stream broke a bound or the encoding; it cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line or an event is longer than the decoder's bound.
    #[error("SSE event exceeds {0} bytes")]
    TooLarge(usize),
    /// A line is not UTF-8.
    #[error("SSE stream is not UTF-8")]
    NotUtf8,
}

/// The decoder; feed it chunks in order with [`SseDecoder::push`].
#[derive(Debug)]
pub struct SseDecoder {
    max_event: usize,
    line: Vec<u8>,
    /// The last chunk ended in `\r`: a leading `\n` of the next one belongs to that line end.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    /// The stream's last event id (the SSE "last event ID buffer"): set by every `id:` field,
    /// dispatched or not, and kept across events.
    last_id: Option<String>,
    /// The stream's reconnection time in milliseconds: set by every valid `retry:` field.
    reconnect: Option<u64>,
}

impl SseDecoder {
    /// A decoder refusing any line or event longer than `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        Self {
            max_event,
            line: Vec::new(),
            after_cr: false,
            event: None,
            data: None,
            id: None,
            retry: None,
            last_id: None,
            reconnect: None,
        }
    }

    /// The last event id the stream gave (an event without data counts: a priming event may
    /// carry only an id); what `Last-Event-ID` resumes from.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the stream asked for with `retry:` (milliseconds), if any: a
    /// client waits this long before reconnecting.
    pub fn reconnection_time(&self) -> Option<u64> {
        self.reconnect
    }

    /// Decode `chunk`, appending completed events to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(pos) = chunk.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.extend_line(&chunk[..pos])?;
            let line = std::mem::take(&mut self.line);
            self.field(&line, out)?;
            let crlf = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
            if crlf {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.extend_line(chunk)
    }

    fn pending(&self) -> usize {
        self.line.len() + self.data.as_ref().map_or(0, String::len)
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.pending() + bytes.len() > self.max_event {
            return Err(SseError::TooLarge(self.max_event));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn field(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match name {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            // An id containing NUL is ignored, as the SSE spec says.
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned());
                self.last_id = Some(value.to_owned());
            }
            // Only ASCII digits, as the SSE spec says; anything else is ignored.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                    self.reconnect = Some(ms);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        let id = self.id.take();
        let retry = self.retry.take();
        // An event with no data is not dispatched (priming events carry only an id).
        if let Some(data) = self.data.take() {
            out.push(SseEvent {
                event: event.unwrap_or_else(|| "message".to_owned()),
                data,
                id,
                retry,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]], max: usize) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new(max);
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn decodes_across_chunks_and_line_endings() {
        let events = decode(
            &[
                b"event: message\r",
                b"\ndata: {\"a\"",
                b":1}\r\n\r\n: ping\n\nid: 7\ndata: x\ndata: y\n\n",
            ],
            1024,
        )
        .unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data, "{\"a\":1}");
        assert_eq!(events[0].event, "message");
        assert_eq!(events[1].data, "x\ny");
        assert_eq!(events[1].id.as_deref(), Some("7"));
    }

    #[test]
    fn priming_event_without_data_is_not_dispatched() {
        let events = decode(&[b"id: 1\nretry: 500\ndata:\n\n", b"id: 2\n\n"], 64).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "");
        assert_eq!(events[0].retry, Some(500));
    }

    #[test]
    fn last_event_id_and_reconnection_time_outlive_undispatched_events() {
        let mut d = SseDecoder::new(64);
        let mut out = Vec::new();
        d.push(b"id: 1\nretry: 500\n\n", &mut out).unwrap();
        assert!(out.is_empty(), "no data, nothing dispatched");
        assert_eq!(d.last_event_id(), Some("1"));
        assert_eq!(d.reconnection_time(), Some(500));
        d.push(b"retry: soon\ndata: x\n\n", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].id, None,
            "an event's own id is only the one it carried"
        );
        assert_eq!(d.last_event_id(), Some("1"), "kept across events");
        assert_eq!(
            d.reconnection_time(),
            Some(500),
            "a non-numeric retry is ignored"
        );
    }

    #[test]
    fn an_endless_line_is_refused_at_the_bound() {
        let mut d = SseDecoder::new(16);
        let mut out = Vec::new();
        assert!(d.push(b"data: 0123456789", &mut out).is_ok());
        assert_eq!(d.push(b"abcdef", &mut out), Err(SseError::TooLarge(16)));
        // Many short data lines count towards the same event.
        let lines: Vec<&[u8]> = vec![b"data: 12345\n"; 4];
        assert!(decode(&lines, 16).is_err());
    }
}
