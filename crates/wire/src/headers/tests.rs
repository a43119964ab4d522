use super::*;
use crate::codes;

fn msg(body: &str) -> Message<'_> {
    Message::parse(body.as_bytes()).unwrap()
}

#[test]
fn param_values_pass_their_own_check() {
    let schema = serde_json::json!({"type":"object","properties":{
        "region":{"type":"string","x-mcp-header":"Region"},
        "n":{"type":"integer","x-mcp-header":"N"},
        "flag":{"type":"boolean","x-mcp-header":"Flag"}}});
    let spec = param_headers(&schema);
    let args = serde_json::json!({"region":"zürich","n":42,"flag":true});
    let values = param_values(Some(&args), &spec).unwrap();
    assert_eq!(values.len(), 3);
    let get = |h: &str| {
        values
            .iter()
            .find(|(n, _)| n == h)
            .map(|(_, v)| Some(v.as_str()))
    };
    assert!(check_params(Some(&args), &spec, get).is_ok());
    let none = param_values(Some(&serde_json::json!({})), &spec).unwrap();
    assert!(none.is_empty());
}

/// A designated argument spelled another way (`Region`, `REGION`, `regıon` with a dotless i,
/// a nested member's `Flag`) is what a parser matching keys loosely (Go's `encoding/json`)
/// reads as the argument: refused by the check and by the headers built for an upstream,
/// alone or beside the exact spelling. Before, `{"Region":"eu"}` needed no header and passed.
#[test]
fn a_designated_argument_spelled_another_way_is_refused() {
    let schema = serde_json::json!({"type":"object","properties":{
        "region":{"type":"string","x-mcp-header":"Region"},
        "deep":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}}}});
    let spec = param_headers(&schema);
    let none = |_: &str| None;
    for args in [
        serde_json::json!({"Region":"eu"}),
        serde_json::json!({"REGION":"eu"}),
        serde_json::json!({"reg\u{131}on":"eu"}),
        serde_json::json!({"region":"us","Region":"eu"}),
        serde_json::json!({"deep":{"Flag":true}}),
        serde_json::json!({"Deep":{"flag":true}}),
    ] {
        let refused = check_params(Some(&args), &spec, none).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_PARAMS, "{args}");
        assert!(refused.message.contains("spelled another way"), "{args}");
        assert_eq!(
            param_values(Some(&args), &spec).unwrap_err().code,
            codes::INVALID_PARAMS,
            "{args}"
        );
    }
    // Other members keep any spelling, and a value in the exact spelling is checked as before.
    let args = serde_json::json!({"region":"us","Note":"x","deep":{"Other":1}});
    let us = |h: &str| (h == "mcp-param-region").then_some(Some("us"));
    assert!(check_params(Some(&args), &spec, us).is_ok());
    assert_eq!(param_values(Some(&args), &spec).unwrap().len(), 1);
}

#[test]
fn encoded_values_decode_to_themselves() {
    for v in [
        "tools/call",
        "get weather",
        "café",
        " padded",
        "tab\there",
        "=?base64?x?=",
    ] {
        let encoded = encode_value(v);
        assert!(
            encoded.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
            "{encoded}"
        );
        assert_eq!(
            decode_value(&encoded).as_deref(),
            Some(v),
            "{v} -> {encoded}"
        );
    }
    assert_eq!(encode_value("execute_sql"), "execute_sql");
}

#[test]
fn param_headers_mirror_arguments() {
    let schema = serde_json::json!({"type":"object","properties":{
        "region":{"type":"string","x-mcp-header":"Region"},
        "n":{"type":"integer","x-mcp-header":"N"},
        "deep":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}},
        "list":{"type":"array","items":{"x-mcp-header":"Ignored"}}}});
    let spec = param_headers(&schema);
    assert_eq!(spec.len(), 3);
    let args = serde_json::json!({"region":"us-west1","n":42,"deep":{"flag":true}});
    let ok = |h: &str| match h {
        "mcp-param-region" => Some(Some("us-west1")),
        "mcp-param-n" => Some(Some("42")),
        "mcp-param-flag" => Some(Some("true")),
        _ => None,
    };
    assert!(check_params(Some(&args), &spec, ok).is_ok());
    let wrong = |h: &str| {
        if h == "mcp-param-region" {
            Some(Some("eu"))
        } else {
            ok(h)
        }
    };
    assert_eq!(
        check_params(Some(&args), &spec, wrong).unwrap_err().code,
        codes::HEADER_MISMATCH
    );
    let missing = |h: &str| if h == "mcp-param-n" { None } else { ok(h) };
    assert!(check_params(Some(&args), &spec, missing).is_err());
    let binary = |h: &str| {
        if h == "mcp-param-region" {
            Some(None)
        } else {
            ok(h)
        }
    };
    assert!(check_params(Some(&args), &spec, binary).is_err());
    let only_region = serde_json::json!({"region":"=?"});
    let encoded = |h: &str| {
        if h == "mcp-param-region" {
            Some(Some("=?base64?PT8=?="))
        } else {
            None
        }
    };
    assert!(check_params(Some(&only_region), &spec, encoded).is_ok());
    assert!(check_params(Some(&serde_json::json!({})), &spec, |_| None).is_ok());
    assert!(
        check_params(Some(&serde_json::json!({})), &spec, ok).is_err(),
        "a header with no value is a mismatch"
    );
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
    let read =
        msg(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"test://x"}}"#);
    assert!(check_modern(&read, Some(Some("resources/read")), Some(Some("test://x"))).is_ok());
}

#[test]
fn invalid_designations_are_named_and_valid_ones_pass() {
    let tool = |prop: serde_json::Value| serde_json::json!({"type":"object","properties": prop});
    let valid = tool(serde_json::json!({
        "region":{"type":"string","x-mcp-header":"Region"},
        "n":{"type":"integer","x-mcp-header":"X-Count.v2"},
        "flag":{"type":["boolean","null"],"x-mcp-header":"Flag"},
        "plain":{"type":"number"}}));
    assert_eq!(invalid_designation(&valid), None);
    assert_eq!(
        invalid_designation(&serde_json::json!({"type":"object"})),
        None
    );
    for (props, why) in [
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":""}}),
            "empty",
        ),
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":7}}),
            "not a string",
        ),
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":"My Region"}}),
            "token",
        ),
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":"Region:Primary"}}),
            "token",
        ),
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":"Région"}}),
            "token",
        ),
        (
            serde_json::json!({"v":{"type":"string","x-mcp-header":"Region\t1"}}),
            "token",
        ),
        (
            serde_json::json!({"v":{"type":"object","x-mcp-header":"Data"}}),
            "not a string, integer",
        ),
        (
            serde_json::json!({"v":{"type":"array","x-mcp-header":"Items"}}),
            "not a string, integer",
        ),
        (
            serde_json::json!({"v":{"type":"null","x-mcp-header":"Nil"}}),
            "not a string, integer",
        ),
        (
            serde_json::json!({"v":{"type":"number","x-mcp-header":"Score"}}),
            "not a string, integer",
        ),
        (
            serde_json::json!({"v":{"x-mcp-header":"Untyped"}}),
            "not a string, integer",
        ),
        (
            serde_json::json!({"a":{"type":"string","x-mcp-header":"MyField"},
                               "b":{"type":"string","x-mcp-header":"myfield"}}),
            "repeats",
        ),
    ] {
        let got = invalid_designation(&tool(props.clone()));
        assert!(
            got.as_deref().is_some_and(|g| g.contains(why)),
            "{props}: {got:?}"
        );
    }
}
