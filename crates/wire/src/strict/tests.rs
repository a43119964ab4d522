use proptest::prelude::*;

use super::*;
use crate::{codes, Message, ParseError, MAX_CLIENT_DEPTH};

fn client(s: &str) -> Result<Message<'_>, ParseError> {
    Message::parse_client(s.as_bytes())
}

fn refused(s: &str) -> ParseError {
    client(s).expect_err(s)
}

fn call(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
}

fn id_of(e: &ParseError) -> Option<&str> {
    e.id.as_ref().map(crate::RequestId::as_json)
}

#[test]
fn duplicate_keys_are_refused_at_any_depth_with_the_id() {
    for params in [
        r#"{"name":"a","name":"b"}"#,
        r#"{"name":"echo","arguments":{"text":"x","text":"y"}}"#,
        r#"{"_meta":{"progressToken":1,"progressToken":2}}"#,
        r#"{"a":[{"k":1},{"k":2,"k":3}]}"#,
        r#"{"deep":{"er":{"est":{"x":1,"x":1}}}}"#,
        // The same key spelled two ways is the same key to every backend.
        r#"{"name":"a","n\u0061me":"b"}"#,
        r#"{"\ud83d\ude00":1,"😀":2}"#,
        // Equal but for case: one member to a case-insensitive parser (Go's encoding/json),
        // which would run the second while the gateway authorized the first.
        r#"{"name":"a","Name":"b"}"#,
        r#"{"uri":"file:///a","URI":"file:///b"}"#,
        r#"{"arguments":{},"argument\u017f":{}}"#,
        r#"{"k":1,"\u212a":2}"#,
        r#"{"café":1,"CAFÉ":2}"#,
        r#"{"uri":"file:///a","ur\u0130":"file:///b"}"#,
        r#"{"uri":"file:///a","ur\u0131":"file:///b"}"#,
        // U+0130 is i + U+0307 to JavaScript's toLowerCase and Python's lower().
        r#"{"name":"x","arguments":{"\u0130d":1,"i\u0307d":2}}"#,
        r#"{"name":"x","arguments":{"\u03c3":1,"\u03c2":2}}"#,
        r#"{"name":"x","arguments":{"\u00b5":1,"\u03bc":2}}"#,
        r#"{"name":"x","arguments":{"stra\u00dfe":1,"stra\u1e9ee":2}}"#,
        // Non-ASCII keys beyond the pairwise bound go through the sorted check too.
        r#"{"name":"x","arguments":{"a0":0,"a1":0,"a2":0,"a3":0,"a4":0,"a5":0,"a6":0,"a7":0,
            "a8":0,"a9":0,"b0":0,"b1":0,"b2":0,"b3":0,"b4":0,"b5":0,"\u00e9":1,"\u00c9":2}}"#,
    ] {
        let e = refused(&call(params));
        assert_eq!(e.error.code, codes::INVALID_PARAMS, "{params}");
        assert_eq!(id_of(&e), Some("7"), "{params}");
    }
    // In the envelope (an unknown member), in a client's response: invalid request.
    for body in [
        r#"{"jsonrpc":"2.0","id":7,"method":"m","x":1,"x":2}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"a":1,"a":1}}"#,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m","code":2}}"#,
    ] {
        let e = refused(body);
        assert_eq!(e.error.code, codes::INVALID_REQUEST, "{body}");
        assert_eq!(id_of(&e), Some("7"), "{body}");
    }
}

/// A parser reading keys as C strings (cJSON) takes `"name\u0000"` for `name`, and its first
/// copy wins: the gateway would authorize `allowed` and the backend run `forbidden`.
#[test]
fn a_key_holding_nul_is_refused() {
    let e = refused(&call(
        r#"{"name\u0000":"forbidden","name":"allowed","arguments":{}}"#,
    ));
    assert_eq!(e.error.code, codes::INVALID_PARAMS);
    assert_eq!(id_of(&e), Some("7"));
    let e = refused(&call(r#"{"name":"a","arguments":{"k\u0000ey":1}}"#));
    assert_eq!(e.error.code, codes::INVALID_PARAMS);
    let e = refused(r#"{"jsonrpc":"2.0","id":7,"method":"m","x\u0000":1}"#);
    assert_eq!(e.error.code, codes::INVALID_REQUEST);
    // A NUL in a value is the value's business; an escaped backslash before `u0000` is no NUL.
    let fine = call(r#"{"name":"a","arguments":{"text":"a\u0000b","k\\u0000":1}}"#);
    assert!(client(&fine).is_ok(), "{fine}");
}

#[test]
fn keys_fold_equal_up_to_nul_in_any_case() {
    for (a, b, equal) in [
        ("taskId", "TASKID", true),
        ("taskId\0x", "taskid", true),
        ("ab\0x", "AB\0y", true),
        ("ab", "abc", false),
        ("ab\0", "abc", false),
        ("", "\0", true),
        ("a", "b", false),
        ("ta\u{17f}kId\0", "TASKID", true),
    ] {
        assert_eq!(keys_fold_equal(a, b), equal, "{a:?} {b:?}");
        assert_eq!(keys_fold_equal(b, a), equal, "{b:?} {a:?}");
    }
}

#[test]
fn distinct_keys_pass_even_when_alike() {
    for params in [
        r#"{"name":"a","name ":"c","nam":"d"}"#,
        r#"{"a":{"k":1},"b":{"k":1},"k":[{"k":1},{"k":1}]}"#,
        r#"{"s":"\"k\":1,\"k\":1","k":"{\"k\":1}"}"#,
        r#"{"a\\":1,"a":2,"a\"":3}"#,
        // A combining dot above is a letter of its own but on an `i`.
        r#"{"a\u0307":1,"a":2}"#,
    ] {
        assert!(client(&call(params)).is_ok(), "{params}");
    }
    // Large objects go through the sorted check: both outcomes.
    let many: Vec<String> = (0..200).map(|i| format!(r#""k{i}":{i}"#)).collect();
    assert!(client(&call(&format!("{{{}}}", many.join(",")))).is_ok());
    let dup = format!(r#"{{{},"k\u0031\u0039\u0039":0}}"#, many.join(","));
    assert_eq!(refused(&call(&dup)).error.code, codes::INVALID_PARAMS);
    let cased = format!(r#"{{{},"K199":0}}"#, many.join(","));
    assert_eq!(refused(&call(&cased)).error.code, codes::INVALID_PARAMS);
}

#[test]
fn unpaired_surrogates_are_parse_errors() {
    for params in [
        r#"{"s":"\ud800"}"#,
        r#"{"s":"\udc00"}"#,
        r#"{"s":"\ud800x"}"#,
        r#"{"s":"\ud800\u0041"}"#,
        r#"{"s":"\ud800\ud800"}"#,
        r#"{"s":"\ude00\ud83d"}"#,
        r#"{"\udfff":1}"#,
        r#"{"a":[[["\uD800"]]]}"#,
    ] {
        let e = refused(&call(params));
        assert_eq!(e.error.code, codes::PARSE_ERROR, "{params}");
        assert_eq!(id_of(&e), Some("7"), "{params}");
    }
    // A pair, escaped or literal, is fine; so is an escaped backslash before `ud800`.
    for params in [
        r#"{"s":"\ud83d\ude00 😀"}"#,
        r#"{"s":"\\ud800"}"#,
        r#"{"s":"\uFFFF\u0000"}"#,
    ] {
        assert!(client(&call(params)).is_ok(), "{params}");
    }
    // In the id itself: nothing readable to echo.
    let e = refused(r#"{"jsonrpc":"2.0","id":"\ud800","method":"ping"}"#);
    assert_eq!(e.error.code, codes::PARSE_ERROR);
    assert!(e.id.is_none());
    // In an envelope key: serde decodes those keys itself and refuses it.
    let e = refused(r#"{"jsonrpc":"2.0","id":3,"\ud800":1,"method":"ping"}"#);
    assert_eq!(e.error.code, codes::PARSE_ERROR);
}

#[test]
fn overflowing_numbers_are_parse_errors_and_big_integers_are_not() {
    let long_float = format!("{}.5", "9".repeat(400));
    for n in [
        "1e999999",
        "-1e400",
        "1.5e309",
        "1E+400",
        long_float.as_str(),
    ] {
        let e = refused(&call(&format!(r#"{{"n":{n}}}"#)));
        assert_eq!(e.error.code, codes::PARSE_ERROR, "{n}");
        assert_eq!(id_of(&e), Some("7"), "{n}");
    }
    let huge = "1".repeat(500);
    for n in [
        "18446744073709551616",
        "-123456789012345678901234567890",
        huge.as_str(),
        "1e308",
        "1e-400",
        "0.000001e-999999",
        "-0.0",
    ] {
        assert!(
            client(&call(&format!(r#"{{"n":{n}}}"#))).is_ok(),
            "{n} must pass"
        );
    }
    let id = "1".repeat(400);
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    assert_eq!(client(&body).unwrap().id.unwrap().as_json(), id);
}

#[test]
fn depth_is_the_first_check() {
    let body = call(&format!(
        r#"{{"a":{}"\ud800"{}}}"#,
        "[".repeat(MAX_CLIENT_DEPTH),
        "]".repeat(MAX_CLIENT_DEPTH)
    ));
    assert_eq!(refused(&body).error.code, codes::INVALID_REQUEST);
    assert_eq!(scan("{}", 1), Ok(()));
    assert_eq!(scan("[{}]", 1), Err(Violation::TooDeep));
}

#[test]
fn the_plain_parser_stays_lenient_for_backend_messages() {
    let body = call(r#"{"n":1e999,"s":"\ud800","k":1,"k":2}"#);
    assert!(Message::parse(body.as_bytes()).is_ok());
}

/// A JSON object with distinct keys (from `keys`) whose values are scalars or nested objects.
fn object(depth: u32) -> impl Strategy<Value = Vec<(String, String)>> {
    let leaf = prop_oneof![
        Just("1".to_owned()),
        Just("-2.5e3".to_owned()),
        Just("18446744073709551617".to_owned()),
        Just(r#""t\u00e9\ud83d\ude00""#.to_owned()),
        Just("null".to_owned()),
        Just("[1,{}]".to_owned()),
    ];
    let value = leaf.prop_recursive(depth, 32, 6, |inner| {
        prop::collection::btree_map("[a-d]{1,2}", inner, 0..6).prop_map(|m| {
            let members: Vec<String> = m.iter().map(|(k, v)| format!(r#""{k}":{v}"#)).collect();
            format!("{{{}}}", members.join(","))
        })
    });
    prop::collection::btree_map("[a-d]{1,2}", value, 1..8).prop_map(|m| m.into_iter().collect())
}

fn render(members: &[(String, String)]) -> String {
    let members: Vec<String> = members
        .iter()
        .map(|(k, v)| format!(r#""{k}":{v}"#))
        .collect();
    format!("{{{}}}", members.join(","))
}

proptest! {
    #[test]
    fn random_objects_pass_and_any_repeated_key_is_refused(
        members in object(3),
        pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let ok = call(&render(&members));
        prop_assert!(client(&ok).is_ok(), "{}", ok);
        // Repeat one key (with a different value) at a random position.
        let (key, _) = members[pick.index(members.len())].clone();
        let mut dup = members.clone();
        dup.insert(at.index(dup.len() + 1), (key, "0".to_owned()));
        let bad = call(&render(&dup));
        let e = client(&bad).expect_err(&bad);
        prop_assert_eq!(e.error.code, codes::INVALID_PARAMS);
        prop_assert_eq!(id_of(&e), Some("7"));
    }
}

/// A protocol member the gateway reads (of the message, its `params`, `params.ref`) has one
/// spelling: another case or form is refused, where it sits; a tool's own argument names and
/// unknown members keep any spelling, and an escaped exact spelling is the member itself.
#[test]
fn protocol_members_spelled_another_way_are_refused() {
    for params in [
        r#"{"Name":"delete"}"#,
        r#"{"NAME":"delete","arguments":{}}"#,
        r#"{"name":"echo","Arguments":{"secret":1}}"#,
        r#"{"name":"echo","argument\u017f":{}}"#,
        r#"{"URI":"file:///etc/passwd"}"#,
        r#"{"name":"echo","Task":{"ttl":1}}"#,
        r#"{"TaskId":"t-1"}"#,
        r#"{"requestState":"s","InputResponses":{}}"#,
        r#"{"ref":{"Type":"ref/prompt","name":"p"},"argument":{}}"#,
        r#"{"ref":{"type":"ref/prompt","NAME":"p"}}"#,
        r#"{"_META":{}}"#,
        // A C-string backend reads these as `exit`, `file:///etc`, `p`.
        r#"{"name":"exit\u0000x","arguments":{}}"#,
        r#"{"uri":"file:///etc\u0000.txt"}"#,
        r#"{"ref":{"type":"ref/prompt","name":"p\u0000"}}"#,
    ] {
        let e = refused(&call(params));
        assert_eq!(e.error.code, codes::INVALID_PARAMS, "{params}");
        assert_eq!(id_of(&e), Some("7"), "{params}");
    }
    // `params` escaped is `params` to serde, and so to the scan.
    for params in [r#"{"Name":"delete"}"#, r#"{"name":"echo","Arguments":{}}"#] {
        for spelled in ["par\\u0061ms", "\\u0070arams"] {
            let msg =
                format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","{spelled}":{params}}}"#);
            let e = refused(&msg);
            assert_eq!(e.error.code, codes::INVALID_PARAMS, "{msg}");
            assert_eq!(id_of(&e), Some("7"), "{msg}");
        }
    }
    for envelope in [
        r#"{"jsonrpc":"2.0","id":7,"Method":"tools/call","params":{"name":"a"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","Params":{"Name":"a"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","param\u017f":{}}"#,
    ] {
        let e = refused(envelope);
        assert_eq!(e.error.code, codes::INVALID_REQUEST, "{envelope}");
    }
    for params in [
        r#"{"name":"echo","arguments":{"Name":"x","URI":"y","Arguments":{}}}"#,
        r#"{"n\u0061me":"echo","arguments":{}}"#,
        r#"{"name":"echo","Extra":1,"_meta":{"ProgressToken":1}}"#,
        r#"{"ref":{"type":"ref/resource","uri":"file:///a","Extra":{"Type":1}}}"#,
        r#"{"name":"echo","list":[{"Name":1}]}"#,
        // A tool's own arguments may hold U+0000, and so may the members no policy judges
        // (an id to cancel that held one, a backend's cursor), and an array's strings.
        r#"{"name":"echo","arguments":{"text":"a\u0000b"}}"#,
        r#"{"requestId":"a\u0000b"}"#,
        r#"{"cursor":"c\u0000"}"#,
        r#"{"uri":["file:///a\u0000"],"ref":{"type":"ref/resource","x":["\u0000"]}}"#,
    ] {
        assert!(client(&call(params)).is_ok(), "{params}");
    }
    // A backend's JSON is no client message: its members keep any spelling.
    let backend = r#"{"Method":"m","ID":1,"params":{"Name":"x","Task":{}}}"#;
    let backend: Box<serde_json::value::RawValue> = serde_json::from_str(backend).unwrap();
    assert!(crate::reads_one_way(&backend));
}

/// serde_json's `Value` (with `raw_value`, as the gateway builds it) reads an object starting
/// with `$serde_json::private::RawValue` as the JSON text in its string: the gateway would
/// judge `{"path":"/tmp"}` where a backend reads an object with one odd key. Refused in every
/// spelling serde reads as that key, anywhere, and in a backend's JSON too.
#[test]
fn serde_jsons_raw_value_key_is_refused_in_any_spelling() {
    for (params, code) in [
        (
            r#"{"name":"a","arguments":{"$serde_json::private::RawValue":"{\"path\":\"/tmp\"}"}}"#,
            codes::INVALID_PARAMS,
        ),
        (
            r#"{"name":"a","arguments":{"k":[{"\u0024serde_json::private::RawValue":"1"}]}}"#,
            codes::INVALID_PARAMS,
        ),
        (
            r#"{"$serde_json::private::RawValu\u0065":"{}","name":"a"}"#,
            codes::INVALID_PARAMS,
        ),
    ] {
        let e = refused(&call(params));
        assert_eq!(e.error.code, code, "{params}");
        assert_eq!(id_of(&e), Some("7"));
        assert!(e.error.message.contains("reserved"), "{}", e.error.message);
    }
    let e =
        refused(r#"{"jsonrpc":"2.0","id":7,"method":"m","$serde_json::private::RawValue":"1"}"#);
    assert_eq!(e.error.code, codes::INVALID_REQUEST);
    // What the gateway would have read: the string parsed again.
    let own: serde_json::Value =
        serde_json::from_str(r#"{"$serde_json::private::RawValue":"{\"path\":\"/tmp\"}"}"#)
            .unwrap();
    assert_eq!(own, serde_json::json!({"path": "/tmp"}));
    // Keys that only look like it, and the key as a value, pass.
    for params in [
        r#"{"name":"a","arguments":{"$serde_json::private::RawValue2":"1","$Serde_json::private::RawValue":"1"}}"#,
        r#"{"name":"a","arguments":{"k":"$serde_json::private::RawValue"}}"#,
    ] {
        assert!(client(&call(params)).is_ok(), "{params}");
    }
    let backend = serde_json::value::RawValue::from_string(
        r#"{"a":{"$serde_json::private::RawValue":"[]"}}"#.into(),
    )
    .unwrap();
    assert!(!crate::reads_one_way(&backend));
}

/// A backend's message holding the key is not read either: serde's `Value` would expand the
/// string, and strings inside strings nest a fresh 128 levels each (a 90 KB `tools/list`
/// overflowed a 2 MiB stack: review HIGH). The id is kept, so the call it answers gets an
/// error at once; the key as a value, and a backend's repeated keys, are not this check's.
#[test]
fn a_backend_message_holding_the_key_is_refused_with_its_id() {
    for result in [
        r#"{"tools":[{"inputSchema":{"$serde_json::private::RawValue":"{}"}}]}"#,
        r#"{"a":[1,{"b":{"x":1,"\u0024serde_json::private::RawValu\u0065":"1"}}]}"#,
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":"sb-1","result":{result}}}"#);
        let e = Message::parse(line.as_bytes()).expect_err(&line);
        assert_eq!(e.error.code, codes::INTERNAL_ERROR);
        assert_eq!(id_of(&e), Some("\"sb-1\""));
    }
    for fine in [
        r#"{"jsonrpc":"2.0","id":"sb-1","result":{"text":"{\"$serde_json::private::RawValue\":\"1\"}"}}"#,
        r#"{"jsonrpc":"2.0","id":"sb-1","result":{"k":1,"k":2,"s":"\u00e9 RawValue"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":["$serde_json::private::RawValue"]}}"#,
    ] {
        assert!(Message::parse(fine.as_bytes()).is_ok(), "{fine}");
    }
}

/// Text that is not JSON gets an answer that means nothing, but no panic.
#[test]
fn holds_reserved_key_does_not_panic_on_text_that_is_not_json() {
    for text in [
        r#"{"a\"#,
        r#"{"\u0024"#,
        "{\"RawValue",
        "{\"\\u",
        "[\"é\\",
        "{\"é\\u00",
    ] {
        let _ = holds_reserved_key(text);
    }
}

/// The key-only pass skips long strings by searching for their end: an escaped quote or
/// backslash inside one does not end it, and a key after it is still found.
#[test]
fn long_strings_are_skipped_to_their_real_end() {
    let long = "x".repeat(100);
    let key = r#""$serde_json::private::RawValue":"1""#;
    let cases = [
        (format!(r#"{{"a":"{long}\"{long}\\","b":{{{key}}}}}"#), true),
        (
            format!(r#"{{"a":"{long}\"$serde_json::private::RawValue\":1{long}"}}"#),
            false,
        ),
        (format!(r#"{{"a":["{long}\\\\",{{{key}}}]}}"#), true),
        (format!(r#"{{"{long}\u00e9":"{long}","b":1}}"#), false),
    ];
    for (text, holds) in cases {
        assert!(
            serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok(),
            "{text}"
        );
        assert_eq!(holds_reserved_key(&text), holds, "{text}");
    }
}

/// `keys_read_one_way` refuses a key repeated in any spelling, at any depth, and takes what
/// `reads_one_way` also judges (numbers a double cannot hold, nesting past the client's
/// bound), which a filter judging items by their members need not refuse.
#[test]
fn keys_read_one_way_judges_keys_only() {
    let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    for fine in [
        r#"{"a":1e400}"#,
        r#"{"a":[{"b":1},{"b":2}]}"#,
        deep.as_str(),
    ] {
        assert!(crate::keys_read_one_way(&raw(fine)), "{fine}");
    }
    for two_ways in [
        r#"{"tools":[],"Tools":[]}"#,
        r#"{"tools":[{"name":"a","name":"b"}]}"#,
        r#"{"tools":[{"name":"a","n\u0061me":"b"}]}"#,
        r#"{"x":{"$serde_json::private::RawValue":"1"}}"#,
    ] {
        assert!(!crate::keys_read_one_way(&raw(two_ways)), "{two_ways}");
    }
}
