//! The configured headers' values (credentials, as a rule) never come back to a caller: an
//! API that echoes its request (a debug endpoint, an error page quoting the headers) would
//! otherwise hand the backend's credential to whoever calls it. Each value, the token after
//! an `Authorization` scheme (`Bearer`, `Basic`, `Token`; a Basic token's decoded
//! `user:password` and password too), each byte as sent or JSON-escaped (`\uXXXX`, `\/`,
//! `\"`, `\\`) or percent-encoded, each its own way (encoders escape different characters),
//! are replaced by `[redacted]` in every response body before it becomes a result, success
//! or error. Values shorter than [`MIN_SECRET`] bytes are left alone: they would mangle
//! ordinary text and cannot be secrets worth the name.

use base64::Engine as _;
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION};

/// What replaces a secret.
const MARK: &[u8] = b"[redacted]";
/// Shorter values are not searched for.
pub(crate) const MIN_SECRET: usize = 4;
/// Schemes whose token is searched for on its own.
const SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

/// Every configured value, each byte of it as sent or in any escape an encoder may have
/// chosen for it ([`byte_pattern`]): one pattern per value, longest value first.
#[derive(Default)]
pub(crate) struct Redactor {
    patterns: Vec<regex::bytes::Regex>,
}

/// Room for a long credential's pattern (a 16 KB token's is a few MB compiled).
const PATTERN_LIMIT: usize = 64 << 20;

impl Redactor {
    /// The patterns of `headers`' values and of `more` (other secrets: the `${VAR}` values
    /// in the base URL's path).
    pub(crate) fn new(headers: &[(HeaderName, HeaderValue)], more: &[String]) -> Self {
        let mut raw: Vec<Vec<u8>> = more.iter().map(|v| v.as_bytes().to_vec()).collect();
        for (name, value) in headers {
            let value = value.as_bytes();
            raw.push(value.to_vec());
            // An `Authorization` token after any scheme (`ApiKey`, `SSWS`, `Bot`, `DPoP`…);
            // elsewhere after the usual ones only.
            let any_scheme = name == AUTHORIZATION || name == PROXY_AUTHORIZATION;
            if let Some((scheme, token)) = split_scheme(value, any_scheme) {
                raw.push(token.to_vec());
                if scheme.eq_ignore_ascii_case("basic") {
                    raw.extend(basic_parts(token));
                }
            }
            // Each cookie's value on its own: an API may echo the cookies it parsed.
            if name == COOKIE {
                raw.extend(cookie_values(value));
            }
        }
        raw.retain(|v| v.len() >= MIN_SECRET);
        raw.sort_by_key(|v| std::cmp::Reverse(v.len()));
        raw.dedup();
        let patterns = raw.iter().filter_map(|v| pattern_of(v)).collect();
        Redactor { patterns }
    }

    /// `body` with every occurrence of every value replaced (the same bytes if none occurs).
    pub(crate) fn apply(&self, body: Bytes) -> Bytes {
        let mut body = body;
        for pattern in &self.patterns {
            if let std::borrow::Cow::Owned(replaced) = pattern.replace_all(&body, MARK) {
                body = Bytes::from(replaced);
            }
        }
        body
    }
}

/// `value`'s pattern, every spelling of every byte; where that cannot be built (past
/// [`PATTERN_LIMIT`]), its bytes as sent: never nothing.
fn pattern_of(value: &[u8]) -> Option<regex::bytes::Regex> {
    let build = |pattern: String| {
        regex::bytes::RegexBuilder::new(&pattern)
            .size_limit(PATTERN_LIMIT)
            .build()
    };
    let every: String = value.iter().map(|b| byte_pattern(*b)).collect();
    let exact: String = value.iter().map(|b| format!("(?-u:\\x{b:02x})")).collect();
    build(every)
        .or_else(|_| {
            // Never the value: its length says enough.
            tracing::warn!(
                bytes = value.len(),
                "a configured header value too long to search for in every spelling: only as sent"
            );
            build(exact)
        })
        .ok()
}

/// One byte of a secret as an echo may spell it: as sent; JSON-escaped as `\uXXXX` (an ASCII
/// byte; .NET escapes `+` so, Go `<>&`), as `\/`, `\"` or `\\`; or percent-encoded (an
/// echoed URL or form); hex digits in either case. Encoders escape some characters and
/// not others, so each byte may be spelled its own way.
fn byte_pattern(b: u8) -> String {
    let hex = |n: u8| {
        let (upper, lower) = (format!("{n:X}"), format!("{n:x}"));
        match upper == lower {
            true => upper,
            false => format!("[{upper}{lower}]"),
        }
    };
    let escaped = format!("{}{}", hex(b >> 4), hex(b & 0xf));
    // Longest first: at one place the first alternative that matches wins, and a value
    // ending in `\` must take the echo's `\\` whole (half of it would leave the closing
    // quote escaped).
    let mut forms = Vec::new();
    match b {
        b'/' => forms.push("\\\\/".to_owned()),
        b'"' => forms.push("\\\\\"".to_owned()),
        b'\\' => forms.push("\\\\\\\\".to_owned()),
        _ => {}
    }
    if b.is_ascii() {
        forms.push(format!("\\\\u00{escaped}"));
    }
    forms.push(format!("%{escaped}"));
    forms.push(format!("\\x{b:02x}"));
    format!("(?-u:{})", forms.join("|"))
}

/// `Bearer abc` → (`Bearer`, `abc`), for the schemes in [`SCHEMES`].
fn split_scheme(value: &[u8], any_scheme: bool) -> Option<(&str, &[u8])> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(|c: char| c.is_ascii_whitespace())?;
    let token = token.trim();
    let known = any_scheme || SCHEMES.iter().any(|s| scheme.eq_ignore_ascii_case(s));
    (known && !token.is_empty()).then_some((scheme, token.as_bytes()))
}

/// The values of a `Cookie` header's `name=value` pairs.
fn cookie_values(value: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    (value.split(|b| *b == b';'))
        .filter_map(|pair| pair.splitn(2, |b| *b == b'=').nth(1))
        .map(|v| v.trim_ascii().to_vec())
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
        Redactor::new(&headers, &[])
    }

    fn apply(r: &Redactor, body: &str) -> String {
        String::from_utf8(r.apply(Bytes::from(body.to_owned())).to_vec()).unwrap()
    }

    /// Review: an `Authorization` token after a scheme other than Bearer/Basic/Token, each
    /// cookie's value and a secret of the base URL came back as an echoing API sent them.
    #[test]
    fn any_schemes_token_each_cookie_and_the_url_secrets_are_redacted() {
        let headers = [
            ("Authorization", "ApiKey CustomSchemeSecret555"),
            ("Cookie", "session=CookieSecret987; theme=dark"),
        ];
        let headers: Vec<_> = (headers.iter())
            .map(|(n, v)| {
                let name = HeaderName::from_bytes(n.as_bytes()).unwrap();
                (name, HeaderValue::from_str(v).unwrap())
            })
            .collect();
        let r = Redactor::new(&headers, &["123456:BotPathSecretXYZ".to_owned()]);
        let body = r#"{"credential":"CustomSchemeSecret555","cookies":{"session":"CookieSecret987","theme":"dark"},"path":"/v1/bot123456:BotPathSecretXYZ/items"}"#;
        let out = apply(&r, body);
        for secret in [
            "CustomSchemeSecret555",
            "CookieSecret987",
            "BotPathSecretXYZ",
        ] {
            assert!(!out.contains(secret), "{out}");
        }
        // Another header's words after a space are not taken for a token.
        let plain = redactor(&[("X-Client", "my agent")]);
        assert_eq!(apply(&plain, "agent"), "agent");
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

    /// A value echoed with some of its characters `\\uXXXX`-escaped (.NET's JSON encoder
    /// writes `abc+def==` as `abc\\u002Bdef==`), or percent-encoded (an echoed URL), in
    /// either hex case, and each character its own way, is redacted too. Before, only the raw
    /// and the JSON-escaped forms were (review LOW), then only the form escaping every one.
    #[test]
    fn unicode_escaped_and_percent_encoded_values_are_redacted() {
        let r = redactor(&[("x-api-key", "abc+def==")]);
        for echoed in [
            "abc\\u002Bdef==",
            "abc\\u002bdef\\u003D=",
            "abc%2Bdef%3D%3D",
            "abc%2bdef==",
            "\\u0061bc+def==",
        ] {
            let body = format!("{{\"echo\":\"{echoed}\"}}");
            assert_eq!(apply(&r, &body), r#"{"echo":"[redacted]"}"#, "{echoed}");
        }
    }

    /// A value ending in `\` echoed JSON-escaped is taken whole: the body stays JSON.
    #[test]
    fn a_trailing_backslash_is_taken_whole() {
        let r = redactor(&[("x-api-key", "s3cr3t\\")]);
        let body = r#"{"echo":"s3cr3t\\","n":1}"#;
        assert_eq!(apply(&r, body), r#"{"echo":"[redacted]","n":1}"#);
    }

    /// A value too short to be a secret is not searched for in any spelling: `/v` percent-
    /// encoded is four bytes, and ordinary paths must stay as they are.
    #[test]
    fn a_short_value_is_short_in_every_spelling() {
        let r = redactor(&[("x-prefix", "/v")]);
        assert_eq!(apply(&r, "GET %2Fv/x and /v/x"), "GET %2Fv/x and /v/x");
    }

    /// A long credential (a 12 KB token: past what one pattern of every value held under
    /// the regex crate's default size limit) still builds its pattern and is redacted;
    /// nothing configured is silently left unsearched (review: one failed build left every
    /// value unsearched).
    #[test]
    fn a_long_value_is_redacted_too() {
        let jwt = "eyJ".to_owned() + &"a1_-".repeat(3 * 1024);
        let r = redactor(&[("authorization", &format!("Bearer {jwt}"))]);
        assert_eq!(r.patterns.len(), 2, "the header value and its token");
        assert_eq!(apply(&r, &format!("x {jwt} y")), "x [redacted] y");
    }

    #[test]
    fn short_values_are_left_alone() {
        let r = redactor(&[("accept-language", "en")]);
        assert_eq!(apply(&r, "en garde"), "en garde");
    }
}
