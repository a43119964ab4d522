//! The decoded pass: a payload's strings (values and member names), found and, for
//! `redact`, rewritten in place in a `serde_json::Value`, so what is written back is always
//! valid JSON and keeps its structure. Numbers are read as their digits too (a card number
//! sent as a JSON number is replaced, whole, by its marker, a string). Texts of a result's `content` items are also read as
//! one text, so a match split across items is found.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::scan::{Found, Kind, Kinds, Scanner};

/// Matches per kind.
pub type Counts = BTreeMap<Kind, usize>;

/// How `[REDACTED:kind]` reads.
pub fn marker(kind: Kind) -> String {
    format!("[REDACTED:{}]", kind.name())
}

/// Finds (and with `redact`, replaces) every match of `kinds` in the strings of `v`.
pub fn walk(scanner: &Scanner, kinds: Kinds, v: &mut Value, redact: bool, counts: &mut Counts) {
    match v {
        Value::String(s) => text(scanner, kinds, s, redact, counts),
        Value::Array(items) => {
            for item in items {
                walk(scanner, kinds, item, redact, counts);
            }
        }
        Value::Object(map) => {
            let renamed = keys(scanner, kinds, map, redact, counts);
            if let Some(renamed) = renamed {
                *map = renamed;
            }
            for (_, item) in map.iter_mut() {
                walk(scanner, kinds, item, redact, counts);
            }
        }
        Value::Number(n) => {
            if let Some(marker) = number(scanner, kinds, n, counts) {
                if redact {
                    *v = Value::String(marker);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// A number read as its digits (a card number sent as a JSON number): a match is counted,
/// and the marker that replaces the whole number, a string, returned.
fn number(
    scanner: &Scanner,
    kinds: Kinds,
    n: &serde_json::Number,
    counts: &mut Counts,
) -> Option<String> {
    let digits = digits_of(n);
    let found = scanner.find(kinds, &digits);
    let first = found.first()?;
    for f in &found {
        *counts.entry(f.kind).or_default() += 1;
    }
    Some(marker(first.kind))
}

/// One string: counted, and rewritten when redacting.
pub fn text(scanner: &Scanner, kinds: Kinds, s: &mut String, redact: bool, counts: &mut Counts) {
    let found = scanner.find(kinds, s);
    if found.is_empty() {
        return;
    }
    for f in &found {
        *counts.entry(f.kind).or_default() += 1;
    }
    if redact {
        *s = replaced(s, &found);
    }
}

fn replaced(s: &str, found: &[Found]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for f in found {
        out.push_str(s.get(at..f.start).unwrap_or_default());
        out.push_str(&marker(f.kind));
        at = f.end;
    }
    out.push_str(s.get(at..).unwrap_or_default());
    out
}

/// A number as a reader would see its digits: an integer as it is; a float that holds a
/// whole number (`4.111111111111111e15`) written out in full, so its exponent form hides no
/// card number. (A float is checked as the double it holds.)
fn digits_of(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() && f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 => {
            format!("{f:.0}")
        }
        _ => n.to_string(),
    }
}

/// Member names with a match: counted; when redacting, the object rebuilt with the names
/// replaced (a name that then collides gets a `#n` suffix, so no member is lost).
fn keys(
    scanner: &Scanner,
    kinds: Kinds,
    map: &Map<String, Value>,
    redact: bool,
    counts: &mut Counts,
) -> Option<Map<String, Value>> {
    let mut any = false;
    for k in map.keys() {
        let found = scanner.find(kinds, k);
        for f in &found {
            *counts.entry(f.kind).or_default() += 1;
        }
        any |= !found.is_empty();
    }
    if !any || !redact {
        return None;
    }
    let mut out = Map::new();
    // Names that redact alike get `#2`, `#3`, …: each base's next number is kept, so many
    // alike names cost one scan each, not one per earlier twin.
    let mut next: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (k, v) in map {
        let base = replaced(k, &scanner.find(kinds, k));
        let mut name = base.clone();
        let n = next.entry(base.clone()).or_insert(1);
        while out.contains_key(&name) {
            *n += 1;
            name = format!("{base}#{n}");
        }
        out.insert(name, v.clone());
    }
    Some(out)
}

/// The texts of a result's items read as one, per list: `content` (a tool's, with an
/// embedded resource's `resource.text`), `contents` (`resources/read`) and `messages`
/// (`prompts/get`, each message's `content`). A match that crosses from one item into the
/// next is counted, and with `redact`, each item's part of it replaced.
pub fn across_items(
    scanner: &Scanner,
    kinds: Kinds,
    result: &mut Value,
    redact: bool,
    counts: &mut Counts,
) {
    for key in ["content", "contents", "messages"] {
        if let Some(Value::Array(items)) = result.get_mut(key) {
            let texts: Vec<&mut String> = items.iter_mut().filter_map(item_text).collect();
            across(scanner, kinds, texts, redact, counts);
        }
    }
}

/// An item's text: its own `text`, an embedded resource's, or a message's content's.
fn item_text(item: &mut Value) -> Option<&mut String> {
    let Value::Object(map) = item else {
        return None;
    };
    if map.contains_key("text") {
        return match map.get_mut("text") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
    }
    let inner = match (map.contains_key("resource"), map.contains_key("content")) {
        (true, _) => map.get_mut("resource"),
        (false, true) => map.get_mut("content"),
        _ => None,
    };
    inner.and_then(item_text)
}

fn across(
    scanner: &Scanner,
    kinds: Kinds,
    mut texts: Vec<&mut String>,
    redact: bool,
    counts: &mut Counts,
) {
    if texts.len() < 2 {
        return;
    }
    let mut joined = String::new();
    let mut starts = Vec::with_capacity(texts.len());
    for t in &texts {
        starts.push(joined.len());
        joined.push_str(t);
    }
    let item_of = |offset: usize| starts.partition_point(|s| *s <= offset).saturating_sub(1);
    // Per item: (start, end, kind) ranges to replace, in order.
    let mut cuts: Vec<Vec<(usize, usize, Kind)>> = vec![Vec::new(); texts.len()];
    for f in scanner.find(kinds, &joined) {
        let (first, last) = (item_of(f.start), item_of(f.end.saturating_sub(1)));
        if first == last {
            continue; // inside one item: the per-string pass saw it
        }
        *counts.entry(f.kind).or_default() += 1;
        for (i, item_cuts) in cuts.iter_mut().enumerate().take(last + 1).skip(first) {
            let base = starts[i];
            let len = texts[i].len();
            let from = f.start.saturating_sub(base).min(len);
            let to = (f.end - base).min(len);
            item_cuts.push((from, to, f.kind));
        }
    }
    if !redact {
        return;
    }
    for (t, item_cuts) in texts.iter_mut().zip(cuts) {
        let found: Vec<Found> = item_cuts
            .into_iter()
            .map(|(start, end, kind)| Found { start, end, kind })
            .collect();
        if !found.is_empty() {
            **t = replaced(t, &found);
        }
    }
}
