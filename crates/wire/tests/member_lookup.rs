//! Property test for the raw member lookup (`has_member`) against a real parse: whatever the
//! spelling of the keys (literal, `\u` escapes of any of their letters, other escapes around
//! them), the lookup finds a key exactly when serde_json's parse of the object has it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::value::RawValue;
use switchboard_wire::{has_member, object_member};

/// The keys a request's lookups ask for, some near misses, and arbitrary short keys.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("task".to_owned()),
        Just("_meta".to_owned()),
        Just("tas".to_owned()),
        Just("Task".to_owned()),
        Just("taskId".to_owned()),
        "[a-z_/\"\\\\]{0,6}",
    ]
}

/// `key` as a JSON string literal, each character either literal (escaped where JSON needs
/// it) or a `\uXXXX` escape, as `escape` picks per character.
fn spelled(key: &str, escape: &[bool]) -> String {
    let mut out = String::from("\"");
    for (i, c) in key.chars().enumerate() {
        match (escape.get(i).copied().unwrap_or(false), c) {
            (true, _) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            (false, '"') => out.push_str("\\\""),
            (false, '\\') => out.push_str("\\\\"),
            (false, '/') if i % 2 == 0 => out.push_str("\\/"),
            (false, c) => out.push(c),
        }
    }
    out.push('"');
    out
}

fn member() -> impl Strategy<Value = (String, String)> {
    (
        key(),
        prop::collection::vec(any::<bool>(), 6),
        prop_oneof![
            Just("1".to_owned()),
            Just(r#""task""#.to_owned()),
            Just(r#"{"task":{"a":"\\u0074ask"}}"#.to_owned()),
            Just(r#"["task", "\\\\u"]"#.to_owned()),
            // Brackets of the other kind and inside strings: the skip counts only its own.
            Just(r#"[{"a":"}]"},["{",{"b":[]}],"[["]"#.to_owned()),
            Just(r#"{"x":[{"task":1},"}"],"y":"]}","z":{"w":[[{}]]}}"#.to_owned()),
        ],
    )
        .prop_map(|(k, escape, value)| (k.clone(), format!("{}:{value}", spelled(&k, &escape))))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_member_is_found_exactly_when_a_parse_has_it(
        members in prop::collection::vec(member(), 0..5),
        wanted in key(),
    ) {
        let text = format!(
            "{{{}}}",
            members.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>().join(",")
        );
        let parsed: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        prop_assert_eq!(
            has_member(&text, &[wanted.as_str()]),
            parsed.contains_key(&wanted),
            "{} in {}", wanted, text
        );
        // The value found is the one a parse keeps (the last of duplicates).
        let raw = RawValue::from_string(text.clone()).unwrap();
        let found = object_member(&raw, &wanted)
            .map(|v| serde_json::from_str::<serde_json::Value>(v.get()).unwrap());
        prop_assert_eq!(found.as_ref(), parsed.get(&wanted), "{} in {}", wanted, text);
    }
}
