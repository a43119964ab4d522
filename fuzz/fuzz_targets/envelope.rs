//! The envelope parsers on arbitrary bytes: they must never panic, and whatever the plain
//! parser accepts must satisfy the shape its `MessageKind` promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_wire::{Message, MessageKind};

fuzz_target!(|data: &[u8]| {
    // The client parse (with its strict scan) never panics, refuses only with the envelope's
    // codes or -32602, and accepts nothing the plain parse refuses.
    match Message::parse_client(data) {
        Ok(_) => assert!(Message::parse(data).is_ok()),
        Err(e) => assert!(
            matches!(e.error.code, -32700 | -32600 | -32602),
            "code {}",
            e.error.code
        ),
    }
    let msg = match Message::parse(data) {
        Ok(m) => m,
        Err(e) => {
            // Refusals are spec-shaped: parse error or invalid request, never anything else.
            assert!(matches!(e.error.code, -32700 | -32600), "code {}", e.error.code);
            return;
        }
    };
    match msg.kind {
        MessageKind::Request => assert!(msg.id.is_some() && msg.method.is_some()),
        MessageKind::Notification => assert!(msg.id.is_none() && msg.method.is_some()),
        MessageKind::Response => {
            assert!(msg.id.is_some() && msg.method.is_none());
            assert!(msg.result.is_some() != msg.error.is_some());
        }
    }
    // The lookups the era classifier and the router make on every request.
    let _ = msg.meta("io.modelcontextprotocol/protocolVersion");
    let _ = msg.meta("progressToken");
    let _ = msg.param("name");
    let _ = msg.param("uri");
    if let Some(id) = &msg.id {
        // An accepted id is a string or an integer, and is valid JSON on its own.
        let text = id.as_json();
        assert!(serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok());
        assert!(!matches!(text.as_bytes().first(), Some(b'n' | b't' | b'f' | b'{' | b'[')));
        assert!(!text.contains(['.', 'e', 'E']) || text.starts_with('"'));
    }
});
