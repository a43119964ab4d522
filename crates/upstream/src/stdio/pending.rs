//! The pending table: which call each route key names, and the order of the lines queued for
//! the backend's stdin, which is what attributes a backend's `"id": null` error (see
//! [`PendingTable::sole_candidate`]).

use super::Reply;

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) reply: Reply,
    /// Position of the call's line among every line queued for stdin (1-based).
    pub(super) seq: u64,
}

#[derive(Debug, Default)]
pub(super) struct PendingTable {
    /// Set once stdout ends: the error every later call fails with.
    pub(super) closed: Option<crate::UpstreamError>,
    /// Keyed by route keys the gateway minted (random): a fast hasher is safe here.
    pub(super) calls: foldhash::HashMap<Box<str>, Pending>,
    /// Lines queued for stdin so far (requests, notifications, answers). Numbered under this
    /// lock as they enter the FIFO queue, so the numbers are the order the backend reads them.
    written: u64,
    /// The latest line (by number) whose answer has been read: the backend parsed it and
    /// every line before it.
    answered_through: u64,
}

impl PendingTable {
    /// Numbers the next line queued for stdin.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.written += 1;
        self.written
    }

    /// Removes the call `key` as answered.
    pub(super) fn answer(&mut self, key: &str) -> Option<Reply> {
        let call = self.calls.remove(key)?;
        self.answered_through = self.answered_through.max(call.seq);
        Some(call.reply)
    }

    /// The one call a backend's `"id": null` error (a line it could not parse) can belong to,
    /// if attribution is certain. A backend reads stdin in order and reports a line it cannot
    /// parse as it reads it, before it reads the next one; so once the answer to line `n` has
    /// been read, no later error is about a line up to `n`. The error is about one of the lines
    /// after `answered_through`; it is certainly this call's when this call's line is the only
    /// one there (no notification, answer or withdrawn call beside it) and it is still pending.
    pub(super) fn sole_candidate(&self) -> Option<Box<str>> {
        let mut calls = self.calls.iter();
        let (Some((key, call)), None) = (calls.next(), calls.next()) else {
            return None;
        };
        (call.seq == self.written && call.seq == self.answered_through + 1).then(|| key.clone())
    }
}
