//! Bad input gets a spec-shaped error, echoes the id only when readable, and changes nothing.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};

/// (body, expected HTTP status, expected JSON-RPC code, expected id JSON or None for "absent").
const CASES: &[(&str, u16, i64, Option<&str>)] = &[
    ("{not json", 400, -32700, None),
    ("", 400, -32700, None),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list""#,
        400,
        -32700,
        None,
    ),
    (
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        400,
        -32600,
        None,
    ),
    ("  \n\t[]", 400, -32600, None),
    (
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":2.0,"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#,
        400,
        -32600,
        Some("7"),
    ),
    (
        r#"{"jsonrpc":"2.0","id":"x","method":42}"#,
        400,
        -32600,
        Some(r#""x""#),
    ),
    // A client answering a server request that shared mode never sends: someone else's work.
    (
        r#"{"jsonrpc":"2.0","id":"sb-00000000000000000000000000000000","result":{}}"#,
        400,
        -32600,
        None,
    ),
    (
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}"#,
        400,
        -32600,
        None,
    ),
];

fn assert_error_shape(text: &str, code: i64, id: Option<&str>) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["jsonrpc"], "2.0");
    assert_eq!(v["error"]["code"], code, "{text}");
    assert!(v["error"]["message"].is_string());
    match id {
        None => assert!(
            v.get("id").is_none(),
            "id must be omitted, never null: {text}"
        ),
        Some(id) => {
            // Compare raw text so number formatting cannot hide a changed id.
            assert!(
                text.contains(&format!(r#""id":{id}"#)),
                "{text} should echo id {id}"
            );
        }
    }
}

#[tokio::test]
async fn every_malformed_case_gets_its_error_and_changes_nothing() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    for (body, status, code, id) in CASES {
        let reply = gw.post_raw(Some(&sid), body.to_string(), &[]).await;
        assert_eq!(reply.status.as_u16(), *status, "{body}: {}", reply.text);
        assert_eq!(reply.content_type(), "application/json");
        assert_error_shape(&reply.text, *code, *id);
    }
    // The session and the backend are untouched: a real call still works.
    let reply = gw
        .call_tool(Some(&sid), json!(1), "echo", json!({"text":"still here"}))
        .await;
    assert_eq!(tool_text(&reply.json()), "still here");
}

#[tokio::test]
async fn header_and_size_violations() {
    let gw = TestGateway::start(&["--max-body-bytes", "1024"]).await;
    let sid = gw.session().await;
    let ping = r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#;

    for accept in ["application/json", "text/event-stream", "text/html"] {
        let r = gw
            .http
            .post(&gw.url)
            .header("accept", accept)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .body(ping)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE, "{accept}");
        assert_error_shape(&r.text().await.unwrap(), -32600, None);
    }
    let r = gw
        .http
        .post(&gw.url)
        .header("accept", crate::common::BOTH)
        .header("content-type", "text/plain")
        .body(ping)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(2000)
    );
    let r = gw.post_raw(Some(&sid), big.clone(), &[]).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error_shape(&r.text, -32600, None);
    // Chunked (no Content-Length) is bounded too.
    let stream = futures::stream::iter(
        big.into_bytes()
            .chunks(100)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let r = gw
        .post_raw(Some(&sid), reqwest::Body::wrap_stream(stream), &[])
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);

    let r = gw
        .post_raw(Some(&sid), ping, &[("mcp-protocol-version", "1999-01-01")])
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_error_shape(&r.text, -32600, None);
    let r = gw
        .post_raw(Some(&sid), ping, &[("mcp-protocol-version", "2025-06-18")])
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test]
async fn unusual_ids_round_trip_exactly() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    for id in [
        "9007199254740993",
        "-9007199254740993",
        "123456789012345678901234567890",
        "-1",
        "0",
        r#""sb-00000000000000000000000000000001""#,
        r#""with \"quotes\" and \u00e9""#,
        r#""""#,
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"t"}}}}}}"#
        );
        let reply = gw.post_raw(Some(&sid), body, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{id}: {}", reply.text);
        assert!(
            reply
                .text
                .starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"#)),
            "{id} came back as {}",
            reply.text
        );
    }
}

#[tokio::test]
async fn unknown_session_is_404_with_the_request_id() {
    let gw = TestGateway::start(&[]).await;
    let r = gw
        .post_raw(
            Some("not-a-session"),
            r#"{"jsonrpc":"2.0","id":"q","method":"tools/list"}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_error_shape(&r.text, -32001, Some(r#""q""#));
    let r = gw
        .post_raw(
            Some("not-a-session"),
            r#"{"jsonrpc":"2.0","method":"notifications/x"}"#,
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_error_shape(&r.text, -32001, None);
}

#[tokio::test]
async fn dns_rebinding_is_refused_on_loopback() {
    let gw = TestGateway::start(&[]).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    for (host, origin) in [
        (Some("evil.example.com"), None),
        (None, Some("http://evil.example.com")),
        (Some("evil.example.com"), Some("http://evil.example.com")),
    ] {
        let mut req = gw
            .http
            .post(&gw.url)
            .header("accept", crate::common::BOTH)
            .header("content-type", "application/json");
        if let Some(h) = host {
            req = req.header("host", h);
        }
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let r = req.body(init).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{host:?} {origin:?}");
        assert!(
            r.headers().get("mcp-session-id").is_none(),
            "a refused request opens no session"
        );
        assert_error_shape(&r.text().await.unwrap(), -32600, None);
    }
    let r = gw
        .post_raw(None, init, &[("origin", "http://localhost:5173")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
}
