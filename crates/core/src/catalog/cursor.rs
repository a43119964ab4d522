//! Our own cursors over a merged list (backends' cursors never reach the client: the gateway
//! follows each backend's pages itself).
//!
//! A cursor is base64url (no padding) of: a version byte, the list's fingerprint (8 bytes of
//! SHA-256 over its kind and exposed names, in order) and the offset of the next entry (u32,
//! big-endian). So a cursor of another list, or of this list before a backend changed it,
//! is refused ([`BadCursor::OtherList`]) rather than silently skipping or repeating items;
//! the client starts again. It is opaque, not secret: a forged one can only point into a list
//! its bearer can already read page by page.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::value::RawValue;

use super::{Entry, Merged};

/// Longest cursor accepted, in bytes (ours are 18).
pub const MAX_CURSOR: usize = 256;

const VERSION: u8 = 1;
const LEN: usize = 1 + 8 + 4;

/// Why a cursor was refused (the gateway answers every one with `-32602`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadCursor {
    /// Longer than [`MAX_CURSOR`].
    #[error("the cursor is longer than {MAX_CURSOR} bytes")]
    TooLong,
    /// Not one of ours.
    #[error("the cursor is not valid")]
    Malformed,
    /// Issued for another list, or for this one before it changed.
    #[error("the cursor belongs to another list, or the list changed")]
    OtherList,
    /// Points at or past the end (we never issue one that does).
    #[error("the cursor points past the end of the list")]
    PastEnd,
}

/// One page of a merged list.
#[derive(Debug)]
pub struct Page<'a> {
    /// The page's entries, in list order.
    pub entries: &'a [Entry],
    /// The cursor of the next page; `None` on the last page (so `nextCursor` is omitted).
    pub next: Option<String>,
}

impl Page<'_> {
    /// The page's items as a raw JSON array, ready for the list result's array member.
    pub fn items_json(&self) -> Box<RawValue> {
        let len: usize = self.entries.iter().map(|e| e.item.get().len() + 1).sum();
        let mut out = String::with_capacity(len + 2);
        out.push('[');
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(entry.item.get());
        }
        out.push(']');
        // Valid JSON items joined as an array are valid JSON.
        RawValue::from_string(out).unwrap_or_else(|_| empty_array())
    }
}

fn empty_array() -> Box<RawValue> {
    serde_json::value::to_raw_value(&[(); 0]).unwrap_or_default()
}

/// The page of `merged` that `cursor` (from a previous page of the same list; `None` for the
/// first) starts, with at most `page_size` entries (at least 1).
pub fn page<'a>(
    merged: &'a Merged,
    cursor: Option<&str>,
    page_size: usize,
) -> Result<Page<'a>, BadCursor> {
    let entries = merged.entries();
    let start = match cursor {
        None => 0,
        Some(cursor) => decode(merged, cursor)?,
    };
    let end = start.saturating_add(page_size.max(1)).min(entries.len());
    let next = (end < entries.len()).then(|| encode(merged, end));
    Ok(Page {
        entries: entries.get(start..end).unwrap_or_default(),
        next,
    })
}

fn encode(merged: &Merged, offset: usize) -> String {
    let mut bytes = [0u8; LEN];
    bytes[0] = VERSION;
    bytes[1..9].copy_from_slice(&merged.fingerprint);
    // A list longer than u32::MAX entries cannot exist in memory bounds we accept; saturate.
    let offset = u32::try_from(offset).unwrap_or(u32::MAX);
    bytes[9..].copy_from_slice(&offset.to_be_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

fn decode(merged: &Merged, cursor: &str) -> Result<usize, BadCursor> {
    if cursor.len() > MAX_CURSOR {
        return Err(BadCursor::TooLong);
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| BadCursor::Malformed)?;
    let bytes: [u8; LEN] = bytes.try_into().map_err(|_| BadCursor::Malformed)?;
    if bytes[0] != VERSION {
        return Err(BadCursor::Malformed);
    }
    if bytes[1..9] != merged.fingerprint {
        return Err(BadCursor::OtherList);
    }
    let mut offset = [0u8; 4];
    offset.copy_from_slice(&bytes[9..]);
    let offset = usize::try_from(u32::from_be_bytes(offset)).map_err(|_| BadCursor::PastEnd)?;
    // We issue only offsets inside the list, never 0 (the first page has no cursor).
    if offset == 0 {
        return Err(BadCursor::Malformed);
    }
    if offset >= merged.entries().len() {
        return Err(BadCursor::PastEnd);
    }
    Ok(offset)
}
