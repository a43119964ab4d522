//! Modern (2026-07-28) HTTP header rules that can be checked without I/O: `Mcp-Method` and
//! `Mcp-Name` must mirror the body (mcp-wire.md §3.3). Values may use the
//! `=?base64?<base64 of UTF-8>?=` sentinel encoding.

use base64::Engine;

use crate::classify::mismatch;
use crate::{ErrorObject, Message};

/// Decodes a header value: the sentinel form to its UTF-8 text, anything else as-is.
/// `None` when a sentinel value is not valid base64 or not UTF-8.
pub fn decode_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// The body value `Mcp-Name` must mirror: `params.name` for `tools/call` and `prompts/get`,
/// `params.uri` for `resources/read`.
fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// Checks `Mcp-Method` (required on every request, case-sensitive) and `Mcp-Name` (required
/// where the method has a name) against the body. `None` header = absent; `Some(None)` =
/// present but not visible ASCII.
pub fn check_modern(
    msg: &Message<'_>,
    mcp_method: Option<Option<&str>>,
    mcp_name: Option<Option<&str>>,
) -> Result<(), ErrorObject> {
    let method = msg.method.unwrap_or_default();
    match mcp_method {
        None => return Err(mismatch("Mcp-Method header is required")),
        Some(Some(h)) if h == method => {}
        Some(_) => {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Method does not match the body method '{method}'"
            )))
        }
    }
    let Some(member) = name_member(method) else {
        return Ok(());
    };
    let body_value = msg
        .param(member)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    match (body_value, mcp_name) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(mismatch("Mcp-Name header is required for this method")),
        (Some(body), Some(header)) => {
            if header.and_then(decode_value).as_deref() == Some(body.as_str()) {
                Ok(())
            } else {
                Err(mismatch(format!(
                    "Header mismatch: Mcp-Name does not match the body {member}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes;

    fn msg(body: &str) -> Message<'_> {
        Message::parse(body.as_bytes()).unwrap()
    }

    #[test]
    fn sentinel_decoding() {
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_value("=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        assert_eq!(decode_value("plain").as_deref(), Some("plain"));
        assert_eq!(decode_value("=?base64?!!!?="), None);
    }

    #[test]
    fn method_and_name_must_mirror_the_body() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo"}}"#;
        let m = msg(call);
        assert!(check_modern(
            &m,
            Some(Some("tools/call")),
            Some(Some("=?base64?aMOpbGxv?="))
        )
        .is_ok());
        for (method, name) in [
            (None, Some(Some("héllo"))),
            (Some(Some("TOOLS/CALL")), Some(Some("x"))),
            (Some(None), None),
            (Some(Some("tools/call")), None),
            (Some(Some("tools/call")), Some(Some("other"))),
            (Some(Some("tools/call")), Some(None)),
        ] {
            assert_eq!(
                check_modern(&m, method, name).unwrap_err().code,
                codes::HEADER_MISMATCH,
                "{method:?} {name:?}"
            );
        }
        let list = msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert!(check_modern(&list, Some(Some("tools/list")), None).is_ok());
        let read = msg(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://x"}}"#,
        );
        assert!(check_modern(&read, Some(Some("resources/read")), Some(Some("test://x"))).is_ok());
    }
}
