//! `switchboard run --url <remote>`: the gateway in front of a remote MCP server, here our own
//! `fixture --http` (an independent HTTP implementation) or hand-written servers on raw
//! sockets. The fixture's `instance` tool and its `session opened …` stdout lines let a test
//! see from the remote's side which upstream session served each call.

mod faults;
mod hostile;
mod push;
mod raw;

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use futures::Stream;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, Reply, TestGateway, BOTH};
use crate::fixture_http::FixtureHttp;

pub(crate) const ALICE: &str = "alice-remote-key-0123456789";
pub(crate) const BOB: &str = "bob-remote-key-0123456789ab";

/// `switchboard run --url <url> <args>` (no command).
pub(crate) async fn gateway(url: &str, args: &[&str]) -> TestGateway {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    TestGateway::start_with(&all, &[]).await
}

/// A keys file for alice and bob, in a fresh temporary directory.
pub(crate) fn keys_file() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("switchboard-remote-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys");
    std::fs::write(&path, format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

/// The `authorization` header for `key`, as extra headers for `post_raw`.
fn auth(key: Option<&str>) -> Vec<(&'static str, String)> {
    key.map(|k| vec![("authorization", format!("Bearer {k}"))])
        .unwrap_or_default()
}

pub(crate) async fn post_as(
    gw: &TestGateway,
    key: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> Reply {
    let headers = auth(key);
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    gw.post_raw(session, body.to_string(), &extra).await
}

/// A Legacy session declaring `capabilities`, as the holder of `key`; returns its id.
pub(crate) async fn open_session(
    gw: &TestGateway,
    key: Option<&str>,
    capabilities: Value,
) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
        "clientInfo": {"name": "remote-it", "version": "0"}}});
    let r = post_as(gw, key, None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.json()["result"]["protocolVersion"],
        "2025-11-25",
        "{}",
        r.text
    );
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post_as(gw, key, Some(&sid), &done).await.status,
        StatusCode::ACCEPTED
    );
    sid
}

pub(crate) fn call(id: Value, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

/// The `instance` id an answer reports (text and structuredContent must agree).
fn instance_in(answer: &Value) -> String {
    let id = answer["result"]["structuredContent"]["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("no instance in {answer}"))
        .to_owned();
    assert_eq!(tool_text(answer), id);
    id
}

/// Which remote instance serves `session` (Legacy).
pub(crate) async fn instance_of(gw: &TestGateway, key: Option<&str>, session: &str) -> String {
    let r = post_as(
        gw,
        key,
        Some(session),
        &call(json!("inst"), "instance", json!({})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    instance_in(&r.json())
}

/// A Modern (2026-07-28) `tools/call`, declaring `capabilities`, as the holder of `key`.
pub(crate) async fn modern_call(
    gw: &TestGateway,
    key: Option<&str>,
    name: &str,
    arguments: Value,
    capabilities: Value,
) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities}}});
    let mut headers = auth(key);
    headers.extend([
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", "tools/call".to_owned()),
        ("mcp-name", name.to_owned()),
    ]);
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    gw.post_raw(None, body.to_string(), &extra).await
}

async fn modern_instance(gw: &TestGateway, key: Option<&str>, capabilities: Value) -> String {
    let r = modern_call(gw, key, "instance", json!({}), capabilities).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let answer = r.json();
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    instance_in(&answer)
}

/// A failure class of the gateway's error table (`http::error`): its HTTP status and code.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failure {
    /// The backend is gone or answered unusably: 502, -32603.
    BadGateway,
    /// The request's deadline passed: 504, -32000.
    Timeout,
}

impl Failure {
    fn code(self) -> i64 {
        match self {
            Failure::BadGateway => -32603,
            Failure::Timeout => -32000,
        }
    }
}

/// The start of `text`, for assertion messages (a failing answer may be many MiB).
pub(crate) fn excerpt(text: &str) -> String {
    let mut end = text.len().min(400);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < text.len() { "…" } else { "" };
    format!("{}{more} ({} bytes)", &text[..end], text.len())
}

/// Asserts that `m` is a JSON-RPC error of class `failure` answering `id`, with a message.
pub(crate) fn assert_error(m: &Value, failure: Failure, id: &Value) {
    let shown = excerpt(&m.to_string());
    assert_eq!(&m["id"], id, "{shown}");
    assert_eq!(m["error"]["code"], failure.code(), "{failure:?}: {shown}");
    let message = m["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{shown}");
}

/// Asserts that `r` is exactly one error answer of class `failure` to `id`: a JSON body with
/// the class's HTTP status, or a 200 SSE stream carrying only that error. (A session's
/// requests are always streamed in per-session mode, which a remote always gets, so an error
/// there can only be an SSE error frame: the status was sent with the stream's start.)
pub(crate) fn assert_failure(r: &Reply, failure: Failure, id: Value) {
    let status = match failure {
        Failure::BadGateway => StatusCode::BAD_GATEWAY,
        Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
    };
    let expected = if r.content_type().starts_with("text/event-stream") {
        StatusCode::OK
    } else {
        status
    };
    assert_eq!(r.status, expected, "{}", excerpt(&r.text));
    let messages = r.messages();
    assert_eq!(messages.len(), 1, "{}", excerpt(&r.text));
    assert_error(&messages[0], failure, &id);
}

pub(crate) type Events =
    Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>;

/// The next message of `events`, or `None` if none arrives within `wait`.
pub(crate) async fn next_within(events: &mut Events, wait: Duration) -> Option<Value> {
    tokio::time::timeout(wait, async {
        loop {
            let e = events
                .next()
                .await
                .expect("stream ended")
                .expect("sse error");
            if let Some(d) = e.data.filter(|d| !d.is_empty()) {
                return serde_json::from_str(&d).unwrap();
            }
        }
    })
    .await
    .ok()
}

pub(crate) async fn next(events: &mut Events) -> Value {
    next_within(events, Duration::from_secs(10))
        .await
        .expect("no message within 10s")
}

fn sse(resp: reqwest::Response) -> Events {
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ))
}

/// POSTs a request on `sid` and returns its (SSE) answer stream.
pub(crate) async fn open_call(gw: &TestGateway, sid: &str, body: Value) -> Events {
    let resp = gw
        .http
        .post(&gw.url)
        .header("accept", BOTH)
        .header("content-type", "application/json")
        .header("mcp-session-id", sid)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    sse(resp)
}

pub(crate) async fn listen(gw: &TestGateway, sid: &str) -> Events {
    let resp = gw
        .http
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .send()
        .await
        .unwrap();
    sse(resp)
}

#[tokio::test]
async fn lifecycle_through_a_remote_never_shows_its_session_id() {
    let fx = FixtureHttp::start(&[]).await;
    let gw = gateway(&fx.url, &[]).await;
    let sid = open_session(&gw, None, json!({})).await;
    let mut seen_by_client = vec![sid.clone()];

    let list = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    seen_by_client.push(format!("{:?} {}", list.headers, list.text));
    let names: Vec<String> = list.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.iter().any(|n| n == "echo") && names.iter().any(|n| n == "instance"));

    let echo = gw
        .post(
            Some(&sid),
            &call(json!(2), "echo", json!({"text": "over there"})),
        )
        .await;
    seen_by_client.push(format!("{:?} {}", echo.headers, echo.text));
    assert_eq!(echo.json()["id"], 2);
    assert_eq!(
        echo.json()["result"]["structuredContent"]["text"],
        "over there"
    );

    let instance = instance_of(&gw, None, &sid).await;
    let announced = fx
        .announced_when("the client's upstream session", |a| {
            a.session_of(&instance).is_some()
        })
        .await;
    let upstream = announced.session_of(&instance).unwrap().to_owned();
    assert_ne!(
        upstream, sid,
        "the client must not get the remote's session id"
    );
    for (theirs, _) in &announced.opened {
        assert!(
            seen_by_client
                .iter()
                .all(|text| !text.contains(theirs.as_str())),
            "the remote's session id {theirs} reached the client"
        );
    }

    let deleted = gw
        .http
        .delete(&gw.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let gone = gw
        .post(Some(&sid), &call(json!(3), "echo", json!({"text": "x"})))
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
    // The upstream session is ended too (DELETE at the remote), not left to its idle expiry.
    fx.announced_when("the upstream session's DELETE", |a| {
        a.closed.contains(&upstream)
    })
    .await;
}

const SESSIONS: usize = 16;
const REQUESTS: u64 = 100;
const IN_FLIGHT: usize = 8;

/// 16 sessions send the same ids 1..=100 at once, with session-specific text (and out-of-order
/// answers from random delays). Every 10th request asks for the serving instance instead: it
/// must be the session's own, the same throughout, and no two sessions may share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_sessions_with_colliding_ids_never_cross_and_keep_their_instance() {
    let fx = FixtureHttp::start(&[]).await;
    let gw = Arc::new(gateway(&fx.url, &[]).await);
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let sid = open_session(&gw, None, json!({})).await;
        let instance = instance_of(&gw, None, &sid).await;
        sessions.push((sid, instance));
    }
    let distinct: HashSet<&String> = sessions.iter().map(|(_, i)| i).collect();
    assert_eq!(
        distinct.len(),
        SESSIONS,
        "one upstream session per client session"
    );
    let tasks = sessions
        .into_iter()
        .enumerate()
        .map(|(s, (sid, instance))| {
            let gw = gw.clone();
            tokio::spawn(async move {
                let answered = stream::iter(1..=REQUESTS)
                    .map(|i| {
                        let (gw, sid, instance) = (gw.clone(), sid.clone(), instance.clone());
                        async move {
                            let text = format!("session-{s}-request-{i}");
                            let body = if i % 10 == 0 {
                                call(json!(i), "instance", json!({}))
                            } else {
                                let delay = (i * 7 + s as u64 * 13) % 4;
                                call(json!(i), "echo", json!({"text": text, "delayMs": delay}))
                            };
                            let reply = gw.post(Some(&sid), &body).await;
                            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
                            let v = reply.json();
                            assert_eq!(v["id"], json!(i), "id crossed: {v}");
                            if i % 10 == 0 {
                                assert_eq!(instance_in(&v), instance, "session {s} moved instance");
                            } else {
                                assert_eq!(tool_text(&v), text, "payload crossed into session {s}");
                            }
                        }
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .count()
                    .await;
                assert_eq!(answered as u64, REQUESTS);
            })
        });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
}

/// Two principals never share an upstream session: Legacy sessions are each their own, and
/// Modern requests bridged onto a Legacy-only remote run on a session per (principal, declared
/// capabilities), stable for repeated calls of the same caller.
#[tokio::test]
async fn principals_get_distinct_upstream_sessions_on_both_paths() {
    let keys = keys_file();
    let fx = FixtureHttp::start(&["--era", "legacy"]).await;
    let gw = gateway(&fx.url, &["--api-keys-file", &keys]).await;

    let a1 = open_session(&gw, Some(ALICE), json!({})).await;
    let a2 = open_session(&gw, Some(ALICE), json!({})).await;
    let b1 = open_session(&gw, Some(BOB), json!({})).await;
    let legacy = [
        instance_of(&gw, Some(ALICE), &a1).await,
        instance_of(&gw, Some(ALICE), &a2).await,
        instance_of(&gw, Some(BOB), &b1).await,
    ];
    assert_eq!(legacy.iter().collect::<HashSet<_>>().len(), 3, "{legacy:?}");

    let alice = modern_instance(&gw, Some(ALICE), json!({})).await;
    let bob = modern_instance(&gw, Some(BOB), json!({})).await;
    assert_ne!(alice, bob, "two principals on one upstream session");
    assert_eq!(
        modern_instance(&gw, Some(ALICE), json!({})).await,
        alice,
        "partition is stable"
    );
    assert_eq!(modern_instance(&gw, Some(BOB), json!({})).await, bob);
    let alice_sampling = modern_instance(&gw, Some(ALICE), json!({"sampling": {}})).await;
    assert_ne!(
        alice_sampling, alice,
        "other declared capabilities, other upstream session"
    );
    for modern in [&alice, &bob, &alice_sampling] {
        assert!(
            !legacy.contains(modern),
            "a Modern partition reused a client's session"
        );
    }
}

/// Against a dual-era remote, Modern requests are passed through statelessly: they run on the
/// remote's one shared Modern instance (the same one a direct Modern request reaches) for
/// every principal: that instance serves only requests the remote read as Modern.
#[tokio::test]
async fn modern_requests_reach_a_modern_remote_statelessly() {
    let keys = keys_file();
    let fx = FixtureHttp::start(&[]).await;
    let gw = gateway(&fx.url, &["--api-keys-file", &keys]).await;
    let direct = fx
        .post(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "instance", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}),
            &[
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "instance"),
            ],
        )
        .await;
    let direct: Value = direct.json().await.unwrap();
    let shared = instance_in(&direct);
    assert_eq!(modern_instance(&gw, Some(ALICE), json!({})).await, shared);
    assert_eq!(modern_instance(&gw, Some(BOB), json!({})).await, shared);
}

fn custom_header_call(region: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "test_custom_header", "arguments": {"region": region}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string()
}

async fn custom_header(gw: &TestGateway, region: &str, header: &str) -> Reply {
    let extra = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_custom_header"),
        ("mcp-param-region", header),
    ];
    gw.post_raw(None, custom_header_call(region), &extra).await
}

/// A Modern call of a tool with an `x-mcp-header` argument carries its `Mcp-Param-*` mirror
/// header (SEP-2243); the remote checks it too, so the gateway must send it on (the value the
/// client sent and the gateway validated, or one re-encoded from the arguments).
#[tokio::test]
async fn modern_param_headers_reach_the_remote() {
    let fx = FixtureHttp::start(&[]).await;
    let gw = gateway(&fx.url, &[]).await;
    for (region, header) in [
        ("us-west", "us-west"),
        ("eu-north", "=?base64?ZXUtbm9ydGg=?="),
    ] {
        let r = custom_header(&gw, region, header).await;
        assert_eq!(r.status, StatusCode::OK, "{header}: {}", r.text);
        assert_eq!(
            tool_text(&r.json()),
            format!("region={region}"),
            "{}",
            r.text
        );
    }
}

/// The gateway checks `Mcp-Param-*` against the designations it learned from the backend's
/// `tools/list`, also when the backend is a Legacy-only remote (Modern calls bridged). The
/// control: the same call to a Legacy-only stdio backend is refused.
#[tokio::test]
async fn mismatched_param_headers_are_refused_in_front_of_a_legacy_remote() {
    let fx = FixtureHttp::start(&["--era", "legacy"]).await;
    let bin = env!("CARGO_BIN_EXE_switchboard");
    let stdio = TestGateway::start_with(&[], &[bin, "fixture", "--era", "legacy"]).await;
    let remote = gateway(&fx.url, &[]).await;
    for (what, gw) in [("stdio legacy", &stdio), ("remote legacy", &remote)] {
        // Calls go unchecked while the designations are being learned (a walk is retried
        // after 1 s when it fails): bounded polling, 5 s at most.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let r = loop {
            let r = custom_header(gw, "us-west", "eu-north").await;
            if r.status != StatusCode::OK || tokio::time::Instant::now() > deadline {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {}", r.text);
        assert_eq!(r.error_code(), -32020, "{what}");
    }
}

/// A Legacy client's call bridged to a Modern-only remote gets its `Mcp-Param-*` headers from
/// the arguments (`headers::param_values`); a designated argument spelled another way
/// (`Region`) has none, and a remote matching keys loosely would run it as `region`: the
/// gateway refuses it without sending it. Before, the fixture answered `region=`.
#[tokio::test]
async fn a_bridged_call_with_a_designated_argument_spelled_another_way_is_refused() {
    let fx = FixtureHttp::start(&["--era", "modern"]).await;
    let gw = gateway(&fx.url, &[]).await;
    let session = gw.session().await;
    let list = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"});
    let listed = gw.post(Some(&session), &list).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    let ok = gw
        .call_tool(
            Some(&session),
            json!(1),
            "test_custom_header",
            json!({"region": "us-west"}),
        )
        .await;
    assert_eq!(tool_text(&ok.json()), "region=us-west", "{}", ok.text);
    let loose = gw
        .call_tool(
            Some(&session),
            json!(2),
            "test_custom_header",
            json!({"Region": "eu-north"}),
        )
        .await;
    assert_eq!(loose.error_code(), -32602, "{}", loose.text);
    assert!(loose.text.contains("spelled another way"), "{}", loose.text);
    // Arguments a value parser cannot read (an integer past a double) would send no header.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "test_custom_header", "arguments": {"region": "eu-north", "pad": "PAD"}}});
    let call = call
        .to_string()
        .replace("\"PAD\"", &format!("1{}", "0".repeat(400)));
    let unreadable = gw.post_raw(Some(&session), call, &[]).await;
    assert_eq!(unreadable.error_code(), -32602, "{}", unreadable.text);
    assert!(unreadable.text.contains("Mcp-Param"), "{}", unreadable.text);
}

/// A Legacy client's first call of a designated tool on a Modern-only remote, before any
/// `tools/list` passed: the gateway learns the designations first, so the bridged call carries
/// `Mcp-Param-Region`. Before, the remote refused it (-32020, no header) until some client
/// listed the tools.
#[tokio::test]
async fn a_bridged_call_carries_its_param_headers_before_any_list() {
    let fx = FixtureHttp::start(&["--era", "modern"]).await;
    let gw = gateway(&fx.url, &[]).await;
    let session = gw.session().await;
    let args = json!({"region": "us-west"});
    let r = (gw.call_tool(Some(&session), json!(1), "test_custom_header", args)).await;
    assert_eq!(tool_text(&r.json()), "region=us-west", "{}", r.text);
}
