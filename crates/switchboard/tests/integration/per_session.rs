//! `--isolation per-session`: a backend process per session, server-initiated requests routed
//! to their session and answered back to the process that asked.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{stats, tool_text, Listener, TestGateway, BOTH};

pub(crate) type Events =
    Pin<Box<dyn Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>;

/// POSTs a request and returns its open SSE response stream.
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
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ))
}

pub(crate) async fn next(events: &mut Events) -> Value {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("no event within 10s")
            .expect("stream ended")
            .expect("sse error");
        if let Some(d) = e.data.filter(|d| !d.is_empty()) {
            return serde_json::from_str(&d).unwrap();
        }
    }
}

pub(crate) fn elicit() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger","arguments":{"kind":"elicitation"}}})
}

pub(crate) async fn client_session(gw: &TestGateway) -> String {
    // Declares elicitation so the backend may ask.
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"it","version":"0"}}});
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    gw.post(
        Some(&sid),
        &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    )
    .await;
    sid
}

#[tokio::test]
async fn concurrent_elicitations_reach_their_own_session_and_answers_their_own_backend() {
    let gw = TestGateway::start(&["--isolation", "per-session"]).await;
    let (a, b) = (client_session(&gw).await, client_session(&gw).await);
    let (mut sa, mut sb) = tokio::join!(open_call(&gw, &a, elicit()), open_call(&gw, &b, elicit()));
    let (qa, qb) = tokio::join!(next(&mut sa), next(&mut sb));
    for q in [&qa, &qb] {
        assert_eq!(q["method"], "elicitation/create", "{q}");
        assert!(
            q["id"].as_str().is_some_and(|k| k.starts_with("sbs-")),
            "re-keyed by the gateway: {q}"
        );
    }
    assert_ne!(qa["id"], qb["id"]);
    let answer = |id: &Value, who: &str| json!({"jsonrpc":"2.0","id":id,"result":{"action":"accept","content":{"who":who}}});
    // B answering A's request is refused and changes nothing.
    let r = gw.post(Some(&b), &answer(&qa["id"], "forged-by-b")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    // Each answers its own.
    assert_eq!(
        gw.post(Some(&a), &answer(&qa["id"], "a")).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        gw.post(Some(&b), &answer(&qb["id"], "b")).await.status,
        StatusCode::ACCEPTED
    );
    for (stream, who) in [(&mut sa, "a"), (&mut sb, "b")] {
        let done = next(stream).await;
        assert_eq!(done["id"], 1);
        let report: Value = serde_json::from_str(tool_text(&done)).unwrap();
        assert_eq!(
            report["answer"]["result"]["content"]["who"], who,
            "{report}"
        );
    }
    // A second answer to an already-answered request is refused too.
    let r = gw.post(Some(&a), &answer(&qa["id"], "again")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn sessions_have_their_own_processes_and_leave_none_behind() {
    let gw = TestGateway::start(&["--isolation", "per-session", "--max-sessions", "300"]).await;
    let pids = futures::future::join_all((0..200).map(|_| async {
        let sid = client_session(&gw).await;
        let pid = tool_text(
            &gw.call_tool(Some(&sid), json!(1), "pid", json!({}))
                .await
                .json(),
        )
        .to_owned();
        (sid, pid)
    }))
    .await;
    let distinct: std::collections::HashSet<&String> = pids.iter().map(|(_, p)| p).collect();
    assert_eq!(distinct.len(), 200, "one process per session");
    let gw_ref = &gw;
    futures::future::join_all(pids.iter().map(|(sid, _)| async move {
        let gw = gw_ref;
        let r = gw
            .http
            .delete(&gw.url)
            .header("mcp-session-id", sid)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }))
    .await;
    // DELETE waits for its process to stop: by now none of them exists.
    for (_, pid) in &pids {
        assert!(
            !crate::common::process_running(pid),
            "backend {pid} survived its session"
        );
    }
    let s = stats(&gw).await;
    assert_eq!(
        (s["sessions"].as_u64(), s["tableEntries"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
}

/// SIGKILLs the session's own backend process (it names its pid through the `pid` tool).
async fn kill_backend_of(gw: &TestGateway, session: &str) {
    let answer = gw
        .call_tool(Some(session), json!("pid"), "pid", json!({}))
        .await
        .json();
    let pid = tool_text(&answer).to_owned();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
}

#[tokio::test]
async fn a_session_whose_backend_dies_ends_and_a_new_one_works() {
    let gw = TestGateway::start(&["--isolation", "per-session"]).await;
    let a = client_session(&gw).await;
    let other = client_session(&gw).await;
    kill_backend_of(&gw, &a).await;
    // Bounded wait for the death to be noticed; then the session is gone (404, so a client
    // re-initializes), and other sessions never noticed anything.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = gw
            .call_tool(Some(&a), json!(2), "echo", json!({"text":"x"}))
            .await;
        if r.status == StatusCode::NOT_FOUND {
            assert_eq!(r.error_code(), -32001);
            break;
        }
        // Until the next request notices, a request fails with an error, never silence.
        assert!(r.json()["error"].is_object(), "{}", r.text);
        assert!(tokio::time::Instant::now() < deadline, "{}", r.text);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = gw
        .call_tool(Some(&other), json!(3), "echo", json!({"text":"fine"}))
        .await;
    assert_eq!(tool_text(&r.json()), "fine");
    let again = client_session(&gw).await;
    let r = gw
        .call_tool(Some(&again), json!(4), "echo", json!({"text":"new"}))
        .await;
    assert_eq!(tool_text(&r.json()), "new");
}

/// The session ends when its process does, not at its next request: its open listen stream
/// ends at once, with no request sent, and the session is then unknown (404).
#[tokio::test]
async fn a_dead_backend_ends_its_session_and_listen_stream_at_once() {
    let gw = TestGateway::start(&["--isolation", "per-session"]).await;
    let a = client_session(&gw).await;
    let mut listen = Listener::open(&gw, &a, None).await;
    kill_backend_of(&gw, &a).await;
    assert!(
        listen.ends().await,
        "the listen stream outlived its backend"
    );
    let r = gw
        .call_tool(Some(&a), json!(2), "echo", json!({"text":"x"}))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

#[tokio::test]
async fn losing_the_listen_stream_past_the_grace_reaps_the_session_and_its_process() {
    let gw = TestGateway::start(&["--isolation", "per-session", "--listen-grace", "0.3"]).await;
    let a = client_session(&gw).await;
    let kept = client_session(&gw).await;
    let pid = tool_text(
        &gw.call_tool(Some(&a), json!(1), "pid", json!({}))
            .await
            .json(),
    )
    .to_owned();
    let listen = crate::common::Listener::open(&gw, &a, None).await;
    let _kept_listen = crate::common::Listener::open(&gw, &kept, None).await;
    drop(listen);
    crate::common::until_session_gone(&gw, &a, Duration::from_millis(100), "session never reaped")
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while crate::common::process_running(&pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A session that keeps its stream stays.
    let r = gw
        .call_tool(Some(&kept), json!(2), "echo", json!({"text":"still"}))
        .await;
    assert_eq!(tool_text(&r.json()), "still");
}

/// A session's process that dies during the client's `initialize` fails that initialize as
/// what it is, a backend failure (502, id echoed), and leaves no session behind; the client
/// never had the session, so the audit log records the failed initialize and no session end.
#[tokio::test]
async fn a_backend_dying_during_initialize_is_a_502_and_leaves_no_session() {
    let dir =
        std::env::temp_dir().join(format!("sb-crash-init-{}-{}", std::process::id(), line!()));
    std::fs::create_dir_all(&dir).unwrap();
    let audit = dir.join("audit.jsonl");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/slow_init.py"
    );
    let backend = ["python3", script, dir.to_str().unwrap()];
    let args = [
        "--isolation",
        "per-session",
        "--audit-log",
        audit.to_str().unwrap(),
    ];
    let gw = TestGateway::start_with(&args, &backend).await;
    let init = |id: &str, name: &str| {
        json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":name,"version":"0"}}})
    };
    let r = gw.post(None, &init("i1", "crash")).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text);
    assert_eq!(r.json()["id"], "i1");
    assert!(r.headers.get("mcp-session-id").is_none());
    assert_eq!(stats(&gw).await["sessions"], 0);
    // A sentinel initialize: once its line is written, every earlier line is too.
    let ok = gw.post(None, &init("i2", "sentinel")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = std::fs::read_to_string(&audit).unwrap_or_default();
        if log.contains("\"sentinel\"") {
            break log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sentinel line: {log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        log.contains("\"crash\""),
        "the failed initialize is audited: {log}"
    );
    assert!(
        !log.contains("session_end"),
        "a session nobody had cannot end: {log}"
    );
}

/// A client that goes away during its `initialize` (while its process is still handshaking)
/// leaves nothing behind: the session is ended at once and the process stopped, rather than
/// both waiting for the TTL.
#[tokio::test]
async fn a_client_leaving_mid_initialize_leaves_no_session_and_no_process() {
    let dir = std::env::temp_dir().join(format!("sb-slow-init-{}-{}", std::process::id(), line!()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/slow_init.py"
    );
    let backend = ["python3", script, dir.to_str().unwrap()];
    let gw = TestGateway::start_with(&["--isolation", "per-session"], &backend).await;
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"0"}}});
    let request = tokio::spawn({
        let (http, url) = (gw.http.clone(), gw.url.clone());
        async move {
            http.post(url)
                .header("accept", BOTH)
                .header("content-type", "application/json")
                .body(init.to_string())
                .send()
                .await
        }
    });
    // Bounded wait until the session's process has the initialize (it names itself in `dir`).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let named = std::fs::read_dir(&dir).unwrap().next();
        if let Some(entry) = named {
            break entry.unwrap().file_name().to_string_lossy().into_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "initialize never reached a process"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(crate::common::process_running(&pid));
    assert_eq!(
        stats(&gw).await["sessions"],
        1,
        "the session exists mid-initialize"
    );
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = stats(&gw).await;
        if s["sessions"] == 0 && s["tableEntries"] == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session left behind: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its stdin closed, the process exits (or is killed after the grace).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while crate::common::process_running(&pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} outlived its abandoned session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 30: a 2026-07-28 client that asks for logs (`_meta` logLevel) gets those of its own
/// call on that request's stream, from a Legacy-only backend in per-session mode (where the
/// call runs on a process of its own), at the level it asked for and above: the fixture's
/// three `info` messages, in order, before the result.
#[tokio::test]
async fn a_modern_call_asking_for_logs_hears_them_on_its_stream() {
    let gw = crate::mrtr::bridge(&[]).await;
    let tool = "test_tool_with_logging";
    let body = |level: &str| {
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":tool,"arguments":{},
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{},
                "io.modelcontextprotocol/logLevel":level}}})
    };
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    let r = gw.post_raw(None, body("info").to_string(), &headers).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let messages = r.messages();
    let logs: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 3, "{}", r.text);
    assert_eq!(
        logs[0]["params"]["data"], "Tool execution started",
        "{}",
        r.text
    );
    assert_eq!(messages.last().unwrap()["id"], 3, "{}", r.text);
    assert!(messages.last().unwrap()["result"].is_object(), "{}", r.text);
    // Above the messages' level: none (the result follows them on the stream).
    let r = gw.post_raw(None, body("error").to_string(), &headers).await;
    let messages = r.messages();
    assert!(messages.last().unwrap()["result"].is_object(), "{}", r.text);
    assert!(
        messages
            .iter()
            .all(|m| m["method"] != "notifications/message"),
        "{}",
        r.text
    );
}
