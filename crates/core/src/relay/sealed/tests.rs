//! The relay's tokens: sealing, opening, binding, single use and the used-nonce shares.

use super::*;

fn principal(sub: &str) -> Principal {
    Principal {
        issuer: "api-key".into(),
        subject: sub.into(),
        claims: serde_json::Map::new(),
        credential: None,
    }
}

fn raw(v: Value) -> Box<RawValue> {
    RawValue::from_string(v.to_string()).unwrap()
}

fn pending(state: &str) -> Answer {
    let result =
        json!({"resultType": "input_required", "inputRequests": {}, "requestState": state});
    Answer::ok(switchboard_wire::encode_result(
        &RequestId::from_string("x"),
        &result.to_string(),
    ))
}

fn token_of(answer: &Answer) -> String {
    let v: Value = serde_json::from_slice(&answer.body).unwrap();
    v["result"]["requestState"].as_str().unwrap().to_owned()
}

use serde_json::json;

fn result_of_answer(answer: &Answer) -> Value {
    let v: Value = serde_json::from_slice(&answer.body).unwrap();
    v["result"].clone()
}

/// Whatever a loose client parser reads as the state, it is never the backend's own:
/// sealing replaces every spelling, and a result that asks for nothing loses them all.
#[test]
fn no_spelling_of_request_state_leaves_bare() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let (alice, a) = (principal("alice"), "a".parse::<BackendId>().unwrap());
    let id = RequestId::from_string("x");
    let params = raw(json!({"name": "t"}));
    let bound = Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params: Some(&params),
    };
    let asks = json!({"resultType": "input_required", "inputRequests": {},
        "requestState": "inner", "REQUESTSTATE": "bare", "RequestState": "bare",
        "reque\u{17f}tState": "bare"});
    let answer = Answer::ok(switchboard_wire::encode_result(&id, &asks.to_string()));
    let sealed = result_of_answer(&relay.seal(&sealer, &bound, &id, answer));
    // Sorted: whether `Value` keeps insertion order depends on serde_json's features.
    let mut keys: Vec<&String> = sealed.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["inputRequests", "requestState", "resultType"],
        "{sealed}"
    );
    assert!(sealed["requestState"].as_str().unwrap().starts_with(PREFIX));

    let done = r#"{"resultType":"complete","content":[],"\u0072equestState":"bare","REQUESTSTATE":1,"reque\u017ftState":2}"#;
    let answer = Answer::ok(switchboard_wire::encode_result(&id, done));
    let stripped = result_of_answer(&SealedRelay::strip(&id, answer));
    assert_eq!(stripped, json!({"resultType": "complete", "content": []}));
    let error = Answer::error(&id, &ErrorObject::new(codes::INTERNAL_ERROR, "x"));
    let body = error.body.clone();
    assert_eq!(
        SealedRelay::strip(&id, error).body,
        body,
        "errors pass as they are"
    );
}

/// A retry spelling the key otherwise cannot smuggle state past `open`.
#[test]
fn another_spelling_of_request_state_is_refused() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let (alice, a) = (principal("alice"), "a".parse::<BackendId>().unwrap());
    let id = RequestId::from_string("x");
    for params in [
        json!({"name": "t", "REQUESTSTATE": "forged"}),
        // U+017F folds to `s` in Go's `encoding/json`.
        json!({"name": "t", "reque\u{17f}tState": "forged"}),
        json!({"name": "t", "requestState": "sbr1.x", "RequestState": "forged"}),
    ] {
        let params = raw(params);
        let bound = Bound {
            caller: &alice,
            method: "tools/call",
            backend: &a,
            params: Some(&params),
        };
        let refusal = relay.open(&sealer, &bound, &id).unwrap_err().unwrap();
        assert_eq!(
            refusal.error_code,
            Some(i64::from(codes::INVALID_PARAMS)),
            "{}",
            params.get()
        );
    }
    let plain = raw(json!({"name": "t", "arguments": {"REQUESTSTATE": "its own"}}));
    let bound = Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params: Some(&plain),
    };
    assert!(
        matches!(relay.open(&sealer, &bound, &id), Ok(None)),
        "nested keys are the tool's"
    );
}

#[test]
fn a_token_unwraps_once_for_its_caller_backend_and_call() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let (alice, bob) = (principal("alice"), principal("bob"));
    let (a, b) = (
        "a".parse::<BackendId>().unwrap(),
        "b".parse::<BackendId>().unwrap(),
    );
    let id = RequestId::from_string("x");
    let first = raw(json!({"name": "t", "arguments": {"k": 1}}));
    let bound = Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params: Some(&first),
    };
    let token = token_of(&relay.seal(&sealer, &bound, &id, pending("inner-1")));
    let retry = raw(
        json!({"name": "t", "arguments": {"k": 1}, "requestState": token,
        "inputResponses": {}}),
    );
    let on = |caller, backend, params| Bound {
        caller,
        method: "tools/call",
        backend,
        params,
    };
    let reason = |r: Result<Option<Box<RawValue>>, Result<Answer, CoreError>>| {
        let v: Value = serde_json::from_slice(&r.err().unwrap().ok().unwrap().body).unwrap();
        v["error"]["data"]["reason"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        reason(relay.open(&sealer, &on(&bob, &a, Some(&retry)), &id)),
        "invalid_request_state"
    );
    assert_eq!(
        reason(relay.open(&sealer, &on(&alice, &b, Some(&retry)), &id)),
        "invalid_request_state"
    );
    let other = raw(json!({"name": "t", "arguments": {"k": 2}, "requestState": token}));
    assert_eq!(
        reason(relay.open(&sealer, &on(&alice, &a, Some(&other)), &id)),
        "invalid_request_state"
    );
    let opened = relay
        .open(&sealer, &on(&alice, &a, Some(&retry)), &id)
        .ok()
        .unwrap()
        .unwrap();
    let opened: Value = serde_json::from_str(opened.get()).unwrap();
    assert_eq!(opened["requestState"], "inner-1");
    assert_eq!(opened["inputResponses"], json!({}));
    assert_eq!(
        reason(relay.open(&sealer, &on(&alice, &a, Some(&retry)), &id)),
        "unknown_request_state"
    );
    // No requestState: a first round, untouched.
    assert!(relay
        .open(&sealer, &on(&alice, &a, Some(&first)), &id)
        .ok()
        .unwrap()
        .is_none());
}

/// The backend's state is sealed, not encoded: nothing of it (or of the payload) is
/// readable in the token; the replica that sealed it is, and is bound.
#[test]
fn the_backends_state_is_not_readable_in_its_token() {
    let sealer = Sealer::new().at_replica(Some("replica-7".into()));
    let relay = SealedRelay::new(Duration::from_secs(60));
    let alice = principal("alice");
    let a = "a".parse::<BackendId>().unwrap();
    let id = RequestId::from_string("x");
    let first = raw(json!({"name": "t"}));
    let bound = |params| Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params,
    };
    let secret = "backend-secret-state-0123";
    let token = token_of(&relay.seal(&sealer, &bound(Some(&first)), &id, pending(secret)));
    assert!(token.starts_with(PREFIX), "{token}");
    let decoded: Vec<Vec<u8>> = token[PREFIX.len()..]
        .split('.')
        .map(|part| URL_SAFE_NO_PAD.decode(part).unwrap())
        .collect();
    for part in &decoded {
        let text = String::from_utf8_lossy(part);
        assert!(
            !text.contains(secret) && !text.contains("\"b\""),
            "readable: {text}"
        );
    }
    assert_eq!(replica_of_token(&token).as_deref(), Some("replica-7"));
    // Naming another replica in the clear breaks the seal.
    let moved = format!(
        "{PREFIX}{}.{}",
        URL_SAFE_NO_PAD.encode("replica-8"),
        token.rsplit_once('.').unwrap().1
    );
    let retry = raw(json!({"name": "t", "requestState": moved}));
    let refused = relay.open(&sealer, &bound(Some(&retry)), &id);
    let answer = refused.expect_err("a token moved to another replica opened");
    let v: Value = serde_json::from_slice(&answer.ok().unwrap().body).unwrap();
    assert_eq!(v["error"]["data"]["reason"], "invalid_request_state", "{v}");
    let retry = raw(json!({"name": "t", "requestState": token}));
    let opened = relay
        .open(&sealer, &bound(Some(&retry)), &id)
        .ok()
        .unwrap()
        .unwrap();
    let opened: Value = serde_json::from_str(opened.get()).unwrap();
    assert_eq!(opened["requestState"], secret);
}

/// A token is opened in its exact encoding: another case of its sealed part is not the
/// token that was issued.
#[test]
fn a_token_with_its_mac_in_another_case_is_refused() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let alice = principal("alice");
    let a = "a".parse::<BackendId>().unwrap();
    let id = RequestId::from_string("x");
    let first = raw(json!({"name": "t"}));
    let bound = |params| Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params,
    };
    let token = token_of(&relay.seal(&sealer, &bound(Some(&first)), &id, pending("s")));
    let (body, sealed) = token.rsplit_once('.').unwrap();
    assert!(sealed.bytes().any(|c| c.is_ascii_lowercase()), "{sealed}");
    let shouted = format!("{body}.{}", sealed.to_ascii_uppercase());
    let retry = raw(json!({"name": "t", "requestState": shouted}));
    let refused = relay.open(&sealer, &bound(Some(&retry)), &id);
    let answer = refused.expect_err("an upper-cased token was accepted");
    let v: Value = serde_json::from_slice(&answer.ok().unwrap().body).unwrap();
    assert_eq!(v["error"]["data"]["reason"], "invalid_request_state", "{v}");
    // The token as issued still opens (the refusal used no nonce).
    let retry = raw(json!({"name": "t", "requestState": token}));
    assert!(relay.open(&sealer, &bound(Some(&retry)), &id).is_ok());
}

#[test]
fn a_principal_over_its_share_of_used_nonces_does_not_stop_another() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let (alice, bob) = (principal("alice"), principal("bob"));
    let a = "a".parse::<BackendId>().unwrap();
    let id = RequestId::from_string("x");
    let first = raw(json!({"name": "t"}));
    let redeem = |caller: &Principal| {
        let bound = Bound {
            caller,
            method: "tools/call",
            backend: &a,
            params: Some(&first),
        };
        let token = token_of(&relay.seal(&sealer, &bound, &id, pending("s")));
        let retry = raw(json!({"name": "t", "requestState": token}));
        let bound = Bound {
            params: Some(&retry),
            ..bound
        };
        relay.open(&sealer, &bound, &id).map(|_| ())
    };
    for _ in 0..used::PER_PRINCIPAL {
        assert!(redeem(&alice).is_ok());
    }
    match redeem(&alice) {
        Err(Err(CoreError::RelayShareExhausted { limit, retry_after })) => {
            assert_eq!(limit, used::PER_PRINCIPAL);
            assert!((1..=60).contains(&retry_after), "{retry_after}");
        }
        other => panic!("alice over her share: {:?}", other.map_err(|e| e.err())),
    }
    // Bob's share is untouched by alice's.
    assert!(redeem(&bob).is_ok());
    assert_eq!(relay.used.lock().total(), used::PER_PRINCIPAL + 1);
}

#[test]
fn an_oversized_backend_state_is_refused() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let alice = principal("alice");
    let a = "a".parse::<BackendId>().unwrap();
    let id = RequestId::from_string("x");
    let bound = Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params: None,
    };
    let answer = relay.seal(&sealer, &bound, &id, pending(&"s".repeat(STATE_MAX_BYTES)));
    assert!(answer.error_code.is_some());
    let answer = relay.seal(
        &sealer,
        &bound,
        &id,
        pending(&"s".repeat(STATE_MAX_BYTES - 100)),
    );
    assert!(answer.error_code.is_none() && token_of(&answer).starts_with(PREFIX));
}

/// A full table answers a caller among its largest holders with the share's 429 variant
/// (never the 200 `-32603` of old), and still serves a newcomer.
#[test]
fn a_full_table_answers_overload_as_429_and_serves_a_newcomer() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    *relay.used.lock() = used::Used::new(2, 2);
    let a = "a".parse::<BackendId>().unwrap();
    let id = RequestId::from_string("x");
    let first = raw(json!({"name": "t"}));
    let redeem = |caller: &Principal| {
        let bound = Bound {
            caller,
            method: "tools/call",
            backend: &a,
            params: Some(&first),
        };
        let token = token_of(&relay.seal(&sealer, &bound, &id, pending("s")));
        let retry = raw(json!({"name": "t", "requestState": token}));
        let bound = Bound {
            params: Some(&retry),
            ..bound
        };
        relay.open(&sealer, &bound, &id).map(|_| ())
    };
    let (alice, bob, carol) = (principal("alice"), principal("bob"), principal("carol"));
    assert!(redeem(&alice).is_ok());
    assert!(redeem(&bob).is_ok());
    match redeem(&alice) {
        Err(Err(CoreError::RelayShareExhausted { limit, retry_after })) => {
            assert_eq!(limit, 1);
            assert!((1..=60).contains(&retry_after), "{retry_after}");
        }
        other => panic!("a full table: {:?}", other.map_err(|e| e.err())),
    }
    assert!(
        redeem(&carol).is_err(),
        "alice and bob hold one each: nobody is larger"
    );
    *relay.used.lock() = used::Used::new(3, 2);
    assert!(redeem(&alice).is_ok() && redeem(&alice).is_ok() && redeem(&bob).is_ok());
    assert!(redeem(&carol).is_ok(), "alice holds more than carol would");
}

/// An answer the relay cannot rewrite is never passed on as it came (it might carry the
/// backend's state bare): an internal error instead.
#[test]
fn an_answer_that_cannot_be_rewritten_fails_closed() {
    let (sealer, relay) = (Sealer::new(), SealedRelay::new(Duration::from_secs(60)));
    let (alice, a) = (principal("alice"), "a".parse::<BackendId>().unwrap());
    let id = RequestId::from_string("x");
    let bound = Bound {
        caller: &alice,
        method: "tools/call",
        backend: &a,
        params: None,
    };
    // Not an object: nothing can be stripped or sealed in it.
    let odd =
        || Answer::ok(br#"{"jsonrpc":"2.0","id":"x","result":["requestState","bare"]}"#.to_vec());
    let stripped = SealedRelay::strip(&id, odd());
    assert_eq!(
        stripped.error_code,
        Some(i64::from(codes::INTERNAL_ERROR)),
        "{}",
        String::from_utf8_lossy(&stripped.body)
    );
    // Not JSON the relay can read at all.
    let garbled = Answer::ok(b"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":".to_vec());
    let sealed = relay.seal(&sealer, &bound, &id, garbled);
    assert_eq!(sealed.error_code, Some(i64::from(codes::INTERNAL_ERROR)));
}
