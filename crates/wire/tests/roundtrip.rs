//! Property tests for invariant 3 ("ids are exact") across the whole forwarding path of the
//! wire crate: a client's request is parsed, re-encoded for the backend, the backend's answer
//! is parsed, and the client's id is restored. Whatever the id was, it must come back as the
//! same JSON text, and no input bytes may ever panic the parser.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::value::RawValue;
use switchboard_wire::{encode_request, restore_response, Message, MessageKind, RequestId};

/// JSON text of an id MCP allows: any integer literal (far beyond i64/2^53 too) or any string.
fn valid_id() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        // Integers of any length: what a double or an i64 cannot hold must survive too.
        "-?[1-9][0-9]{0,60}",
        Just("0".to_owned()),
        Just("-0".to_owned()),
        // Strings of any content, escaped however serde_json chooses.
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        // Strings spelled with escapes a serializer would not choose: \u escapes, \/ .
        "[a-z]{0,4}".prop_map(|s| format!(r#""\u00e9\/{s}\ud83d\ude00""#)),
    ]
}

/// Params as arbitrary JSON objects (via a small recursive value strategy).
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-zA-Z_/.]{0,8}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn params() -> impl Strategy<Value = Option<String>> {
    prop::option::of(
        prop::collection::btree_map("[a-zA-Z_]{0,8}", json_value(), 0..5).prop_map(|m| {
            // Pretty-printed on purpose: newlines in params must not survive into a line.
            serde_json::to_string_pretty(&serde_json::Value::Object(m.into_iter().collect()))
                .unwrap()
        }),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ids_round_trip_exactly(
        id in valid_id(),
        method in "[a-z]{1,10}(/[a-zA-Z_]{1,10}){0,2}",
        params in params(),
        backend_key in "[a-zA-Z0-9_-]{1,40}",
    ) {
        // 1. The client's request, as the client wrote it.
        let client = match &params {
            Some(p) => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{p}}}"#),
            None => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#),
        };
        let msg = Message::parse(client.as_bytes()).unwrap();
        prop_assert_eq!(msg.kind, MessageKind::Request);
        let client_id = msg.id.clone().unwrap();
        prop_assert_eq!(client_id.as_json(), id.as_str());

        // 2. Re-encoded for the backend under the gateway's own key: one line, same payload.
        let key = RequestId::from_string(&backend_key);
        let line = encode_request(&key, msg.method.unwrap(), msg.params);
        prop_assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
        let upstream = Message::parse(&line).unwrap();
        prop_assert_eq!(upstream.id.as_ref().unwrap().as_json(), key.as_json());
        prop_assert_eq!(upstream.method, Some(method.as_str()));
        let same_params = match (&params, upstream.params) {
            (None, None) => true,
            (Some(p), Some(raw)) => {
                serde_json::from_str::<serde_json::Value>(p).unwrap()
                    == serde_json::from_str::<serde_json::Value>(raw.get()).unwrap()
            }
            _ => false,
        };
        prop_assert!(same_params);

        // 3. Encoding what was parsed again is a fixed point (byte for byte).
        let again = encode_request(&key, upstream.method.unwrap(), upstream.params);
        prop_assert_eq!(&again, &line);

        // 4. The backend answers under the key; the client gets its own id back, exactly.
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"ok":true}}}}"#, key.as_json());
        let answer = Message::parse(answer.as_bytes()).unwrap();
        let restored = restore_response(&client_id, "result", answer.result.unwrap().get());
        let back = Message::parse(&restored).unwrap();
        prop_assert_eq!(back.kind, MessageKind::Response);
        let back_id = back.id.unwrap();
        prop_assert_eq!(back_id.as_json(), id.as_str());
    }

    #[test]
    fn ids_survive_from_raw(id in valid_id()) {
        let raw = RawValue::from_string(id.clone()).unwrap();
        let parsed = RequestId::from_raw(&raw).unwrap();
        prop_assert_eq!(parsed.as_json(), id.as_str());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Message::parse(&bytes);
    }

    #[test]
    fn mangled_messages_never_panic(
        id in valid_id(),
        cut in 0usize..200,
        flip in any::<u8>(),
        at in 0usize..200,
    ) {
        // Near-valid input reaches deeper parser states than random bytes do.
        let good = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"_meta":{{"k":[1,{{}}]}},"name":"x"}}}}"#);
        let mut bytes = good.into_bytes();
        if !bytes.is_empty() {
            let i = at % bytes.len();
            bytes[i] ^= flip;
        }
        bytes.truncate(cut.max(1).min(bytes.len()));
        if let Ok(m) = Message::parse(&bytes) {
            let _ = m.meta("k");
            let _ = m.param("name");
        }
    }
}
