//! Finding one member of a raw JSON object without decoding the rest.
//!
//! Every request looks up a few top-level members of its `params` (`_meta` for the era and the
//! progress token, `task`): through serde each lookup decoded every key and re-validated every
//! value, about 9 % of the gateway's instructions per forwarded request (see BENCHMARKS.md,
//! "Where the CPU goes"). The input is a [`RawValue`], which serde_json only ever builds from
//! text it has already validated, so this walk can trust the syntax: it skips strings by their
//! quotes and escapes, containers by their brackets, and validates (through serde) only the one
//! value it returns.

use serde_json::value::RawValue;

/// The value of `key` in the JSON object `obj`, raw; `None` when `obj` is not an object or has
/// no such key. Duplicate keys: the last one wins, as in most JSON parsers a backend would use.
/// An escaped key (`"\u005fmeta"`) is decoded before comparing.
pub(crate) fn member<'a>(obj: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    let text = obj.get();
    let (start, end) = member_span(text, key)?;
    // Re-validating the one value found keeps this function honest even if its walk were ever
    // handed something serde would not have produced: it can miss, never return non-JSON.
    serde_json::from_str(text.get(start..end)?).ok()
}

/// Byte range of the last `key` member's value in the object `text`.
fn member_span(text: &str, key: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut found = None;
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return found; // `}`: the end of the object.
        }
        let key_end = string_end(b, i)?;
        let wanted = key_matches(text.get(i..key_end)?, key);
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value = skip_ws(b, i + 1);
        let value_end = value_end(b, value)?;
        if wanted {
            found = Some((value, value_end));
        }
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return found,
        }
    }
}

/// Whether the JSON string literal `lit` (quotes included) spells `key`.
fn key_matches(lit: &str, key: &str) -> bool {
    let inner = &lit[1..lit.len() - 1];
    if !inner.contains('\\') {
        return inner == key;
    }
    serde_json::from_str::<String>(lit).is_ok_and(|k| k == key)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Index just past the string literal opening at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        // Multi-byte UTF-8 never contains these two bytes, so a byte walk is exact.
        i += b.get(i..)?.iter().position(|&c| c == b'"' || c == b'\\')?;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

/// Index just past the JSON value starting at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, `true`, `false` or `null`: up to the next delimiter.
        _ => Some(
            start
                + b[start..]
                    .iter()
                    .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(b.len() - start),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    /// What serde_json's own decoding says `key` is in `obj` (last duplicate wins there too).
    fn reference(obj: &str, key: &str) -> Option<Value> {
        match serde_json::from_str::<Value>(obj).ok()? {
            Value::Object(m) => m.get(key).cloned(),
            _ => None,
        }
    }

    #[test]
    fn agrees_with_serde_on_awkward_objects() {
        let objects = [
            r#"{}"#,
            r#" { } "#,
            r#"{"a":1}"#,
            r#"{ "a" : 1 , "b" : [ 1 , { "a" : 2 } ] }"#,
            r#"{"x":"}{][\"\\","a":"q\"uote","b":-1.5e10}"#,
            r#"{"\u0061":true,"a\\":false,"b":null}"#,
            r#"{"_meta":{"progressToken":"t","a\u0062":2},"name":"echo"}"#,
            r#"{"a":1,"a":{"deep":[[[]]]},"c":"é\u00e9 ✓"}"#,
            "{\"a\"\t:\n\"\\\\\",\r\"b\":[]}",
            r#"{"name":"echo","arguments":{"text":"{\"a\":1}","n":[1,2,{"x":"]"}]}}"#,
            r#"[1,2]"#,
            r#""a""#,
            r#"5"#,
            r#"null"#,
        ];
        for obj in objects {
            for key in [
                "a",
                "b",
                "c",
                "x",
                "a\\",
                "_meta",
                "name",
                "arguments",
                "zz",
                "",
            ] {
                let got =
                    member(&raw(obj), key).map(|v| serde_json::from_str::<Value>(v.get()).unwrap());
                assert_eq!(got, reference(obj, key), "{obj} [{key}]");
            }
        }
    }

    #[test]
    fn returns_the_exact_bytes_of_the_value() {
        let obj = raw(r#"{"n": 123456789012345678901234567890 ,"s":"\u00e9","o":{ "k" : 1 }}"#);
        assert_eq!(
            member(&obj, "n").unwrap().get(),
            "123456789012345678901234567890"
        );
        assert_eq!(member(&obj, "s").unwrap().get(), r#""\u00e9""#);
        assert_eq!(member(&obj, "o").unwrap().get(), r#"{ "k" : 1 }"#);
    }
}
