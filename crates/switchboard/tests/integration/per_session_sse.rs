//! `--isolation per-session` for HTTP+SSE clients (`GET /sse` + `POST /messages`): the session
//! gets its own process when its `initialize` arrives, server requests reach only that
//! session's stream, and only that session's answers reach its process.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{process_running, stats, tool_text, TestGateway};
use crate::legacy_sse::{eventually, json_body, python_sse_client, SseClient};

const PER_SESSION: &[&str] = &["--isolation", "per-session"];

fn initialize(id: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion":"2024-11-05",
        "capabilities":{"elicitation":{},"sampling":{},"roots":{}},
        "clientInfo":{"name":"it","version":"0"}}})
}

/// Opens an HTTP+SSE session and completes its handshake with its own process.
async fn isolated(gw: &TestGateway) -> SseClient {
    let mut c = SseClient::connect(gw).await;
    let init = c.request(&initialize(json!(0))).await;
    assert_eq!(init["id"], 0, "{init}");
    assert_eq!(
        init["result"]["serverInfo"]["name"], "switchboard-fixture",
        "{init}"
    );
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    c
}

async fn pid_of(c: &mut SseClient) -> String {
    tool_text(&c.call(json!("pid"), "pid", json!({})).await).to_owned()
}

/// The shared backend's pid (a sessionless request on `/mcp` goes there).
async fn shared_pid(gw: &TestGateway) -> String {
    let r = gw.call_tool(None, json!("pid"), "pid", json!({})).await;
    tool_text(&r.json()).to_owned()
}

fn elicitation_answer(id: &Value, who: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"result":{"action":"accept","content":{"who":who}}})
}

/// Session A posts an answer to session B's elicitation on its own `/messages`: refused (400),
/// nothing reaches either stream, and B's backend, still waiting, gets B's real answer.
#[tokio::test]
async fn an_sse_session_cannot_answer_another_sessions_server_request() {
    let gw = TestGateway::start(PER_SESSION).await;
    let (mut a, mut b) = (isolated(&gw).await, isolated(&gw).await);
    let (pa, pb, shared) = (
        pid_of(&mut a).await,
        pid_of(&mut b).await,
        shared_pid(&gw).await,
    );
    assert!(
        pa != pb && pa != shared && pb != shared,
        "{pa} {pb} {shared}"
    );

    b.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"trigger","arguments":{"kind":"elicitation"}}}))
        .await;
    let q = b.next().await;
    assert_eq!(q["method"], "elicitation/create", "{q}");
    assert!(
        q["id"].as_str().is_some_and(|k| k.starts_with("sbs-")),
        "re-keyed by the gateway: {q}"
    );
    let (status, text) = a
        .post_raw(elicitation_answer(&q["id"], "forged-by-a").to_string())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let refused = json_body(&text);
    assert_eq!(refused["error"]["code"], -32600, "{text}");
    assert!(refused.get("id").is_none(), "{text}");
    a.sentinel().await;

    b.send(&elicitation_answer(&q["id"], "b")).await;
    let done = b.next().await;
    assert_eq!(done["id"], 1, "{done}");
    let report: Value = serde_json::from_str(tool_text(&done)).unwrap();
    assert_eq!(
        report["answer"]["result"]["content"]["who"], "b",
        "{report}"
    );
    // Answered once: a second answer names nothing.
    let (status, _) = b
        .post_raw(elicitation_answer(&q["id"], "again").to_string())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    b.sentinel().await;
}

/// Before its `initialize` a session has no process: requests are refused on its stream
/// (only `ping` is answered), notifications go nowhere; a second `initialize` is refused.
#[tokio::test]
async fn before_initialize_only_ping_is_answered_and_initialize_happens_once() {
    let gw = TestGateway::start(PER_SESSION).await;
    let mut c = SseClient::connect(&gw).await;
    let early = c.call(json!(1), "pid", json!({})).await;
    assert_eq!(early["id"], 1, "{early}");
    assert_eq!(early["error"]["code"], -32600, "{early}");
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"}))
        .await;
    let pong = c
        .request(&json!({"jsonrpc":"2.0","id":"p","method":"ping"}))
        .await;
    assert_eq!(
        (pong["id"].clone(), pong["result"].clone()),
        (json!("p"), json!({}))
    );

    let init = c.request(&initialize(json!("i1"))).await;
    assert_eq!(init["id"], "i1", "{init}");
    assert!(init["result"]["capabilities"].is_object(), "{init}");
    let (status, text) = c.post_raw(initialize(json!("i2")).to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let again = json_body(&text);
    assert_eq!(
        (again["error"]["code"].clone(), again["id"].clone()),
        (json!(-32600), json!("i2"))
    );
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    assert_ne!(pid_of(&mut c).await, shared_pid(&gw).await);
    c.sentinel().await;
}

/// When the session's process dies, the session ends with it: its stream closes at once and
/// its id is unknown (404).
#[tokio::test]
async fn a_dead_backend_ends_the_sse_session_and_its_stream() {
    let gw = TestGateway::start(PER_SESSION).await;
    let mut a = isolated(&gw).await;
    let mut kept = isolated(&gw).await;
    let pid = pid_of(&mut a).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(a.ends().await, "the stream outlived its backend");
    let (status, _) = a
        .post_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let r = kept.call(json!(2), "echo", json!({"text":"still"})).await;
    assert_eq!(tool_text(&r), "still");
}

/// The Python SDK's `sse_client`, two clients side by side: each one's sampling, elicitation
/// and roots callbacks answer its own fixture calls, its log callback gets exactly the
/// messages its own `logging/setLevel` allows, and each has its own process.
#[tokio::test]
async fn python_sdk_sse_clients_get_sampling_elicitation_roots_and_logging() {
    let gw = TestGateway::start(PER_SESSION).await;
    let shared = shared_pid(&gw).await;
    let v = python_sse_client(&gw, "py_sse_isolated.py").await;
    for name in ["a", "b"] {
        let (c, seen) = (&v[name], &v[name]["seen"]);
        assert_eq!(seen["sampling"], json!([format!("{name}-prompt")]), "{v}");
        assert_eq!(c["sampled"], format!("LLM response: {name}-sampled"), "{v}");
        assert_eq!(
            seen["elicitation"],
            json!([format!("{name}-question")]),
            "{v}"
        );
        let elicited = c["elicited"].as_str().unwrap();
        assert!(
            elicited.contains("action=accept")
                && elicited.contains(&format!("\"email\":\"{name}@example.com\"")),
            "{v}"
        );
        assert_eq!(seen["roots"], 1, "{v}");
        assert_eq!(c["roots"], format!("Client roots: file:///{name}"), "{v}");
        assert_eq!(c["logged"], "Logging tool executed", "{v}");
    }
    assert_eq!(
        v["a"]["seen"]["logs"],
        json!([["warning", "warning message"]]),
        "a asked for warning and above: {v}"
    );
    assert_eq!(
        v["b"]["seen"]["logs"],
        json!([
            ["debug", "debug message"],
            ["info", "info message"],
            ["warning", "warning message"]
        ]),
        "b asked for everything: {v}"
    );
    let pids = [
        v["a"]["pid"].as_str().unwrap(),
        v["b"]["pid"].as_str().unwrap(),
    ];
    assert!(
        pids[0] != pids[1] && !pids.contains(&shared.as_str()),
        "{v}"
    );
    eventually("both sessions and their processes to end", || async {
        let s = stats(&gw).await;
        s["sessions"] == 0 && s["tableEntries"] == 0 && !pids.iter().any(|p| process_running(p))
    })
    .await;
}
