//! Building outgoing messages by splicing raw JSON, with no intermediate `Value`.
//!
//! Every encoder strips raw newlines so the output is a valid stdio line and a valid SSE `data:`
//! payload: in valid JSON text a CR or LF byte can only be insignificant whitespace (inside
//! strings they must be escaped), so replacing it with a space never changes the value.

use serde_json::value::RawValue;

use crate::{ErrorObject, RequestId};

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>[,"params":<params>]}`
pub fn encode_request(id: &RequestId, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let mut out = with_capacity(params.map_or(0, |p| p.get().len()) + method.len() + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_json().as_bytes());
    push_method_and_params(&mut out, method, params);
    finish(out)
}

/// `{"jsonrpc":"2.0","method":<method>[,"params":<params>]}`
pub fn encode_notification(method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let mut out = with_capacity(params.map_or(0, |p| p.get().len()) + method.len() + 48);
    out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
    push_method_and_params(&mut out, method, params);
    finish(out)
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`
pub fn encode_result(id: &RequestId, result: &str) -> Vec<u8> {
    restore_response(id, "result", result)
}

/// `{"jsonrpc":"2.0"[,"id":<id>],"error":{…}}`. `id: None` omits the member (never `null`).
pub fn encode_error(id: Option<&RequestId>, error: &ErrorObject) -> Vec<u8> {
    let mut out = with_capacity(96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        out.extend_from_slice(br#""id":"#);
        out.extend_from_slice(id.as_json().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(br#""error":"#);
    // ErrorObject holds only strings, numbers and JSON values: serialisation cannot fail.
    let _ = serde_json::to_writer(&mut out, error);
    out.push(b'}');
    finish(out)
}

/// Rebuilds a backend response for a client: the client's own id, and the backend's `result`
/// or `error` member copied verbatim. `member` is `"result"` or `"error"`.
pub fn restore_response(id: &RequestId, member: &str, payload: &str) -> Vec<u8> {
    let mut out = with_capacity(payload.len() + id.as_json().len() + 40);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_json().as_bytes());
    out.extend_from_slice(b",\"");
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(payload.as_bytes());
    out.push(b'}');
    finish(out)
}

fn with_capacity(n: usize) -> Vec<u8> {
    Vec::with_capacity(n)
}

fn push_method_and_params(out: &mut Vec<u8>, method: &str, params: Option<&RawValue>) {
    out.extend_from_slice(br#","method":"#);
    // Serialising a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, method);
    if let Some(params) = params {
        out.extend_from_slice(br#","params":"#);
        out.extend_from_slice(params.get().as_bytes());
    }
    out.push(b'}');
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    for b in out.iter_mut() {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{codes, Message};

    fn id(s: &str) -> RequestId {
        RequestId::from_raw(&RawValue::from_string(s.into()).unwrap()).unwrap()
    }

    #[test]
    fn request_round_trips_through_parse() {
        let params = RawValue::from_string("{\n \"a\" : [1,\r\n2]}".into()).unwrap();
        let out = encode_request(&id(r#""sb-1""#), "tools/call", Some(&params));
        assert!(!out.contains(&b'\n') && !out.contains(&b'\r'));
        let m = Message::parse(&out).unwrap();
        assert_eq!(m.method, Some("tools/call"));
        assert_eq!(m.id.unwrap().as_json(), r#""sb-1""#);
        let v: serde_json::Value = serde_json::from_str(m.params.unwrap().get()).unwrap();
        assert_eq!(v, serde_json::json!({"a":[1,2]}));
    }

    #[test]
    fn restore_keeps_big_ids_exact() {
        let out = restore_response(&id("9007199254740993"), "result", r#"{"ok":true}"#);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":9007199254740993,"result":{"ok":true}}"#
        );
    }

    #[test]
    fn errors_omit_unreadable_ids() {
        let e = ErrorObject::new(codes::PARSE_ERROR, "Parse error");
        let out = String::from_utf8(encode_error(None, &e)).unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#
        );
        let out = String::from_utf8(encode_error(Some(&id("-3")), &e)).unwrap();
        assert!(out.contains(r#""id":-3"#));
        let n = encode_notification("notifications/x", None);
        assert_eq!(n, br#"{"jsonrpc":"2.0","method":"notifications/x"}"#);
    }
}
