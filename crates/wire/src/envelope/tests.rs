use super::*;

fn parse(s: &str) -> Result<Message<'_>, ParseError> {
    Message::parse(s.as_bytes())
}

fn err(s: &str) -> ParseError {
    parse(s).expect_err(s)
}

#[test]
fn request_notification_response() {
    let m = parse(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#).unwrap();
    assert_eq!(m.kind, MessageKind::Request);
    assert_eq!(m.method, Some("tools/list"));
    assert_eq!(m.id.unwrap().as_json(), "1");

    let m = parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
    assert_eq!(m.kind, MessageKind::Notification);
    assert!(m.id.is_none() && m.params.is_none());

    let m = parse(r#"{"jsonrpc":"2.0","id":"a","result":{"x":1}}"#).unwrap();
    assert_eq!(m.kind, MessageKind::Response);
    assert_eq!(m.result.unwrap().get(), r#"{"x":1}"#);

    let m = parse(r#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"m"}}"#).unwrap();
    assert_eq!(m.kind, MessageKind::Response);
    assert!(m.error.is_some());
}

#[test]
fn exact_id_round_trip_table() {
    for id in [
        "9007199254740993",
        "-9007199254740993",
        "18446744073709551616",
        "-5",
        "0",
        r#""1""#,
        r#""sb-00000000000000000000000000000000""#,
        r#""emoji \ud83d\ude00 and \"quotes\"""#,
        r#""""#,
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let m = parse(&body).unwrap();
        assert_eq!(m.id.unwrap().as_json(), id);
    }
}

#[test]
fn forbidden_ids_are_invalid_requests_without_id() {
    for id in ["null", "1.5", "2.0", "1e2", "true", "false", "{}", "[1]"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let e = err(&body);
        assert_eq!(e.error.code, codes::INVALID_REQUEST, "{id}");
        assert!(e.id.is_none(), "{id}: an invalid id is never echoed");
    }
}

#[test]
fn malformed_json_is_parse_error() {
    for body in [
        "",
        "   ",
        "{",
        r#"{"jsonrpc":"2.0","id":1,"method":"x""#,
        "not json",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"} trailing",
    ] {
        assert_eq!(err(body).error.code, codes::PARSE_ERROR, "{body:?}");
    }
    assert_eq!(
        Message::parse(b"{\"a\":\"\xff\"}").unwrap_err().error.code,
        codes::PARSE_ERROR
    );
}

#[test]
fn batches_and_non_objects_are_invalid_requests() {
    for body in [
        "[]",
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        " \n\t [ {} ]",
        "1",
        r#""str""#,
        "null",
    ] {
        let e = err(body);
        assert_eq!(e.error.code, codes::INVALID_REQUEST, "{body:?}");
        assert!(e.id.is_none());
    }
}

#[test]
fn invalid_shapes_echo_a_readable_id() {
    for body in [
        r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
        r#"{"id":7,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":5}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":3}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":7}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{},"error":{}}"#,
    ] {
        let e = err(body);
        assert_eq!(e.error.code, codes::INVALID_REQUEST, "{body}");
        assert_eq!(
            e.id.map(|i| i.as_json().to_owned()).as_deref(),
            Some("7"),
            "{body}"
        );
    }
    // A response without an id is invalid and has nothing to echo.
    assert!(err(r#"{"jsonrpc":"2.0","result":{}}"#).id.is_none());
}

#[test]
fn duplicate_members_are_refused() {
    let e = err(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#);
    assert_eq!(e.error.code, codes::INVALID_REQUEST);
}

#[test]
fn null_params_count_as_absent() {
    let m = parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#).unwrap();
    assert!(m.params.is_none());
}

#[test]
fn meta_lookup_is_tolerant() {
    let m = parse(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":"t","a\u0062":2}}}"#)
        .unwrap();
    assert_eq!(m.meta("progressToken").unwrap().get(), r#""t""#);
    assert_eq!(m.meta("ab").unwrap().get(), "2", "escaped keys are decoded");
    assert!(m.meta("missing").is_none());
    for params in [r#"{}"#, r#"{"_meta":5}"#, r#"{"_meta":null}"#, r#"[1,2]"#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{params}}}"#);
        assert!(
            parse(&body).unwrap().meta("progressToken").is_none(),
            "{params}"
        );
    }
    let m =
        parse(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"name":"a","name":"b"}}"#).unwrap();
    assert_eq!(
        m.param("name").unwrap().get(),
        r#""b""#,
        "last duplicate wins"
    );
}

#[test]
fn client_messages_are_depth_limited_with_the_id_echoed() {
    let nested = |n: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"a":{}1{}}}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    // The message object and params are two levels.
    let ok = nested(MAX_CLIENT_DEPTH - 2);
    assert!(Message::parse_client(ok.as_bytes()).is_ok());
    for n in [MAX_CLIENT_DEPTH - 1, 100_000] {
        let deep = nested(n);
        let e = Message::parse_client(deep.as_bytes()).expect_err("too deep");
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
        assert_eq!(e.id.unwrap().as_json(), "7");
        // The plain parser (used for backend messages) still accepts it.
        assert!(Message::parse(deep.as_bytes()).is_ok());
    }
    // Brackets inside strings (escaped quotes included) do not count.
    let s = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"s":"\"{}"}}}}"#,
        "[".repeat(1000)
    );
    assert!(Message::parse_client(s.as_bytes()).is_ok());
}

#[test]
fn client_progress_tokens_must_be_strings_or_numbers() {
    let with = |t: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":"x","method":"m","params":{{"_meta":{{"progressToken":{t}}}}}}}"#
        )
    };
    for ok in [r#""p""#, "1", "-3", "1.5", "123456789012345678901234567890"] {
        assert!(Message::parse_client(with(ok).as_bytes()).is_ok(), "{ok}");
    }
    for bad in ["null", "true", "{}", "[1]"] {
        let e = Message::parse_client(with(bad).as_bytes()).expect_err(bad);
        assert_eq!(e.error.code, codes::INVALID_PARAMS, "{bad}");
        assert_eq!(e.id.unwrap().as_json(), r#""x""#);
    }
}

#[test]
fn null_id_errors_are_recognised_and_nothing_else() {
    let line = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
    assert!(Message::parse(line).is_err());
    assert_eq!(
        null_id_error(line).unwrap().get(),
        r#"{"code":-32700,"message":"Parse error"}"#
    );
    for other in [
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32700,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"x","error":{}}"#,
        r#"{"jsonrpc":"1.0","id":null,"error":{}}"#,
        "not json",
    ] {
        assert!(null_id_error(other.as_bytes()).is_none(), "{other}");
    }
}
