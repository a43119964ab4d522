//! parse → encode → parse is lossless for everything the parser accepts: the re-encoded
//! message is one line, has the same kind, the exact same id text, the same method, and the
//! same params/result/error (raw JSON, with only insignificant CR/LF folded to spaces).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_wire::{encode_notification, encode_request, restore_response, Message, MessageKind};

/// What an encoder is allowed to change in a raw member: CR/LF (insignificant whitespace in
/// valid JSON) become spaces.
fn folded(raw: &str) -> String {
    raw.replace(['\n', '\r'], " ")
}

fn same_raw(a: Option<&serde_json::value::RawValue>, b: Option<&serde_json::value::RawValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => folded(a.get()) == b.get(),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Message::parse(data) else { return };
    let encoded = match msg.kind {
        MessageKind::Request => {
            let (Some(id), Some(method)) = (&msg.id, msg.method) else { unreachable!() };
            encode_request(id, method, msg.params)
        }
        MessageKind::Notification => {
            let Some(method) = msg.method else { unreachable!() };
            encode_notification(method, msg.params)
        }
        MessageKind::Response => {
            let Some(id) = &msg.id else { unreachable!() };
            match (msg.result, msg.error) {
                (Some(r), None) => restore_response(id, "result", r.get()),
                (None, Some(e)) => restore_response(id, "error", e.get()),
                _ => unreachable!(),
            }
        }
    };
    assert!(!encoded.contains(&b'\n') && !encoded.contains(&b'\r'), "not one line");
    let again = Message::parse(&encoded).expect("an encoded message must parse");
    assert_eq!(again.kind, msg.kind);
    assert_eq!(
        again.id.as_ref().map(|i| i.as_json()),
        msg.id.as_ref().map(|i| i.as_json()),
        "ids must be exact"
    );
    assert_eq!(again.method, msg.method);
    if msg.kind != MessageKind::Response {
        // A response's stray `params` member means nothing and is not re-encoded.
        assert!(same_raw(msg.params, again.params), "params changed");
    }
    assert!(same_raw(msg.result, again.result), "result changed");
    assert!(same_raw(msg.error, again.error), "error changed");
});
