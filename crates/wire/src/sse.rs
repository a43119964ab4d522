//! Server-Sent Events framing (encoder side; clients in tests use a maintained SSE parser).

/// One `event: <event>` frame, with an optional `id:`, carrying one JSON message as `data:`.
///
/// `data` must be a single line: the gateway's own encoders never emit raw newlines, and any
/// CR/LF that still arrives is folded to a space (insignificant whitespace in valid JSON), so a
/// payload can never inject an extra SSE field.
pub fn frame(event: &str, id: Option<&str>, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + event.len() + 24);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.push(b'\n');
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend(
        data.iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\n\n");
    out
}

/// A `message` frame: how every JSON-RPC message travels on an MCP SSE stream.
pub fn message(data: &[u8]) -> Vec<u8> {
    frame("message", None, data)
}

/// A keep-alive comment. Clients ignore comment lines; proxies see traffic.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        assert_eq!(
            message(br#"{"a":1}"#),
            b"event: message\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(
            frame("endpoint", Some("7"), b"/messages?session_id=x"),
            b"event: endpoint\nid: 7\ndata: /messages?session_id=x\n\n"
        );
        assert_eq!(
            message(b"{\"a\":\n1}\r\n"),
            b"event: message\ndata: {\"a\": 1}  \n\n"
        );
    }
}
