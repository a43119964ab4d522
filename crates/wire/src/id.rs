//! JSON-RPC request ids, kept as the exact JSON text the peer sent.
//!
//! Ids are never converted to numbers: `9007199254740993` must come back as exactly that, not as
//! the nearest double. MCP allows strings and integers; `null`, fractions, exponents, booleans,
//! objects and arrays are refused.

use std::fmt;

use serde_json::value::RawValue;

/// A validated JSON-RPC id: the raw JSON text of a string or an integer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Box<str>);

impl RequestId {
    /// Validates raw id JSON. Returns `None` for anything MCP forbids as an id.
    pub fn from_raw(raw: &RawValue) -> Option<Self> {
        let text = raw.get();
        is_valid_id(text).then(|| RequestId(text.into()))
    }

    /// Builds a string id from plain text (used for ids the gateway mints itself).
    pub fn from_string(s: &str) -> Self {
        // Serialising a &str cannot fail.
        let json = serde_json::to_string(s).unwrap_or_default();
        RequestId(json.into())
    }

    /// The exact JSON text of the id, ready to splice into an outgoing message.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// The decoded string if this is a string id.
    pub fn as_str(&self) -> Option<String> {
        if self.0.starts_with('"') {
            serde_json::from_str::<String>(&self.0).ok()
        } else {
            None
        }
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An id is a JSON string (already validated by the JSON parser) or an integer literal:
/// optional minus, then `0` or a non-zero digit followed by digits. No fraction, no exponent.
fn is_valid_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    match bytes.first() {
        Some(b'"') => true,
        Some(b'-') => is_integer_digits(&bytes[1..]),
        Some(b'0'..=b'9') => is_integer_digits(bytes),
        _ => false,
    }
}

fn is_integer_digits(digits: &[u8]) -> bool {
    match digits {
        [] => false,
        [b'0'] => true,
        [b'0', ..] => false,
        _ => digits.iter().all(u8::is_ascii_digit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn accepts_exact_integers_and_strings() {
        for ok in [
            "0",
            "1",
            "-1",
            "-0",
            "9007199254740993",
            "-9007199254740993",
            "123456789012345678901234567890",
            r#""""#,
            r#""abc""#,
            r#""sb-0123456789abcdef""#,
            r#""\u00e9\n\"x\"""#,
        ] {
            let id = RequestId::from_raw(&raw(ok)).unwrap_or_else(|| panic!("{ok} refused"));
            assert_eq!(id.as_json(), ok, "id must round-trip byte-for-byte");
        }
    }

    #[test]
    fn refuses_forbidden_ids() {
        for bad in [
            "null", "1.5", "1.0", "1e3", "-1E2", "true", "false", "{}", "[]", "[1]", "01", "-",
        ] {
            // "01" and "-" are not valid JSON; they are refused even if a parser let them by.
            let parsed = RawValue::from_string(bad.to_owned());
            if let Ok(r) = parsed {
                assert!(RequestId::from_raw(&r).is_none(), "{bad} accepted");
            }
        }
    }

    #[test]
    fn string_helpers() {
        let id = RequestId::from_string("sb-\"q\"");
        assert_eq!(id.as_json(), r#""sb-\"q\"""#);
        assert_eq!(id.as_str().as_deref(), Some("sb-\"q\""));
        assert_eq!(RequestId::from_raw(&raw("7")).unwrap().as_str(), None);
    }
}
