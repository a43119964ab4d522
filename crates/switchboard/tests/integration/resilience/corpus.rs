//! The malformed-input corpus: every case gets its defined error and the gateway keeps serving.

use super::*;

/// Where a case is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// POST /mcp with a Legacy session.
    Legacy,
    /// POST /mcp with the Modern (2026-07-28) headers.
    Modern,
    /// POST /messages of an HTTP+SSE session.
    Messages,
}

const ALL: &[To] = &[To::Legacy, To::Modern, To::Messages];

/// The defined answer.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// An HTTP error status with a JSON-RPC error body: (status, code, id raw text or absent).
    Http(u16, i64, Option<&'static str>),
    /// A JSON-RPC error as the request's answer (200 on /mcp; 202 then the stream's next
    /// message on /messages).
    Rpc(i64, Option<&'static str>),
    /// 202 and nothing else: a notification the spec says to ignore.
    Ignored,
}

struct Case {
    name: String,
    to: &'static [To],
    body: Vec<u8>,
    want: Want,
}

fn case(name: &str, to: &'static [To], body: impl Into<Vec<u8>>, want: Want) -> Case {
    Case {
        name: name.to_owned(),
        to,
        body: body.into(),
        want,
    }
}

/// The largest body the corpus gateway accepts.
const LIMIT: usize = 256 * 1024;

fn call_with(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
}

fn req(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{params}}}"#)
}

const META: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}"#;

fn corpus() -> Vec<Case> {
    use Want::{Http, Ignored, Rpc};
    let id7 = Some("7");
    let deep_arr = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep_obj = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    let echo_args = |extra: &str| format!(r#"{{"name":"echo","arguments":{{"text":"t"{extra}}}}}"#);
    let mut c = vec![
        // Truncated and otherwise broken JSON.
        case("empty body", ALL, "", Http(400, -32700, None)),
        case("lone brace", ALL, "{", Http(400, -32700, None)),
        case(
            "truncated object",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo""#,
            Http(400, -32700, None),
        ),
        case(
            "truncated inside a string",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/ca"#,
            Http(400, -32700, None),
        ),
        case(
            "trailing garbage",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"} x"#,
            Http(400, -32700, None),
        ),
        case(
            "two messages",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
            Http(400, -32700, None),
        ),
        case(
            "raw control character in a string",
            ALL,
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\"a\u{1}b\"}}",
            Http(400, -32700, None),
        ),
        case(
            "NUL byte between members",
            ALL,
            "{\"jsonrpc\":\"2.0\",\0\"id\":7,\"method\":\"ping\"}",
            Http(400, -32700, None),
        ),
        case(
            "byte order mark",
            ALL,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}",
            Http(400, -32700, None),
        ),
        case("not JSON at all", ALL, "hello", Http(400, -32700, None)),
        case("a JSON string", ALL, r#""ping""#, Http(400, -32600, None)),
        case("a JSON number", ALL, "7", Http(400, -32600, None)),
        // Deep nesting.
        case(
            "100k open brackets",
            ALL,
            "[".repeat(100_000),
            Http(400, -32600, None),
        ),
        case(
            "100k nested arrays",
            ALL,
            deep_arr(100_000),
            Http(400, -32600, None),
        ),
        case(
            "100k nested arrays in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_arr(100_000)))),
            Http(400, -32600, id7),
        ),
        case(
            "20k nested objects in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_obj(20_000)))),
            Http(400, -32600, id7),
        ),
        case(
            "200 nested arrays in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_arr(200)))),
            Http(400, -32600, id7),
        ),
        case(
            "100k unclosed brackets in params",
            ALL,
            call_with(&format!(
                r#"{{"name":"echo","arguments":{}"#,
                "[".repeat(100_000)
            )),
            Http(400, -32700, None),
        ),
        // Huge strings around the body limit (over it: see the end of the corpus test).
        case(
            "unterminated string just under the limit",
            ALL,
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{}"#,
                "x".repeat(LIMIT - 100)
            ),
            Http(400, -32700, None),
        ),
        // Invalid UTF-8.
        case(
            "invalid UTF-8 in a string",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xff\xfe",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "overlong UTF-8 encoding",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xc0\xaf",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "UTF-8-encoded surrogate",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xed\xa0\x80",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "truncated multi-byte sequence at the end",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}"[..],
                b"\xe2\x82",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        // jsonrpc
        case(
            "jsonrpc missing",
            ALL,
            r#"{"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc a number",
            ALL,
            r#"{"jsonrpc":2.0,"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc null",
            ALL,
            r#"{"jsonrpc":null,"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc an object",
            ALL,
            r#"{"jsonrpc":{},"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc 2.1",
            ALL,
            r#"{"jsonrpc":"2.1","id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
    ];
    // id: every type the spec forbids.
    for bad in ["null", "1.5", "1e3", "-0.0", "true", "{}", "[7]"] {
        c.push(case(
            &format!("id {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":{bad},"method":"ping"}}"#),
            Http(400, -32600, None),
        ));
    }
    // method
    for bad in ["42", "null", "{}", "[]", "true", r#""tools\/list""#] {
        c.push(case(
            &format!("method {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":{bad}}}"#),
            Http(400, -32600, id7),
        ));
    }
    c.push(case(
        "neither method nor result",
        ALL,
        r#"{"jsonrpc":"2.0","id":7}"#,
        Http(400, -32600, id7),
    ));
    // params
    for bad in ["5", r#""x""#, "true"] {
        c.push(case(
            &format!("params {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{bad}}}"#),
            Http(400, -32600, id7),
        ));
        c.push(case(
            &format!("notification params {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{bad}}}"#),
            Http(400, -32600, None),
        ));
    }
    // params._meta.progressToken: a string or a number, nothing else.
    for bad in ["null", "{}", "[1]", "true"] {
        c.push(case(
            &format!("progressToken {bad}"),
            &[To::Legacy, To::Messages],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"progressToken":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
        c.push(case(
            &format!("Modern progressToken {bad}"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{{META},"progressToken":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    // params._meta and the Modern envelope keys.
    for bad in ["5", r#""x""#, "[]"] {
        c.push(case(
            &format!("Modern _meta {bad}"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{bad}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    for bad in ["5", "null", "{}", "[]"] {
        c.push(case(
            &format!("protocolVersion claim {bad}, Legacy header"),
            &[To::Legacy],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
        c.push(case(
            &format!("protocolVersion claim {bad}, Modern header"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":{bad},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#
            )),
            Http(400, -32020, id7),
        ));
    }
    c.push(case(
        "protocolVersion claim unknown",
        &[To::Legacy],
        call_with(r#"{"name":"echo","arguments":{"text":"t"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#),
        Http(400, -32022, id7),
    ));
    for bad in ["5", "null", r#""x""#, "[]"] {
        c.push(case(
            &format!("clientCapabilities {bad}"),
            &[To::Legacy, To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    // notifications/cancelled with a requestId of the wrong type: the spec says to ignore
    // invalid cancellations.
    for bad in ["null", "{}", "[7]", "true", "1.5"] {
        c.push(case(
            &format!("cancelled requestId {bad}"),
            &[To::Legacy, To::Messages],
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{bad}}}}}"#),
            Ignored,
        ));
    }
    // Fields of state-changing methods the gateway reads itself.
    for bad in ["5", "null", "{}", "[]"] {
        c.push(case(
            &format!("subscribe uri {bad}"),
            &[To::Legacy, To::Messages],
            req("resources/subscribe", &format!(r#"{{"uri":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
        c.push(case(
            &format!("setLevel level {bad}"),
            &[To::Legacy, To::Messages],
            req("logging/setLevel", &format!(r#"{{"level":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
        c.push(case(
            &format!("tasks/get taskId {bad}"),
            &[To::Legacy, To::Messages],
            req("tasks/get", &format!(r#"{{"taskId":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
    }
    c.push(case(
        "setLevel unknown level",
        &[To::Legacy, To::Messages],
        req("logging/setLevel", r#"{"level":"LOUD"}"#),
        Rpc(-32602, id7),
    ));
    // Strict JSON: what a backend's parser may read differently, or not at all.
    for (name, params, code) in [
        (
            "repeated params key",
            r#"{"name":"echo","name":"x"}"#,
            -32602,
        ),
        (
            "repeated arguments key",
            r#"{"name":"echo","arguments":{"text":"a","text":"b"}}"#,
            -32602,
        ),
        (
            "repeated key spelled with an escape",
            r#"{"name":"echo","na\u006de":"x"}"#,
            -32602,
        ),
        (
            "lone high surrogate",
            r#"{"name":"echo","arguments":{"text":"\ud800"}}"#,
            -32700,
        ),
        (
            "lone low surrogate",
            r#"{"name":"echo","arguments":{"text":"\udc00"}}"#,
            -32700,
        ),
        (
            "float overflow",
            r#"{"name":"echo","arguments":{"n":1e999999}}"#,
            -32700,
        ),
        (
            "negative float overflow",
            r#"{"name":"echo","arguments":{"n":-1e400}}"#,
            -32700,
        ),
    ] {
        c.push(case(name, ALL, call_with(params), Http(400, code, id7)));
    }
    c.push(case(
        "repeated envelope member",
        ALL,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","x":1,"x":2}"#,
        Http(400, -32600, id7),
    ));
    c.push(case(
        "lone surrogate in the id",
        ALL,
        r#"{"jsonrpc":"2.0","id":"\ud800","method":"ping"}"#,
        Http(400, -32700, None),
    ));
    c
}

/// An error body: JSON-RPC 2.0, the code, a message, and the id echoed exactly or absent.
fn assert_error_body(name: &str, text: &str, code: i64, id: Option<&str>) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}: {text:?}"));
    assert_eq!(v["jsonrpc"], "2.0", "{name}: {text}");
    assert_eq!(v["error"]["code"], code, "{name}: {text}");
    assert!(v["error"]["message"].is_string(), "{name}: {text}");
    match id {
        None => assert!(
            v.get("id").is_none(),
            "{name}: id must be omitted, never null: {text}"
        ),
        Some(id) => assert!(
            text.contains(&format!(r#""id":{id}"#)),
            "{name}: {text} should echo id {id}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_input_gets_its_defined_error_and_the_gateway_keeps_serving() {
    let limit = LIMIT.to_string();
    let gw = TestGateway::start(&["--max-body-bytes", &limit, "--request-timeout", "10"]).await;
    let sid = gw.session().await;
    let mut sse = SseConn::open(&gw).await;
    let cases = corpus();
    let mut sent = 0;
    for c in &cases {
        for &to in c.to {
            sent += 1;
            let what = format!("{} → {to:?}", c.name);
            let (status, ctype, text) = match to {
                To::Legacy | To::Modern => {
                    let (session, headers) = match to {
                        To::Legacy => (Some(sid.as_str()), &[][..]),
                        _ => (None, MODERN_CALL_HEADERS),
                    };
                    let r = bounded(&what, gw.post_raw(session, c.body.clone(), headers)).await;
                    let ctype = r.content_type().to_owned();
                    (r.status, ctype, r.text)
                }
                To::Messages => {
                    let (status, text) = sse.post(c.body.clone()).await;
                    (status, String::new(), text)
                }
            };
            match (c.want, to) {
                (Want::Http(code_status, code, id), _) => {
                    assert_eq!(status.as_u16(), code_status, "{what}: {text}");
                    if to != To::Messages {
                        assert_eq!(ctype, "application/json", "{what}");
                    }
                    assert_error_body(&what, &text, code, id);
                }
                (Want::Rpc(code, id), To::Messages) => {
                    assert_eq!(status, StatusCode::ACCEPTED, "{what}: {text}");
                    let answer = sse.next().await;
                    assert_error_body(&what, &answer.to_string(), code, id);
                }
                (Want::Rpc(code, id), _) => {
                    assert_eq!(status, StatusCode::OK, "{what}: {text}");
                    let body = if ctype.starts_with("text/event-stream") {
                        let data = sse_data(&text);
                        assert_eq!(data.len(), 1, "{what}: {text}");
                        data[0].clone()
                    } else {
                        text
                    };
                    assert_error_body(&what, &body, code, id);
                }
                (Want::Ignored, _) => {
                    assert_eq!(status, StatusCode::ACCEPTED, "{what}: {text}");
                }
            }
            // The gateway keeps serving, and nothing of the case is left on the stream.
            let r = bounded(
                "a real request after a malformed one",
                gw.call_tool(
                    Some(&sid),
                    json!("after"),
                    "echo",
                    json!({"text": "still here"}),
                ),
            )
            .await;
            assert_eq!(tool_text(&r.json()), "still here", "after {what}");
            if to == To::Messages {
                sse.sentinel("after").await;
            }
        }
    }
    // Over the body limit. Sent the way a careful client sends a large body (`Expect:
    // 100-continue`, body held back): a client that streams the whole body may see the
    // connection reset before it reads the 413, because the gateway closes the connection
    // without reading the refused body.
    let addr = gw.base().trim_start_matches("http://").to_owned();
    let size = LIMIT + 1;
    for (path, extra) in [
        ("/mcp".to_owned(), format!("Mcp-Session-Id: {sid}\r\n")),
        (
            "/mcp".to_owned(),
            format!(
                "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
            ),
        ),
        (
            sse.post_url.trim_start_matches(&gw.base()).to_owned(),
            String::new(),
        ),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: {BOTH}\r\n\
             Content-Type: application/json\r\nContent-Length: {size}\r\n\
             Expect: 100-continue\r\n{extra}\r\n"
        );
        let (status, body) = raw_http(&addr, head.as_bytes()).await;
        assert_eq!(status, 413, "{path}: {body}");
        assert_error_body(&path, &body, -32600, None);
        sent += 1;
    }
    sse.sentinel("after-413").await;
    println!("malformed corpus: {} cases, {sent} requests", cases.len());
}

/// One header value, as raw bytes.
fn hv(bytes: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_header_values_get_their_defined_errors() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let junk: &[u8] = b"\xff\xfe\x80bad";
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    let modern_call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"t"},"_meta":modern_meta()}})
    .to_string();
    let base = |session: bool| {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("accept", HeaderValue::from_static(BOTH));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        if session {
            h.insert("mcp-session-id", HeaderValue::from_str(&sid).unwrap());
        }
        h
    };
    let modern = || {
        let mut h = base(false);
        h.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
        h.insert("mcp-method", HeaderValue::from_static("tools/call"));
        h.insert("mcp-name", HeaderValue::from_static("echo"));
        h
    };
    // (what, method, headers with one value replaced by junk, body, status, code, id)
    type Row = (
        &'static str,
        reqwest::Method,
        reqwest::header::HeaderMap,
        String,
        u16,
        i64,
        Option<&'static str>,
    );
    let with = |mut h: reqwest::header::HeaderMap, name: &'static str| {
        h.insert(HeaderName::from_static(name), hv(junk));
        h
    };
    let post = reqwest::Method::POST;
    let rows: Vec<Row> = vec![
        (
            "POST Mcp-Session-Id",
            post.clone(),
            with(base(false), "mcp-session-id"),
            ping.into(),
            404,
            -32001,
            Some("7"),
        ),
        (
            "POST MCP-Protocol-Version",
            post.clone(),
            with(base(true), "mcp-protocol-version"),
            ping.into(),
            400,
            -32600,
            None,
        ),
        (
            "POST Accept",
            post.clone(),
            with(base(true), "accept"),
            ping.into(),
            406,
            -32600,
            None,
        ),
        (
            "POST Content-Type",
            post.clone(),
            with(base(true), "content-type"),
            ping.into(),
            415,
            -32600,
            None,
        ),
        (
            "POST Origin",
            post.clone(),
            with(base(true), "origin"),
            ping.into(),
            403,
            -32600,
            None,
        ),
        (
            "Modern Mcp-Method",
            post.clone(),
            with(modern(), "mcp-method"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "Modern Mcp-Name",
            post.clone(),
            with(modern(), "mcp-name"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "Modern MCP-Protocol-Version",
            post.clone(),
            with(modern(), "mcp-protocol-version"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "GET Mcp-Session-Id",
            reqwest::Method::GET,
            with(base(false), "mcp-session-id"),
            String::new(),
            404,
            -32001,
            None,
        ),
        (
            "GET MCP-Protocol-Version",
            reqwest::Method::GET,
            with(base(true), "mcp-protocol-version"),
            String::new(),
            400,
            -32600,
            None,
        ),
        (
            "GET Origin",
            reqwest::Method::GET,
            with(base(true), "origin"),
            String::new(),
            403,
            -32600,
            None,
        ),
        (
            "DELETE Mcp-Session-Id",
            reqwest::Method::DELETE,
            with(base(false), "mcp-session-id"),
            String::new(),
            404,
            -32001,
            None,
        ),
        (
            "DELETE MCP-Protocol-Version",
            reqwest::Method::DELETE,
            with(base(true), "mcp-protocol-version"),
            String::new(),
            400,
            -32600,
            None,
        ),
        (
            "DELETE Origin",
            reqwest::Method::DELETE,
            with(base(true), "origin"),
            String::new(),
            403,
            -32600,
            None,
        ),
    ];
    for (what, method, headers, body, status, code, id) in rows {
        let r = bounded(
            what,
            gw.http
                .request(method, &gw.url)
                .headers(headers)
                .body(body)
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), status, "{what}");
        assert_error_body(what, &r.text().await.unwrap(), code, id);
        let r = gw
            .call_tool(Some(&sid), json!(1), "echo", json!({"text": "still here"}))
            .await;
        assert_eq!(tool_text(&r.json()), "still here", "after {what}");
    }
    // A junk Last-Event-ID names no event: the stream opens and replays nothing.
    let r = gw
        .http
        .get(&gw.url)
        .headers(with(base(true), "last-event-id"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(r);
    // The session survived every case.
    let r = gw
        .call_tool(Some(&sid), json!(2), "echo", json!({"text": "done"}))
        .await;
    assert_eq!(tool_text(&r.json()), "done");
}

/// Sends raw bytes as one HTTP/1.1 request; returns (status, body).
async fn raw_http(addr: &str, request: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    bounded("a raw HTTP answer", s.read_to_end(&mut buf))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_headers_are_refused_and_the_gateway_keeps_serving() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let addr = gw.base().trim_start_matches("http://").to_owned();
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    let headers = [
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Accept",
        "Content-Type",
        "Last-Event-ID",
        "Origin",
    ];
    for name in headers {
        for ctl in [&b"\x01"[..], b"\x00", b"\x7f", b"\x1b[2J", b"a\rb"] {
            for method in ["POST", "GET", "DELETE"] {
                let mut head = format!(
                    "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                     Accept: {BOTH}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n",
                    if method == "POST" { ping.len() } else { 0 }
                )
                .into_bytes();
                head.extend_from_slice(name.as_bytes());
                head.extend_from_slice(b": x");
                head.extend_from_slice(ctl);
                head.extend_from_slice(format!("{sid}\r\n\r\n").as_bytes());
                if method == "POST" {
                    head.extend_from_slice(ping.as_bytes());
                }
                let (status, body) = raw_http(&addr, &head).await;
                // Refused by the HTTP parser before any handler runs (no JSON-RPC body can be
                // produced there), or by the gateway with its JSON-RPC error.
                assert!(
                    (400..500).contains(&status),
                    "{method} {name} {ctl:?}: {status} {body}"
                );
                if !body.is_empty() {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert!(v["error"]["code"].is_i64(), "{body}");
                    assert!(!v.get("id").is_some_and(Value::is_null), "{body}");
                }
            }
        }
    }
    let r = gw
        .call_tool(Some(&sid), json!(1), "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(tool_text(&r.json()), "still here");
}

/// A deeply nested payload must never reach a backend that cannot parse it: a Python backend
/// dies of `RecursionError` (taking every session with it), a serde_json one never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_never_reaches_the_shared_backend() {
    let gw = pushy(&[]).await;
    let sid = gw.session().await;
    let n = 5_000;
    let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"stats","arguments":{{"deep":{deep}}}}}}}"#
    );
    let r = bounded("deep request", gw.post_raw(Some(&sid), body, &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_error_body("deep", &r.text, -32600, Some("7"));
    // The backend is alive for everyone.
    let st = crate::common::backend_stats(&gw, &sid).await;
    assert!(st["held"].is_array(), "{st}");
}
