//! `truncate`: a result cut to a byte budget, UTF-8 safe, with a note saying how much was
//! cut. Text items keep their beginnings, in order; an item that no longer fits (an image, a
//! resource, a text item whose other members are too large) is left out; `structuredContent`
//! goes first when the result is over budget, then other members too large to keep.

use serde_json::{json, Value};

/// Room kept for the envelope and the note.
const RESERVE: usize = 256;

/// Cuts `result` (a tool result, or a `resources/read`/`prompts/get` result) so that it
/// encodes in about `max` bytes; returns how many bytes were cut (0: it fit). Members other
/// than the item lists (`_meta`, a description, …) are kept, smallest first, while they fit
/// in half the budget, and left out past it; the lists get the rest. The caller checks the
/// size again: what still does not fit is refused.
pub fn truncate(result: &mut Value, max: usize, rule: &str, raw_len: usize) -> usize {
    if raw_len <= max {
        return 0;
    }
    let mut budget = max.saturating_sub(RESERVE);
    let mut dropped_structured = false;
    let mut dropped = 0;
    if let Some(obj) = result.as_object_mut() {
        dropped_structured = obj.remove("structuredContent").is_some();
        let members = budget / 2;
        let spent = keep_members(obj, members, &mut dropped);
        budget -= spent;
    }
    for key in LISTS {
        if let Some(Value::Array(items)) = result.get_mut(key) {
            let kept = cut_items(std::mem::take(items), &mut budget);
            *items = kept;
        }
    }
    let now = encoded_len(result);
    let cut = raw_len.saturating_sub(now);
    let mut note = format!("[truncated by guardrail \"{rule}\": {cut} bytes cut]");
    if dropped_structured {
        note.push_str(" [structuredContent removed]");
    }
    if dropped > 0 {
        note.push_str(&format!(" [{dropped} other members removed]"));
    }
    if let Some(Value::Array(items)) = result.get_mut("content") {
        items.push(json!({"type": "text", "text": note}));
    }
    cut
}

/// The lists whose items are cut.
const LISTS: [&str; 3] = ["content", "contents", "messages"];

/// Keeps the members other than the lists, smallest first, while they fit in `room`;
/// removes the rest (counted in `dropped`). Returns the bytes the kept ones take.
fn keep_members(
    obj: &mut serde_json::Map<String, Value>,
    room: usize,
    dropped: &mut usize,
) -> usize {
    let mut sizes: Vec<(usize, String)> = obj
        .iter()
        .filter(|(k, _)| !LISTS.contains(&k.as_str()))
        .map(|(k, v)| (encoded_str_len(k) + 1 + encoded_len(v) + 1, k.clone()))
        .collect();
    sizes.sort();
    let mut spent = 0;
    for (size, key) in sizes {
        if spent + size <= room {
            spent += size;
        } else {
            obj.remove(&key);
            *dropped += 1;
        }
    }
    spent
}

/// Whether `result` now encodes in `max` bytes (after [`truncate`]).
pub fn fits(result: &Value, max: usize) -> bool {
    encoded_len(result) <= max
}

fn cut_items(items: Vec<Value>, budget: &mut usize) -> Vec<Value> {
    let mut kept = Vec::with_capacity(items.len());
    for mut item in items {
        let len = encoded_len(&item);
        if len <= *budget {
            *budget -= len;
            kept.push(item);
            continue;
        }
        if let Some(Value::String(text)) = item.get_mut("text") {
            let overhead = len - encoded_str_len(text);
            // An item whose other members alone are over budget is left out whole.
            if overhead + 2 <= *budget {
                cut_text(text, *budget - overhead);
                *budget = budget.saturating_sub(encoded_len(&item));
                kept.push(item);
            }
        }
        // Anything after the first item over budget is cut.
        *budget = 0;
    }
    kept
}

/// Cuts `text` so that its JSON encoding is at most `room` bytes, on a character boundary.
pub fn cut_text(text: &mut String, room: usize) {
    let mut end = room.min(text.len());
    loop {
        while end > 0 && !text.is_char_boundary(end) {
            end -= 1;
        }
        let len = encoded_str_len(&text[..end]);
        if len <= room || end == 0 {
            break;
        }
        end = end.saturating_sub((len - room).max(1));
    }
    text.truncate(end);
}

fn encoded_len(v: &Value) -> usize {
    serde_json::to_string(v)
        .map(|s| s.len())
        .unwrap_or(usize::MAX)
}

fn encoded_str_len(s: &str) -> usize {
    serde_json::to_string(s)
        .map(|s| s.len())
        .unwrap_or(usize::MAX)
}
