//! Strict input at the door: what a backend could read differently from the gateway (repeated
//! keys, repeated headers) or not at all (lone surrogates, overflowing numbers) is refused
//! before it reaches the backend; and a backend's answer to a line it could not parse reaches
//! the one caller it certainly belongs to.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{tool_text, TestGateway, BOTH};

const MODERN: &str = "2026-07-28";

async fn recorder(args: &[&str]) -> TestGateway {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/recorder.py"
    );
    TestGateway::start_with(args, &["python3", script]).await
}

/// What the backend has read so far. Its answer is ordered after every line before it, so
/// a refused message that had been forwarded would be counted here.
async fn seen(gw: &TestGateway, sid: &str) -> Value {
    let r = gw
        .call_tool(Some(sid), json!("seen"), "seen", json!({}))
        .await;
    serde_json::from_str(tool_text(&r.json())).unwrap()
}

fn assert_refusal(text: &str, code: i64, id: Option<&str>) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["error"]["code"], code, "{text}");
    match id {
        None => assert!(v.get("id").is_none(), "id must be omitted: {text}"),
        Some(id) => assert!(text.contains(&format!(r#""id":{id}"#)), "{text} lacks {id}"),
    }
}

fn call(id: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
}

/// (body, JSON-RPC code, id to echo). Every body carries `BAD-MARKER`.
fn bad_bodies() -> Vec<(String, i64, Option<&'static str>)> {
    let args = r#""arguments":{"text":"BAD-MARKER"}"#;
    vec![
        // The policy reads the last `name`; a first-wins backend would run the first.
        (
            call("1", &format!(r#"{{"name":"echo","name":"seen",{args}}}"#)),
            -32602,
            Some("1"),
        ),
        (
            call(
                "2",
                r#"{"name":"echo","arguments":{"text":"BAD-MARKER","text":"x"}}"#,
            ),
            -32602,
            Some("2"),
        ),
        (
            call(
                "3",
                &format!(
                    r#"{{"name":"echo",{args},"_meta":{{"progressToken":1,"progressToken":2}}}}"#
                ),
            ),
            -32602,
            Some("3"),
        ),
        (
            call(
                "4",
                &format!(r#"{{"name":"echo","n\u0061me":"seen",{args}}}"#),
            ),
            -32602,
            Some("4"),
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","x":1,"x":2,"params":{{"name":"echo",{args}}}}}"#
            ),
            -32600,
            Some("5"),
        ),
        (
            call(
                "6",
                r#"{"name":"echo","arguments":{"text":"BAD-MARKER \ud800"}}"#,
            ),
            -32700,
            Some("6"),
        ),
        (
            call(
                "7",
                r#"{"name":"echo","arguments":{"text":"BAD-MARKER \udc00\ud800"}}"#,
            ),
            -32700,
            Some("7"),
        ),
        (
            call("8", &format!(r#"{{"name":"echo",{args},"n":1e999999}}"#)),
            -32700,
            Some("8"),
        ),
        (
            call(
                "9",
                &format!(r#"{{"name":"echo",{args},"deep":[[{{"n":-1e400}}]]}}"#),
            ),
            -32700,
            Some("9"),
        ),
        // A member the gateway reads, spelled another way: the gateway would find no
        // `name` (policy on the tool "") or no `arguments` (guardrails on `{}`), while a
        // case-insensitive backend (Go's encoding/json) runs them.
        (
            call("10", &format!(r#"{{"Name":"echo",{args}}}"#)),
            -32602,
            Some("10"),
        ),
        (
            call("11", r#"{"name":"echo","ARGUMENTS":{"text":"BAD-MARKER"}}"#),
            -32602,
            Some("11"),
        ),
        (
            call(
                "12",
                r#"{"name":"echo","argument\u017f":{"text":"BAD-MARKER"}}"#,
            ),
            -32602,
            Some("12"),
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":13,"method":"tools/call","Params":{{"name":"echo",{args}}}}}"#
            ),
            -32600,
            Some("13"),
        ),
        // `params` escaped is `params` to every parser, and its members are checked too.
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":14,"method":"tools/call","par\u0061ms":{{"Name":"echo",{args}}}}}"#
            ),
            -32602,
            Some("14"),
        ),
        // A C-string backend would run `echo`, a tool the gateway did not judge.
        (
            call("15", &format!(r#"{{"name":"echo\u0000x",{args}}}"#)),
            -32602,
            Some("15"),
        ),
        // An id that is itself not strict JSON cannot be echoed.
        (
            call(
                r#""BAD-MARKER\ud800""#,
                r#"{"name":"echo","arguments":{"text":"t"}}"#,
            ),
            -32700,
            None,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"notifications/BAD-MARKER","params":{"a":1,"a":2}}"#
                .to_owned(),
            -32602,
            None,
        ),
    ]
}

#[tokio::test]
async fn strict_json_violations_are_refused_and_never_reach_the_backend() {
    let gw = recorder(&[]).await;
    let sid = gw.session().await;
    let modern = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    for (body, code, id) in bad_bodies() {
        for extra in [&[][..], &modern[..]] {
            let session = extra.is_empty().then_some(sid.as_str());
            let r = gw.post_raw(session, body.clone(), extra).await;
            assert_eq!(r.status.as_u16(), 400, "{body}: {}", r.text);
            assert_refusal(&r.text, code, id);
        }
    }
    // Integers beyond 2^64 are not refused, as values or as ids (this test's own parser
    // refuses 400 digits; the wire unit tests cover those).
    let big = "1".repeat(40);
    // A tool's own arguments may use any spelling (`Name`, `URI`): only protocol members
    // have one.
    let ok = call(
        &big,
        &format!(
            r#"{{"name":"echo","arguments":{{"text":"CONTROL-MARKER","n":{big},"Name":1,"URI":2}}}}"#
        ),
    );
    let r = gw.post_raw(Some(&sid), ok, &[]).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert!(r.text.contains(&format!(r#""id":{big}"#)), "{}", r.text);
    assert_eq!(tool_text(&r.json()), "CONTROL-MARKER");
    // Sentinel: the backend saw the control line and none of the refused ones.
    let counts = seen(&gw, &sid).await;
    assert_eq!(counts["control"], 1, "{counts}");
    assert_eq!(counts["bad"], 0, "{counts}");
}

#[tokio::test]
async fn a_backend_parse_error_answers_the_request_it_can_only_belong_to() {
    let gw = recorder(&["--request-timeout", "30"]).await;
    let sid = gw.session().await;
    let r = gw
        .call_tool(Some(&sid), json!(1), "echo", json!({"text":"first"}))
        .await;
    assert_eq!(tool_text(&r.json()), "first");
    // Bounded well below the gateway's deadline: the answer must come from the backend's error,
    // not from the timeout.
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        gw.call_tool(Some(&sid), json!("mine"), "garble", json!({})),
    )
    .await
    .expect("the caller must not wait out the request timeout");
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["id"], "mine", "{v}");
    assert_eq!(v["error"]["code"], -32700, "{v}");
    // The backend is still in step: the next call gets its own answer.
    let r = gw
        .call_tool(Some(&sid), json!(3), "echo", json!({"text":"after"}))
        .await;
    assert_eq!(tool_text(&r.json()), "after");
}

/// Polls `probe` (a tool call on `sid`) until its text satisfies `done`. Each probe is answered
/// after every line the backend read before it.
async fn until(gw: &TestGateway, sid: &str, probe: &str, done: impl Fn(&str) -> bool) {
    for _ in 0..500 {
        let r = gw.call_tool(Some(sid), json!("p"), probe, json!({})).await;
        if done(tool_text(&r.json())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{probe} never reached the expected state");
}

fn spawn_call(gw: &TestGateway, sid: &str, id: &str, tool: &str) -> tokio::task::JoinHandle<Value> {
    let (url, http, sid) = (gw.url.clone(), gw.http.clone(), sid.to_owned());
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":tool,"arguments":{}}});
    tokio::spawn(async move {
        let text = http
            .post(url)
            .header("accept", BOTH)
            .header("content-type", "application/json")
            .header("mcp-session-id", sid)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

#[tokio::test]
async fn a_backend_parse_error_that_could_be_anothers_reaches_nobody() {
    let gw = recorder(&["--request-timeout", "3"]).await;
    let (a, b) = (gw.session().await, gw.session().await);
    let held = spawn_call(&gw, &a, "a-held", "hold");
    until(&gw, &b, "held", |t| t == "1").await;
    // Two calls in flight when the backend's `"id": null` error arrives: it could be either's.
    let garbled = spawn_call(&gw, &b, "b-garbled", "garble");
    until(&gw, &b, "seen", |t| t.contains(r#""garbled": 1"#)).await;
    // The error has been read (it preceded the probe's answer). A's call was not resolved by
    // it: it gets its own answer when released.
    let r = gw
        .call_tool(Some(&a), json!("a-release"), "release", json!({}))
        .await;
    assert_eq!(tool_text(&r.json()), "released");
    let held = held.await.unwrap();
    assert_eq!(held["id"], "a-held");
    assert_eq!(tool_text(&held), "held", "{held}");
    // Nor was B's: it keeps its deadline.
    let garbled = garbled.await.unwrap();
    assert_eq!(garbled["id"], "b-garbled");
    assert_eq!(garbled["error"]["code"], -32000, "{garbled}");
}

/// One hand-written HTTP/1.1 request on a fresh connection; returns (status, body).
async fn raw_http(gw: &TestGateway, head: &str, body: &str) -> (u16, String) {
    let addr = gw
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "{head}\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .expect("answered")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

#[tokio::test]
async fn repeated_headers_the_gateway_reads_are_refused_in_either_order() {
    let gw = recorder(&[]).await;
    let sid = gw.session().await;
    let echo = call("11", r#"{"name":"echo","arguments":{"text":"BAD-MARKER"}}"#);
    let json_ct = "Content-Type: application/json";
    let accept = format!("Accept: {BOTH}");
    let session = format!("Mcp-Session-Id: {sid}");
    let pairs: Vec<(String, String)> = vec![
        (json_ct.to_owned(), "Content-Type: text/plain".to_owned()),
        (json_ct.to_owned(), json_ct.to_owned()),
        (session.clone(), "Mcp-Session-Id: 0123".to_owned()),
        (
            "MCP-Protocol-Version: 2025-11-25".to_owned(),
            "mcp-protocol-version: 2099-01-01".to_owned(),
        ),
    ];
    for (one, two) in &pairs {
        for (first, second) in [(one, two), (two, one)] {
            // The other headers this request needs, unless the pair is one of them.
            let mut head = format!("POST /mcp HTTP/1.1\r\n{accept}");
            for h in [json_ct, session.as_str()] {
                let name = h.split(':').next().unwrap();
                if !first.starts_with(name) {
                    head.push_str(&format!("\r\n{h}"));
                }
            }
            head.push_str(&format!("\r\n{first}\r\n{second}"));
            let (status, body) = raw_http(&gw, &head, &echo).await;
            assert_eq!(status, 400, "{first} / {second}: {body}");
            assert_refusal(&body, -32600, None);
        }
    }
    // Modern: Mcp-Method and Mcp-Name.
    let modern =
        format!("POST /mcp HTTP/1.1\r\n{accept}\r\n{json_ct}\r\nMCP-Protocol-Version: {MODERN}");
    for extra in [
        "Mcp-Method: tools/call\r\nMcp-Method: tools/call\r\nMcp-Name: echo",
        "Mcp-Method: tools/call\r\nMcp-Name: echo\r\nMcp-Name: seen",
        "Mcp-Method: tools/call\r\nMcp-Name: seen\r\nMcp-Name: echo",
    ] {
        let (status, body) = raw_http(&gw, &format!("{modern}\r\n{extra}"), &echo).await;
        assert_eq!(status, 400, "{extra}: {body}");
        assert_refusal(&body, -32600, None);
    }
    // GET and DELETE read Mcp-Session-Id: a repeated one neither opens a stream nor ends a
    // session.
    for verb in ["GET", "DELETE"] {
        let head = format!(
            "{verb} /mcp HTTP/1.1\r\nAccept: text/event-stream\r\n{session}\r\nMcp-Session-Id: 0123"
        );
        let (status, body) = raw_http(&gw, &head, "").await;
        assert_eq!(status, 400, "{verb}: {body}");
        assert_refusal(&body, -32600, None);
    }
    // The session survived the DELETE, and the backend saw none of the refused requests.
    let counts = seen(&gw, &sid).await;
    assert_eq!(counts["bad"], 0, "{counts}");
}

#[tokio::test]
async fn repeated_content_type_on_messages_is_refused() {
    let gw = recorder(&[]).await;
    let mut sse = crate::legacy_sse::SseClient::open(&gw).await;
    let path = format!("/messages?session_id={}", sse.session());
    let echo = call("12", r#"{"name":"echo","arguments":{"text":"BAD-MARKER"}}"#);
    for (first, second) in [
        ("application/json", "text/plain"),
        ("text/plain", "application/json"),
    ] {
        let head =
            format!("POST {path} HTTP/1.1\r\nContent-Type: {first}\r\nContent-Type: {second}");
        let (status, body) = raw_http(&gw, &head, &echo).await;
        assert_eq!(status, 400, "{first} / {second}: {body}");
        assert_refusal(&body, -32600, None);
    }
    // Sentinel on the same session: its answer follows anything the backend had read before.
    sse.send(
        &json!({"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"seen","arguments":{}}}),
    )
    .await;
    let answer = sse.next().await;
    assert_eq!(answer["id"], "s");
    let counts: Value = serde_json::from_str(tool_text(&answer)).unwrap();
    assert_eq!(counts["bad"], 0, "{counts}");
}

/// The DNS-rebinding check reads one Origin: a request carrying an allowed one beside an evil
/// one, in either order, is refused before anything else reads it (before the fix the first
/// one won, so an allowed first Origin vouched for the second).
#[tokio::test]
async fn repeated_origin_or_authorization_is_refused_in_either_order() {
    let gw = recorder(&[]).await;
    let sid = gw.session().await;
    let echo = call("12", r#"{"name":"echo","arguments":{"text":"BAD-MARKER"}}"#);
    let base = format!(
        "POST /mcp HTTP/1.1\r\nAccept: {BOTH}\r\nContent-Type: application/json\r\nMcp-Session-Id: {sid}"
    );
    let pairs = [
        (
            "Origin: http://localhost",
            "Origin: http://evil.example.com",
        ),
        ("Authorization: Bearer a", "Authorization: Bearer b"),
    ];
    for (one, two) in pairs {
        for (first, second) in [(one, two), (two, one)] {
            let (status, body) =
                raw_http(&gw, &format!("{base}\r\n{first}\r\n{second}"), &echo).await;
            assert_eq!(status, 400, "{first} / {second}: {body}");
            assert_refusal(&body, -32600, None);
        }
    }
    let counts = seen(&gw, &sid).await;
    assert_eq!(counts["bad"], 0, "{counts}");
}
