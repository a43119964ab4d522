//! Finding one member of a raw JSON object without decoding the rest.
//!
//! Every request looks up a few top-level members of its `params` (`_meta` for the era and the
//! progress token, `task`): through serde each lookup decoded every key and re-validated every
//! value, about 9 % of the gateway's instructions per forwarded request (see BENCHMARKS.md,
//! "Where the CPU goes"). The input is a [`RawValue`], which serde_json only ever builds from
//! text it has already validated, so this walk can trust the syntax: it skips strings by their
//! quotes and escapes, containers by their brackets, and validates (through serde) only the one
//! value it returns.

use std::borrow::Cow;

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

/// Whether the member at `path` (names, outermost first) exists in the object `text`.
///
/// Takes text, not a [`RawValue`]: its callers hold JSON this gateway already parsed (a
/// backend's `result`, a request's `params`) as a `&str`, and building a `RawValue` again would
/// re-validate all of it, which cost more than the lookup itself (BENCHMARKS.md, "Instructions
/// per forwarded request"). Nothing JSON is handed out, only a yes or no, so a walk over text
/// that was never validated can be wrong but cannot smuggle anything.
pub(crate) fn has_path(text: &str, path: &[&str]) -> bool {
    // Every step's key is spelled somewhere in the text: a vectorised pass each for the first
    // and last rules out most misses (`_meta.progressToken`, with or without a `_meta`)
    // without a walk.
    if let [first, .., last] = path {
        if cannot_hold(text, first) || cannot_hold(text, last) {
            return false;
        }
    }
    span_at(text, path).is_some()
}

/// The string at `path` in the object `text`, decoded; `None` when absent or not a string.
/// The same contract as [`has_path`]: `text` is JSON the gateway already parsed.
pub(crate) fn string_at<'a>(text: &'a str, path: &[&str]) -> Option<Cow<'a, str>> {
    decode_string(span_at(text, path)?)
}

/// A JSON string literal's text (quotes included), decoded; `None` for any other value.
/// Borrowed when it has no escapes.
pub(crate) fn decode_string(lit: &str) -> Option<Cow<'_, str>> {
    let inner = lit.strip_prefix('"')?.strip_suffix('"')?;
    if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(lit).ok().map(Cow::Owned)
}

/// The text of the value at `path`, or `None` when any step is missing or not an object.
fn span_at<'a>(text: &'a str, path: &[&str]) -> Option<&'a str> {
    let mut value = text;
    for key in path {
        let (start, end) = member_span(value, key)?;
        value = value.get(start..end)?;
    }
    Some(value)
}

/// Byte range of the last `key` member's value in the object `text`.
fn member_span(text: &str, key: &str) -> Option<(usize, usize)> {
    if cannot_hold(text, key) {
        return None;
    }
    let mut found = None;
    walk(text, |lit, span| {
        if key_matches(lit, key) {
            found = Some(span);
        }
    })?;
    found
}

/// Whether `text` surely has no key spelling `key`, found without walking it (most lookups
/// miss: a request's `params` seldom carry `task`): a plain key is spelled either literally,
/// so `key` occurs in `text`, or with a `\u` escape (the other escapes spell only `"`, `\`,
/// `/` and control characters, which a plain key does not contain). One vectorised pass for
/// the key's rarest byte and backslashes; `false` means "walk and see" (also for a key that
/// is long, as namespaced `_meta` keys are, or not plain).
fn cannot_hold(text: &str, key: &str) -> bool {
    let k = key.as_bytes();
    if k.len() > 16 {
        return false;
    }
    // The rarest byte's place and rank.
    let mut rarest: Option<(usize, u8)> = None;
    for (i, &c) in k.iter().enumerate() {
        let rank = RARITY[usize::from(c)];
        if rank == NOT_PLAIN {
            return false;
        }
        if rarest.is_none_or(|(_, best)| rank < best) {
            rarest = Some((i, rank));
        }
    }
    let Some((at, _)) = rarest else {
        return false;
    };
    let rare = k[at];
    let t = text.as_bytes();
    !memchr::memchr2_iter(rare, b'\\', t).any(|pos| match t[pos] {
        b'\\' => t.get(pos + 1) == Some(&b'u'),
        _ => (pos.checked_sub(at)).and_then(|s| t.get(s..s + k.len())) == Some(k),
    })
}

/// A key byte no plain key has (a quote, a backslash, `/`, a control or non-ASCII byte).
const NOT_PLAIN: u8 = u8::MAX;

/// How often each byte turns up in JSON text, roughly (lower is rarer): which byte of a key
/// [`cannot_hold`] searches for.
static RARITY: [u8; 256] = {
    let mut t = [NOT_PLAIN; 256];
    let mut c = 0x20;
    while c < 0x80 {
        t[c] = match c as u8 {
            b'"' | b'\\' | b'/' => NOT_PLAIN,
            b'A'..=b'Z' | b'_' => 0,
            b'j' | b'k' | b'q' | b'v' | b'w' | b'x' | b'y' | b'z' => 1,
            b'b' | b'f' | b'g' | b'h' | b'p' | b'u' => 2,
            b'c' | b'd' | b'l' | b'm' => 3,
            _ => 4,
        };
        c += 1;
    }
    t
};

/// The byte range of `key`'s value in the object `text` when `key` occurs exactly once
/// (`None`: absent, repeated, or `text` not an object). For splicing a new value in place.
pub(crate) fn sole_member_span(text: &str, key: &str) -> Option<(usize, usize)> {
    let (mut count, mut found) = (0, None);
    walk(text, |lit, span| {
        if key_matches(lit, key) {
            count += 1;
            found = Some(span);
        }
    })?;
    found.filter(|_| count == 1)
}

/// Calls `f` with each top-level member's key literal and value range, in order; `None` when
/// `text` is not an object.
pub(crate) fn walk(text: &str, mut f: impl FnMut(&str, (usize, usize))) -> Option<()> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return Some(()); // `}`: the end of the object.
        }
        let key_end = string_end(b, i)?;
        let lit = text.get(i..key_end)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value = skip_ws(b, i + 1);
        let value_end = value_end(b, value)?;
        f(lit, (value, value_end));
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return Some(()),
        }
    }
}

/// Whether the JSON string literal `lit` (quotes included) spells `key` in any case, under
/// the simple folding strict JSON uses for duplicate keys (`strict::keys_fold_equal`).
pub(crate) fn key_matches_ignoring_case(lit: &str, key: &str) -> bool {
    decode_string(lit).is_some_and(|k| crate::strict::keys_fold_equal(&k, key))
}

/// Whether the JSON string literal `lit` (quotes included) spells `key`. An escape only
/// lengthens a spelling, so a literal shorter than `key` never does, one as long does only
/// byte for byte, and only a longer one with a backslash is decoded.
pub(crate) fn key_matches(lit: &str, key: &str) -> bool {
    let Some(inner) = lit.strip_prefix('"').and_then(|l| l.strip_suffix('"')) else {
        return false;
    };
    let (text, k) = (inner.as_bytes(), key.as_bytes());
    match text.len().cmp(&k.len()) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => text == k && memchr::memchr(b'\\', text).is_none(),
        std::cmp::Ordering::Greater => {
            memchr::memchr(b'\\', text).is_some() && decode_string(lit).is_some_and(|d| d == key)
        }
    }
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
        // Multi-byte UTF-8 never contains these two bytes, so a byte search is exact.
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

/// The bytes a container walk must stop at: a string's opening quote and the brackets.
static STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// Index just past the JSON value starting at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => container_end(b, start),
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

/// Index just past the object or array opening at `start`: strings skipped whole (their
/// brackets do not count), everything else only looked at where it is structural.
fn container_end(b: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    loop {
        i += b
            .get(i..)?
            .iter()
            .position(|&c| STRUCTURAL[usize::from(c)])?;
        match b[i] {
            b'"' => {
                i = string_end(b, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            _ => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
        }
        i += 1;
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
    fn paths_and_strings_agree_with_serde() {
        let objects = [
            r#"{"resultType":"input_required","requestState":"s"}"#,
            r#"{ "resultType" : "input_\u0072equired" }"#,
            r#"{"task":{"taskId":"t-1","status":"working"}}"#,
            r#"{"task":{"taskId":7}}"#,
            r#"{"task":"x","_meta":{"progressToken":null}}"#,
            r#"{"a":{"b":{"c":"\"deep\""}}}"#,
            r#"[{"task":1}]"#,
            r#""task""#,
        ];
        let paths: [&[&str]; 7] = [
            &["resultType"],
            &["task"],
            &["task", "taskId"],
            &["_meta", "progressToken"],
            &["a", "b", "c"],
            &["a", "b"],
            &["zz"],
        ];
        for obj in objects {
            let value: Value = serde_json::from_str(obj).unwrap();
            for path in paths {
                let want = path.iter().try_fold(&value, |v, k| v.as_object()?.get(*k));
                assert_eq!(has_path(obj, path), want.is_some(), "{obj} {path:?}");
                let got = string_at(obj, path).map(Cow::into_owned);
                let want = want.and_then(Value::as_str).map(str::to_owned);
                assert_eq!(got, want, "{obj} {path:?}");
            }
        }
    }

    /// JSON values whose strings are full of what a walk must not be fooled by.
    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[\\[\\]{}\"\\\\a,:é]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[ab\"]{0,2}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Every lookup agrees with serde's own decoding, on compact and pretty text.
        #[test]
        fn lookups_agree_with_serde(value in json_value(), pretty in proptest::bool::ANY) {
            let text = match pretty {
                true => serde_json::to_string_pretty(&value).unwrap(),
                false => value.to_string(),
            };
            let keys = ["a", "b", "ab", "\"", ""];
            for key in &keys {
                let found = member_span(&text, key).map(|(s, e)| &text[s..e]);
                let want = value.as_object().and_then(|o| o.get(*key));
                let got = found.map(|t| serde_json::from_str::<Value>(t).unwrap());
                proptest::prop_assert_eq!(got.as_ref(), want, "{} [{}]", text, key);
                proptest::prop_assert_eq!(has_path(&text, &[key]), want.is_some());
                // Generated objects never repeat a key: the sole span is the span.
                let sole = sole_member_span(&text, key).map(|(s, e)| &text[s..e]);
                proptest::prop_assert_eq!(sole, found);
                let via_member = member(&raw(&text), key).map(|v| serde_json::from_str::<Value>(v.get()).unwrap());
                proptest::prop_assert_eq!(via_member.as_ref(), want);
                for inner in ["a", "b"] {
                    let nested = want.and_then(|w| w.as_object()).and_then(|o| o.get(inner));
                    let got = string_at(&text, &[key, inner]).map(Cow::into_owned);
                    proptest::prop_assert_eq!(got, nested.and_then(Value::as_str).map(str::to_owned));
                }
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
