//! Newline-delimited framing with a maximum line length.
//!
//! Hand-rolled rather than `FramedRead<LinesCodec>` because an over-long line must be skipped
//! and the stream must continue (a `FramedRead` ends after its first decode error).

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// One result of reading a frame.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A complete line without its terminator (and without a trailing `\r`).
    Line(Bytes),
    /// A line longer than the limit was discarded; its length so far.
    TooLong(usize),
}

/// Reads lines of at most `max` bytes from `reader`.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    reader: R,
    buf: BytesMut,
    max: usize,
    /// Bytes of an over-long line discarded so far; `Some` while skipping to its end.
    skipping: Option<usize>,
    /// Where to resume the newline search in `buf`.
    scanned: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R, max: usize) -> Self {
        LineReader {
            reader,
            buf: BytesMut::with_capacity(16 * 1024),
            max,
            skipping: None,
            scanned: 0,
        }
    }

    /// The next frame, or `None` at end of stream. A final unterminated line is returned.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            if let Some(frame) = self.take_frame() {
                return Ok(Some(frame));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(16 * 1024);
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                return Ok(self.take_eof());
            }
        }
    }

    fn take_frame(&mut self) -> Option<Frame> {
        let pos = self.buf[self.scanned..].iter().position(|&b| b == b'\n');
        match (pos, self.skipping) {
            (Some(p), Some(skipped)) => {
                let _ = self.buf.split_to(self.scanned + p + 1);
                self.scanned = 0;
                self.skipping = None;
                Some(Frame::TooLong(skipped + p))
            }
            (Some(p), None) => {
                let mut line = self.buf.split_to(self.scanned + p + 1);
                self.scanned = 0;
                line.truncate(line.len() - 1);
                if line.last() == Some(&b'\r') {
                    line.truncate(line.len() - 1);
                }
                if line.len() > self.max {
                    return Some(Frame::TooLong(line.len()));
                }
                Some(Frame::Line(line.freeze()))
            }
            (None, Some(skipped)) => {
                self.skipping = Some(skipped + self.buf.len());
                self.buf.clear();
                self.scanned = 0;
                None
            }
            (None, None) if self.buf.len() > self.max => {
                self.skipping = Some(self.buf.len());
                self.buf.clear();
                self.scanned = 0;
                None
            }
            (None, None) => {
                self.scanned = self.buf.len();
                None
            }
        }
    }

    fn take_eof(&mut self) -> Option<Frame> {
        if let Some(skipped) = self.skipping.take() {
            return Some(Frame::TooLong(skipped));
        }
        if self.buf.is_empty() {
            return None;
        }
        self.scanned = 0;
        Some(Frame::Line(self.buf.split().freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(f) = r.next().await.unwrap() {
            out.push(match f {
                Frame::Line(l) => String::from_utf8(l.to_vec()).unwrap(),
                Frame::TooLong(n) => format!("<too long {n}>"),
            });
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_strips_cr() {
        assert_eq!(frames(b"a\nbb\r\n\nccc", 10).await, ["a", "bb", "", "ccc"]);
    }

    #[tokio::test]
    async fn skips_over_long_lines_and_continues() {
        let mut input = vec![b'x'; 50_000];
        input.extend_from_slice(b"\nok\n");
        input.extend_from_slice(&[b'y'; 20]);
        input.extend_from_slice(b"\nfine\n");
        let got = frames(&input, 16).await;
        assert_eq!(got, ["<too long 50000>", "ok", "<too long 20>", "fine"]);
    }

    #[tokio::test]
    async fn exactly_max_is_allowed() {
        assert_eq!(frames(b"abcd\nabcde\n", 4).await, ["abcd", "<too long 5>"]);
    }
}
