//! The configured headers' values (credentials, as a rule) never come back to a caller: an
//! API that echoes its request (a debug endpoint, an error page quoting the headers) would
//! otherwise hand the backend's credential to whoever calls it. Each value, the token after
//! an `Authorization` scheme (`Bearer`, `Basic`, `Token`; a Basic token's decoded
//! `user:password` and password too), and their JSON-escaped forms (`/` as `\/` included,
//! and every other character as `\uXXXX`) and percent-encoded forms
//! are replaced by `[redacted]` in every response body before it becomes a result, success
//! or error. Values shorter than [`MIN_SECRET`] bytes are left alone: they would mangle
//! ordinary text and cannot be secrets worth the name.

use base64::Engine as _;
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use memchr::memmem::Finder;

/// What replaces a secret.
const MARK: &[u8] = b"[redacted]";
/// Shorter values are not searched for.
pub(crate) const MIN_SECRET: usize = 4;
/// Schemes whose token is searched for on its own.
const SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

/// Every form of every configured value, longest first.
#[derive(Default)]
pub(crate) struct Redactor {
    needles: Vec<Finder<'static>>,
}

impl Redactor {
    pub(crate) fn new(headers: &[(HeaderName, HeaderValue)]) -> Self {
        let mut raw: Vec<Vec<u8>> = Vec::new();
        for (_, value) in headers {
            let value = value.as_bytes();
            raw.push(value.to_vec());
            if let Some((scheme, token)) = split_scheme(value) {
                raw.push(token.to_vec());
                if scheme.eq_ignore_ascii_case("basic") {
                    raw.extend(basic_parts(token));
                }
            }
        }
        let mut all: Vec<Vec<u8>> = Vec::new();
        for one in raw {
            for form in forms(&one) {
                if form.len() >= MIN_SECRET && !all.contains(&form) {
                    all.push(form);
                }
            }
        }
        all.sort_by_key(|n| std::cmp::Reverse(n.len()));
        Redactor {
            needles: all
                .into_iter()
                .map(|n| Finder::new(&n).into_owned())
                .collect(),
        }
    }

    /// `body` with every occurrence of every form replaced (the same bytes if none occurs).
    pub(crate) fn apply(&self, body: Bytes) -> Bytes {
        let mut body = body;
        for needle in &self.needles {
            if let Some(replaced) = replace(&body, needle) {
                body = Bytes::from(replaced);
            }
        }
        body
    }
}

/// `Bearer abc` → (`Bearer`, `abc`), for the schemes in [`SCHEMES`].
fn split_scheme(value: &[u8]) -> Option<(&str, &[u8])> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(|c: char| c.is_ascii_whitespace())?;
    let token = token.trim();
    let known = SCHEMES.iter().any(|s| scheme.eq_ignore_ascii_case(s));
    (known && !token.is_empty()).then_some((scheme, token.as_bytes()))
}

/// A Basic token's `user:password` and its password.
fn basic_parts(token: &[u8]) -> Vec<Vec<u8>> {
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(token) else {
        return Vec::new();
    };
    let password = decoded
        .iter()
        .position(|b| *b == b':')
        .map(|i| decoded[i + 1..].to_vec());
    [Some(decoded), password].into_iter().flatten().collect()
}

/// `s` as sent, as JSON writes it inside a string, with `/` escaped as `\/`, with every
/// character but letters and digits escaped as `\uXXXX` (as .NET's encoder writes `+`), and
/// percent-encoded (as an echoed URL or form carries it); hex digits in either case.
fn forms(s: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![s.to_vec()];
    if let Ok(text) = std::str::from_utf8(s) {
        let quoted = serde_json::to_string(text).unwrap_or_default();
        let escaped = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or("");
        out.push(escaped.as_bytes().to_vec());
        out.push(escaped.replace('/', "\\/").into_bytes());
    }
    let plain = |b: &u8| b.is_ascii_alphanumeric();
    let unreserved = |b: &u8| b.is_ascii_alphanumeric() || b"-._~".contains(b);
    for upper in [true, false] {
        let hex = |b: u8| match upper {
            true => format!("{b:02X}"),
            false => format!("{b:02x}"),
        };
        let each = |keep: &dyn Fn(&u8) -> bool, prefix: &str| -> Vec<u8> {
            let mut form = Vec::with_capacity(s.len() * 3);
            for b in s {
                match keep(b) {
                    true => form.push(*b),
                    false => form.extend(format!("{prefix}{}", hex(*b)).bytes()),
                }
            }
            form
        };
        out.push(each(&plain, "\\u00"));
        out.push(each(&unreserved, "%"));
    }
    out.retain(|f| !f.is_empty());
    out
}

fn replace(hay: &[u8], needle: &Finder<'_>) -> Option<Vec<u8>> {
    let mut hits = needle.find_iter(hay).peekable();
    hits.peek()?;
    let len = needle.needle().len();
    let mut out = Vec::with_capacity(hay.len());
    let mut last = 0;
    for at in hits {
        out.extend_from_slice(&hay[last..at]);
        out.extend_from_slice(MARK);
        last = at + len;
    }
    out.extend_from_slice(&hay[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        let headers: Vec<_> = pairs
            .iter()
            .map(|(n, v)| {
                (
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect();
        Redactor::new(&headers)
    }

    fn apply(r: &Redactor, body: &str) -> String {
        String::from_utf8(r.apply(Bytes::from(body.to_owned())).to_vec()).unwrap()
    }

    #[test]
    fn values_tokens_and_their_json_forms_are_redacted() {
        let r = redactor(&[
            ("authorization", "Bearer s3cret/xyz"),
            ("x-api-key", "k-123"),
        ]);
        assert_eq!(
            apply(&r, r#"{"authorization":"Bearer s3cret/xyz","k":"k-123"}"#),
            r#"{"authorization":"[redacted]","k":"[redacted]"}"#
        );
        assert_eq!(apply(&r, r#"token=s3cret\/xyz;"#), "token=[redacted];");
        assert_eq!(apply(&r, "s3cret/xyz s3cret/xyz"), "[redacted] [redacted]");
        assert_eq!(apply(&r, "nothing here"), "nothing here");
    }

    #[test]
    fn a_basic_tokens_decoded_password_and_json_escapes_are_redacted() {
        // "alice:pa\"ss/word"
        let token = base64::engine::general_purpose::STANDARD.encode("alice:pa\"ss/word");
        let r = redactor(&[("authorization", &format!("Basic {token}"))]);
        let body = format!("{token} alice:pa\"ss/word {{\"p\":\"pa\\\"ss\\/word\"}}");
        let out = apply(&r, &body);
        assert!(
            !out.contains("ss/word") && !out.contains("ss\\/word"),
            "{out}"
        );
        assert!(!out.contains(&token), "{out}");
    }

    /// A value echoed with its other characters `\uXXXX`-escaped (.NET's JSON encoder writes
    /// `+` as `\u002B`) or percent-encoded (in an echoed URL), in either hex case, is
    /// redacted too. Before, only the raw and the JSON-escaped forms were (review LOW).
    #[test]
    fn unicode_escaped_and_percent_encoded_values_are_redacted() {
        let r = redactor(&[("x-api-key", "abc+def==")]);
        for echoed in [
            "abc\\u002Bdef\\u003D\\u003D",
            "abc\\u002bdef\\u003d\\u003d",
            "abc%2Bdef%3D%3D",
            "abc%2bdef%3d%3d",
        ] {
            let body = format!("{{\"echo\":\"{echoed}\"}}");
            assert_eq!(apply(&r, &body), r#"{"echo":"[redacted]"}"#, "{echoed}");
        }
    }

    #[test]
    fn short_values_are_left_alone() {
        let r = redactor(&[("accept-language", "en")]);
        assert_eq!(apply(&r, "en garde"), "en garde");
    }
}
