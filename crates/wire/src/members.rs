//! Rewriting one member of a raw JSON object while copying every other member verbatim.
//!
//! Used where the gateway must replace a routing value inside a payload (a progress token in
//! `params._meta`, a request id in `notifications/cancelled`) without re-encoding the rest:
//! decoding into `serde_json::Value` would turn integers above 2^64 into floats and reorder
//! nothing but still copy everything. Members keep their order; a replaced member keeps its
//! position; an added member goes last.

use serde::de::{MapAccess, Visitor};
use serde::Deserializer;
use serde_json::value::RawValue;

use crate::envelope::Key;

/// The members of a raw JSON object in order, or `None` if `obj` is not an object.
fn members(obj: &RawValue) -> Option<Vec<(String, &RawValue)>> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(k) = map.next_key::<Key<'de>>()? {
                let v: &'de RawValue = map.next_value()?;
                out.push((k.0.into_owned(), v));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(obj.get());
    de.deserialize_map(V).ok()
}

/// `obj` with member `key` set to the raw JSON `value` (replacing every duplicate of it).
/// `None` if `obj` is not an object or `value` is not valid JSON.
pub fn with_member(obj: &RawValue, key: &str, value: &str) -> Option<Box<RawValue>> {
    spliced(obj, key, value).or_else(|| with_members(obj, &[(key, value)], |_| true))
}

/// [`with_member`] when `key` occurs exactly once: the new value spliced over the old one,
/// every other byte kept. The common case (a tool's name renamed, a progress token or a
/// requestState replaced) then costs one walk and one validation of the result instead of
/// decoding every member and writing the object again.
fn spliced(obj: &RawValue, key: &str, value: &str) -> Option<Box<RawValue>> {
    let text = obj.get();
    let (start, end) = crate::find::sole_member_span(text, key)?;
    serde_json::from_str::<&RawValue>(value).ok()?;
    let mut out = String::with_capacity(text.len() - (end - start) + value.len());
    out.push_str(text.get(..start)?);
    out.push_str(value);
    out.push_str(text.get(end..)?);
    // Valid JSON spliced into a value position of valid JSON is valid; serde re-checks it,
    // as the only way to hand out a `RawValue`.
    RawValue::from_string(out).ok()
}

/// `obj` without the members `keep` refuses (e.g. reserved `_meta` keys).
pub fn retain_members(obj: &RawValue, keep: impl Fn(&str) -> bool) -> Option<Box<RawValue>> {
    with_members(obj, &[], keep)
}

/// `obj` with each `(key, raw value)` set (replacing duplicates, appending missing ones) and
/// every other member for which `keep` is false removed — in one pass over `obj`.
pub fn with_members(
    obj: &RawValue,
    set: &[(&str, &str)],
    keep: impl Fn(&str) -> bool,
) -> Option<Box<RawValue>> {
    let values = set
        .iter()
        .map(|(k, v)| RawValue::from_string((*v).to_owned()).map(|v| (*k, v)))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let mut members = members(obj)?;
    let mut placed = vec![false; values.len()];
    members.retain_mut(|(k, v)| {
        let Some(i) = values.iter().position(|(key, _)| key == k) else {
            return keep(k);
        };
        let first = !placed[i];
        *v = &values[i].1;
        placed[i] = true;
        first
    });
    for (i, (k, v)) in values.iter().enumerate() {
        if !placed[i] {
            members.push(((*k).to_owned(), v));
        }
    }
    let mut out = String::with_capacity(obj.get().len() + 64);
    out.push('{');
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Serialising a string key cannot fail.
        out.push_str(&serde_json::to_string(k).unwrap_or_default());
        out.push(':');
        out.push_str(v.get());
    }
    out.push('}');
    RawValue::from_string(out).ok()
}

/// `params` with `params._meta[key]` set to the raw JSON `value`, creating `_meta` if absent.
/// `None` if `params` (or an existing `_meta`) is not an object.
pub fn with_meta_member(params: &RawValue, key: &str, value: &str) -> Option<Box<RawValue>> {
    let meta = crate::envelope::object_member(params, "_meta");
    let new_meta = match meta {
        Some(meta) => with_member(meta, key, value)?,
        None => {
            let empty = RawValue::from_string("{}".to_owned()).ok()?;
            with_member(&empty, key, value)?
        }
    };
    with_member(params, "_meta", new_meta.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn replaces_in_place_and_keeps_everything_else_exact() {
        let p = raw(
            r#"{"name":"x","arguments":{"n":123456789012345678901234567890,"f":1.50},"_meta":{"progressToken":1,"other":"k"}}"#,
        );
        let out = with_meta_member(&p, "progressToken", r#""sbp-1""#).unwrap();
        assert_eq!(
            out.get(),
            r#"{"name":"x","arguments":{"n":123456789012345678901234567890,"f":1.50},"_meta":{"progressToken":"sbp-1","other":"k"}}"#
        );
    }

    #[test]
    fn adds_missing_members_and_collapses_duplicates() {
        let out = with_meta_member(&raw(r#"{"a":1}"#), "progressToken", "7").unwrap();
        assert_eq!(out.get(), r#"{"a":1,"_meta":{"progressToken":7}}"#);
        let out = with_member(&raw(r#"{"k":1,"z":2,"k":3}"#), "k", "9").unwrap();
        assert_eq!(out.get(), r#"{"k":9,"z":2}"#);
        let out = with_member(&raw(r#"{"a\"b":1}"#), "x", "true").unwrap();
        assert_eq!(out.get(), r#"{"a\"b":1,"x":true}"#);
        let out = with_members(
            &raw(r#"{"a":1,"io.x/k":2,"b":3}"#),
            &[("c", "4"), ("a", "0")],
            |k| !k.starts_with("io.x/"),
        )
        .unwrap();
        assert_eq!(out.get(), r#"{"a":0,"b":3,"c":4}"#);
    }

    /// The splice and the full rewrite give the same object (as JSON values) for every
    /// spelling: whitespace, escaped keys, nested values, a key that is a substring of another.
    #[test]
    fn splicing_agrees_with_rewriting() {
        let objects = [
            r#"{"name":"a_echo","arguments":{"name":"inner","text":"{\"name\":1}"}}"#,
            r#" { "n\u0061me" : "x" , "names" : [1, {"name": 2}] } "#,
            r#"{"arguments":{},"name":"last"}"#,
            r#"{"name":{"deep":[["]"]]}}"#,
        ];
        for obj in objects {
            let obj = raw(obj);
            let fast = with_member(&obj, "name", r#""echo""#).unwrap();
            let full = with_members(&obj, &[("name", r#""echo""#)], |_| true).unwrap();
            let fast: serde_json::Value = serde_json::from_str(fast.get()).unwrap();
            let full: serde_json::Value = serde_json::from_str(full.get()).unwrap();
            assert_eq!(fast, full, "{}", obj.get());
            assert_eq!(fast["name"], "echo");
        }
        // A repeated key is collapsed by the rewrite, not spliced.
        let out = with_member(&raw(r#"{"k":1,"z":2,"k":3}"#), "k", "9").unwrap();
        assert_eq!(out.get(), r#"{"k":9,"z":2}"#);
    }

    #[test]
    fn refuses_non_objects() {
        assert!(with_member(&raw("[1]"), "k", "1").is_none());
        assert!(with_meta_member(&raw(r#"{"_meta":5}"#), "k", "1").is_none());
        assert!(with_member(&raw("{}"), "k", "not json").is_none());
    }
}
