//! The digest of an MRTR call's identity, which its tokens are bound to.
//!
//! Computed from the params' raw JSON, never through `serde_json::Value` (whose integers past
//! 64 bits collapse onto the nearest float, so two different calls shared a digest). The form
//! is canonical against what a client's re-serialization may change: object keys sorted,
//! whitespace dropped, string escapes normalized; integers keep their exact digits, other
//! numbers print as `Value` prints them.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Members that change between a call's rounds, left out of its identity (top level only).
const ROUND_MEMBERS: [&str; 3] = ["_meta", "inputResponses", "requestState"];

/// SHA-256 of the call's identity: its params (raw JSON) without `_meta`, `inputResponses`
/// and `requestState`, in canonical form, so a retry must repeat the original call (tool name
/// and arguments, prompt, or URI) exactly. Text that is not JSON is digested as it is.
pub(crate) fn params_digest(params: &str) -> [u8; 32] {
    let mut text = String::new();
    if canonical(params, true, &mut text).is_none() {
        text.clear();
        text.push_str(params);
    }
    Sha256::digest(text.as_bytes()).into()
}

/// Appends the canonical form of the JSON value `raw` to `out`. Each container is read once
/// per level of nesting it sits under (bounded by the client's depth limit).
fn canonical(raw: &str, top: bool, out: &mut String) -> Option<()> {
    let raw = raw.trim_matches([' ', '\t', '\n', '\r']);
    match raw.as_bytes().first()? {
        b'{' => {
            // Sorted; a repeated key keeps its last value, as `Value` did (strict JSON refuses
            // repeated keys from clients anyway).
            let members: BTreeMap<String, &RawValue> = serde_json::from_str(raw).ok()?;
            out.push('{');
            let kept = members
                .iter()
                .filter(|(k, _)| !(top && ROUND_MEMBERS.contains(&k.as_str())));
            for (i, (key, value)) in kept.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).ok()?);
                out.push(':');
                canonical(value.get(), false, out)?;
            }
            out.push('}');
        }
        b'[' => {
            let items: Vec<&RawValue> = serde_json::from_str(raw).ok()?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item.get(), false, out)?;
            }
            out.push(']');
        }
        b'"' => {
            let text: String = serde_json::from_str(raw).ok()?;
            out.push_str(&serde_json::to_string(&text).ok()?);
        }
        // An integer of any size: its exact digits (JSON allows no leading zeros or `+`).
        _ if is_integer(raw) => out.push_str(raw),
        // A fraction or exponent, `true`, `false`, `null`.
        _ => out.push_str(&serde_json::from_str::<Value>(raw).ok()?.to_string()),
    }
    Some(())
}

fn is_integer(raw: &str) -> bool {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn digest(v: &Value) -> [u8; 32] {
        params_digest(&v.to_string())
    }

    #[test]
    fn digest_ignores_key_order_whitespace_and_mrtr_members() {
        let a = digest(&json!({"name": "t", "arguments": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}));
        let b = digest(
            &json!({"arguments": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "name": "t",
            "inputResponses": {"k": {}}, "requestState": "s", "_meta": {"progressToken": 1}}),
        );
        assert_eq!(a, b);
        let spaced =
            "{ \"name\" : \"t\",\n \"arguments\": {\"y\": [ 1, {\"a\":1,\"b\":2} ], \"x\": 1 } }";
        assert_eq!(params_digest(spaced), a);
        let escaped = r#"{"n\u0061me":"\u0074","arguments":{"x":1,"y":[1,{"a":1,"b":2}]}}"#;
        assert_eq!(params_digest(escaped), a);
        assert_ne!(a, digest(&json!({"name": "t", "arguments": {"x": 2}})));
        // Only the top level's round members are left out.
        assert_ne!(
            digest(&json!({"name": "t", "arguments": {"_meta": 1}})),
            digest(&json!({"name": "t", "arguments": {}}))
        );
    }

    /// Integers past 64 bits keep their digits: two calls differing only there differ.
    #[test]
    fn integers_past_64_bits_are_digested_exactly() {
        let a = r#"{"name":"t","arguments":{"n":18446744073709551617}}"#;
        let b = r#"{"name":"t","arguments":{"n":18446744073709551616}}"#;
        assert_ne!(params_digest(a), params_digest(b));
        let c = r#"{"name":"t","arguments":{"n":-9223372036854775809}}"#;
        let d = r#"{"name":"t","arguments":{"n":-9223372036854775810}}"#;
        assert_ne!(params_digest(c), params_digest(d));
        assert_eq!(params_digest(a), params_digest(a));
    }
}
