//! `truncate`: a result cut to a byte budget, UTF-8 safe, with a note saying how much was
//! cut. Text items keep their beginnings, in order; an item that no longer fits (an image, a
//! resource) is left out; `structuredContent` goes first when the result is over budget.

use serde_json::{json, Value};

/// Room kept for the envelope and the note.
const RESERVE: usize = 256;

/// Cuts `result` (a tool result, or a `resources/read`/`prompts/get` result) so that it
/// encodes in about `max` bytes; returns how many bytes were cut (0: it fit).
pub fn truncate(result: &mut Value, max: usize, rule: &str, raw_len: usize) -> usize {
    if raw_len <= max {
        return 0;
    }
    let mut budget = max.saturating_sub(RESERVE);
    let mut dropped_structured = false;
    if let Some(obj) = result.as_object_mut() {
        dropped_structured = obj.remove("structuredContent").is_some();
    }
    for key in ["content", "contents", "messages"] {
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
    if let Some(Value::Array(items)) = result.get_mut("content") {
        items.push(json!({"type": "text", "text": note}));
    }
    cut
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
            let room = budget.saturating_sub(overhead);
            cut_text(text, room);
            *budget = budget.saturating_sub(encoded_len(&item));
            kept.push(item);
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
