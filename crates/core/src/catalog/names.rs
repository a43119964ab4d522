//! Exposed names: the conflict strategy's prefix and the tool-name rule.
//!
//! Every exposed tool name matches `^[a-zA-Z0-9_-]{1,64}$`, the strictest rule among the LLM
//! APIs clients forward tools to (a name outside it makes some clients drop the tool, or the
//! whole list). A name that breaks it is *shortened*: each invalid character becomes `_`, the
//! result is cut to leave room, and `_` plus the first 8 hex digits of the SHA-256 of the full
//! unsanitized name is appended. The hash keeps `a.b` and `a/b` (both `a_b` once sanitized)
//! apart; a hash-prefix clash within one merge is resolved by the merge (see `merge.rs`) by
//! hashing again with an attempt number, so the mapping stays injective and reproducible.

use sha2::{Digest, Sha256};

/// Longest exposed tool name.
pub const MAX_TOOL_NAME: usize = 64;

/// Hex digits of the hash suffix of a shortened name.
pub(crate) const HASH_HEX: usize = 8;

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The first `hex` hex digits of SHA-256 of `name` (attempt 0), or of `name`, a NUL and the
/// attempt number (a later attempt after a clash).
fn hash_hex(name: &str, attempt: u32, hex: usize) -> String {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    if attempt > 0 {
        hasher.update([0]);
        hasher.update(attempt.to_string().as_bytes());
    }
    let digest = hasher.finalize();
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out.truncate(hex.min(64));
    out
}

/// `name` made to fit the tool-name rule: sanitized prefix + `_` + hash, at most 64 bytes.
/// Always valid, whatever `name` is (even empty).
pub(crate) fn shortened(name: &str, attempt: u32, hex: usize) -> String {
    let room = MAX_TOOL_NAME - 1 - hex.min(MAX_TOOL_NAME - 2);
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(room)
        .collect();
    out.push('_');
    out.push_str(&hash_hex(name, attempt, hex.min(MAX_TOOL_NAME - 2)));
    out
}

/// A prompt name (no character rule) made distinct after a clash: `name` + `_` + hash.
pub(crate) fn suffixed(name: &str, attempt: u32, hex: usize) -> String {
    format!("{name}_{}", hash_hex(name, attempt, hex))
}

/// The prefix `format` gives `backend` (every `{backend}` replaced).
pub(crate) fn prefix(format: &str, backend: &str) -> String {
    format.replace("{backend}", backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_edges() {
        assert!(valid_tool_name("a"));
        assert!(valid_tool_name(&"x".repeat(64)));
        assert!(!valid_tool_name(&"x".repeat(65)));
        assert!(!valid_tool_name(""));
        for bad in ["a.b", "a/b", "a b", "é", "a:b", "a\u{0}"] {
            assert!(!valid_tool_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn shortened_is_valid_and_bounded_for_any_input() {
        for name in ["", "a.b", &"y".repeat(200), "日本語のツール", "a\u{0}b"] {
            let s = shortened(name, 0, HASH_HEX);
            assert!(valid_tool_name(&s), "{s}");
            assert!(s.len() <= MAX_TOOL_NAME);
            assert_eq!(s, shortened(name, 0, HASH_HEX), "deterministic");
            assert_ne!(
                s,
                shortened(name, 1, HASH_HEX),
                "an attempt changes the hash"
            );
        }
        assert_ne!(shortened("a.b", 0, 8), shortened("a/b", 0, 8));
        assert!(shortened("a.b", 0, 8).starts_with("a_b_"));
    }
}
