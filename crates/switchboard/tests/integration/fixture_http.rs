//! `switchboard fixture --http`, with no gateway: raw HTTP against the fixture as a remote MCP
//! server (Streamable HTTP in both eras, and HTTP+SSE). Other modules use [`FixtureHttp`] to
//! start a remote fixture.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::{sse_data, BOTH};

/// What a running fixture announced on stdout after its listening line.
#[derive(Debug, Clone, Default)]
pub struct Announced {
    /// `(session id, instance id)` of every Streamable HTTP session it opened, in order.
    pub opened: Vec<(String, String)>,
    /// `(session id, instance id)` of every HTTP+SSE session it opened.
    pub sse_opened: Vec<(String, String)>,
    /// Sessions ended by DELETE or expiry.
    pub closed: Vec<String>,
}

impl Announced {
    /// The fixture session whose instance answered `instance` with this id.
    pub fn session_of(&self, instance: &str) -> Option<&str> {
        self.opened
            .iter()
            .chain(&self.sse_opened)
            .find(|(_, i)| i == instance)
            .map(|(s, _)| s.as_str())
    }

    fn record(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("switchboard fixture: ") else {
            return;
        };
        let pair = |r: &str| {
            let (session, instance) = r.split_once(" instance ")?;
            Some((session.to_owned(), instance.to_owned()))
        };
        if let Some(p) = rest.strip_prefix("session opened ").and_then(pair) {
            self.opened.push(p);
        } else if let Some(p) = rest.strip_prefix("sse session opened ").and_then(pair) {
            self.sse_opened.push(p);
        } else if let Some(id) = rest
            .strip_prefix("session closed ")
            .or_else(|| rest.strip_prefix("session expired "))
        {
            self.closed.push(id.to_owned());
        }
    }
}

/// A running `switchboard fixture --http --port 0`. Killed on drop.
pub struct FixtureHttp {
    child: Child,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    pub http: reqwest::Client,
    /// Updated as the fixture announces sessions (its stdout is drained for as long as it runs).
    announced: tokio::sync::watch::Receiver<Announced>,
}

impl FixtureHttp {
    pub async fn start(args: &[&str]) -> Self {
        Self::start_at(0, args).await
    }

    /// On a given port (a restart on the port of a stopped fixture: every session is gone).
    pub async fn start_at(port: u16, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["fixture", "--http", "--port", &port.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn switchboard fixture --http");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.strip_prefix("switchboard fixture: listening on ") {
                    return url.trim().to_owned();
                }
            }
            panic!("fixture exited before listening");
        })
        .await
        .expect("fixture did not start within 60s");
        let (tx, announced) = tokio::sync::watch::channel(Announced::default());
        // Ends when the fixture's stdout does (it exited); a full pipe would block the fixture.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tx.send_modify(|a| a.record(&line));
            }
        });
        FixtureHttp {
            child,
            url,
            http: reqwest::Client::new(),
            announced,
        }
    }

    /// The fixture's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("fixture running")
    }

    /// What the fixture has announced so far.
    pub fn announced(&self) -> Announced {
        self.announced.borrow().clone()
    }

    /// Waits (at most 10 s, else panics with `what`) until the announcements satisfy `ready`.
    pub async fn announced_when(
        &self,
        what: &str,
        ready: impl FnMut(&Announced) -> bool,
    ) -> Announced {
        let mut rx = self.announced.clone();
        let seen = match tokio::time::timeout(Duration::from_secs(10), rx.wait_for(ready)).await {
            Ok(Ok(seen)) => seen.clone(),
            Ok(Err(_)) => panic!("fixture stdout reader gone before announcing {what}"),
            Err(_) => panic!("fixture never announced {what}: {:?}", self.announced()),
        };
        seen
    }

    /// Sends SIGKILL (no chance to answer anything) and reaps it.
    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches("/mcp")
            .parse()
            .unwrap()
    }

    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// POST `body` to /mcp with the standard headers, the session (if any) and `extra`.
    pub async fn post(
        &self,
        session: Option<&str>,
        body: &Value,
        extra: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", BOTH)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// A Legacy session, handshaken with `capabilities`; returns its id.
    pub async fn session(&self, capabilities: Value) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "fixture-http-test", "version": "1"}}});
        let resp = self.post(None, &init, &[]).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let resp = self.post(Some(&id), &initialized, &[]).await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        id
    }

    /// SIGTERM, then the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().unwrap().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("fixture did not exit within 10s of SIGTERM")
            .unwrap()
    }
}

/// The messages of a buffered answer, JSON or SSE.
async fn messages(resp: reqwest::Response) -> Vec<Value> {
    let sse = resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream");
    let text = resp.text().await.unwrap();
    if sse {
        sse_data(&text)
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    } else {
        vec![serde_json::from_str(&text).unwrap()]
    }
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

#[tokio::test]
async fn legacy_session_lives_until_delete_then_is_unknown() {
    let fx = FixtureHttp::start(&[]).await;
    let session = fx.session(json!({})).await;
    assert_eq!(session.len(), 32, "128-bit hex id: {session}");
    assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));

    let resp = fx
        .post(Some(&session), &call(7, "echo", json!({"text": "hi"})), &[])
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let answer = messages(resp).await.pop().unwrap();
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["structuredContent"]["text"], "hi");

    // Without the header: 400, and an id the server never minted: 404.
    let ping = json!({"jsonrpc": "2.0", "id": 8, "method": "ping"});
    assert_eq!(
        fx.post(None, &ping, &[]).await.status(),
        StatusCode::BAD_REQUEST
    );
    let other = "0".repeat(32);
    assert_eq!(
        fx.post(Some(&other), &ping, &[]).await.status(),
        StatusCode::NOT_FOUND
    );

    let deleted = fx
        .http
        .delete(&fx.url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    let reused = fx.post(Some(&session), &ping, &[]).await;
    assert_eq!(reused.status(), StatusCode::NOT_FOUND);
    let body: Value = reused.json().await.unwrap();
    assert_eq!(body["id"], 8, "the readable id is echoed");
    let listen = fx
        .http
        .get(&fx.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(listen.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn sessions_are_separate_fixture_instances() {
    // What one session triggers reaches only its own listen stream: B's prompts list_changed
    // must not reach A, whose first event is therefore A's own tools list_changed (the
    // sentinel, triggered after B's had already been routed).
    let fx = FixtureHttp::start(&[]).await;
    let a = fx.session(json!({})).await;
    let b = fx.session(json!({})).await;
    assert_ne!(a, b);
    let listen = fx
        .http
        .get(&fx.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    assert_eq!(listen.status(), StatusCode::OK);
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        listen.bytes_stream(),
    ));
    let trigger = |id, kind| call(id, "trigger", json!({"kind": kind}));
    let resp = fx
        .post(Some(&b), &trigger(1, "prompts_list_changed"), &[])
        .await;
    assert_eq!(messages(resp).await.pop().unwrap()["id"], 1);
    let resp = fx
        .post(Some(&a), &trigger(2, "tools_list_changed"), &[])
        .await;
    assert_eq!(messages(resp).await.pop().unwrap()["id"], 2);
    let first = loop {
        let sse = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10s")
            .expect("stream open")
            .expect("valid sse");
        if let Some(data) = sse.data.filter(|d| !d.is_empty()) {
            break serde_json::from_str::<Value>(&data).unwrap();
        }
    };
    assert_eq!(first["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn server_request_travels_on_the_request_stream_and_its_answer_is_posted_back() {
    let fx = FixtureHttp::start(&[]).await;
    let session = fx.session(json!({"sampling": {}})).await;
    let resp = fx
        .post(
            Some(&session),
            &call(5, "test_sampling", json!({"prompt": "p"})),
            &[],
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let mut next = async || -> Value {
        loop {
            let sse = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("an event within 10s")
                .expect("stream open")
                .expect("valid sse");
            if let Some(data) = sse.data.filter(|d| !d.is_empty()) {
                return serde_json::from_str(&data).unwrap();
            }
        }
    };
    let request = next().await;
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "model": "m", "content": {"type": "text", "text": "sampled-42"}}});
    assert_eq!(
        fx.post(Some(&session), &answer, &[]).await.status(),
        StatusCode::ACCEPTED
    );
    let result = next().await;
    assert_eq!(result["id"], 5);
    assert!(result.to_string().contains("sampled-42"), "{result}");
}

fn modern_call(name: &str, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
}

#[tokio::test]
async fn modern_requests_are_stateless_and_their_headers_are_checked() {
    let fx = FixtureHttp::start(&[]).await;
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    // A session id is ignored (no session exists at all), and no session id is minted.
    let resp = fx
        .post(Some("not-a-session"), &modern_call("echo", "m"), &headers)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("mcp-session-id").is_none());
    let answer = messages(resp).await.pop().unwrap();
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["resultType"], "complete");
    assert_eq!(answer["result"]["structuredContent"]["text"], "m");

    let wrong_name = [headers[0], headers[1], ("mcp-name", "pid")];
    let resp = fx.post(None, &modern_call("echo", "m"), &wrong_name).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32020);
    assert_eq!(body["id"], 1);

    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let ping_headers = [headers[0], ("mcp-method", "ping")];
    let resp = fx.post(None, &ping, &ping_headers).await;
    assert_eq!(
        resp.status(),
        StatusCode::NOT_FOUND,
        "ping was removed in 2026-07-28"
    );
}

#[tokio::test]
async fn http_sse_round_trip() {
    let fx = FixtureHttp::start(&[]).await;
    let resp = fx
        .http
        .get(format!("{}/sse", fx.base()))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let mut next = async || loop {
        let sse = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10s")
            .expect("stream open")
            .expect("valid sse");
        if sse.data.as_deref().is_some_and(|d| !d.is_empty()) {
            return sse;
        }
    };
    let endpoint = next().await;
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"));
    let path = endpoint.data.unwrap();
    assert!(path.starts_with("/messages?session_id="), "{path}");
    let post = |body: Value| {
        fx.http
            .post(format!("{}{path}", fx.base()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let init = json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    assert_eq!(post(init).await.unwrap().status(), StatusCode::ACCEPTED);
    let answer: Value = serde_json::from_str(&next().await.data.unwrap()).unwrap();
    assert_eq!(answer["id"], "i");
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    let echo = call(9, "echo", json!({"text": "over sse"}));
    assert_eq!(post(echo).await.unwrap().status(), StatusCode::ACCEPTED);
    let answer: Value = serde_json::from_str(&next().await.data.unwrap()).unwrap();
    assert_eq!(answer["id"], 9);
    assert_eq!(answer["result"]["structuredContent"]["text"], "over sse");

    // An HTTP+SSE session id means nothing on /mcp.
    let session = path.trim_start_matches("/messages?session_id=");
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(
        fx.post(Some(session), &ping, &[]).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn sigterm_stops_it_with_streams_open() {
    let mut fx = FixtureHttp::start(&[]).await;
    let session = fx.session(json!({})).await;
    let listen = fx
        .http
        .get(&fx.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(listen.status(), StatusCode::OK);
    assert!(fx.terminate().await.success());
}

#[tokio::test]
async fn each_session_is_an_instance_it_announces_and_modern_requests_share_one() {
    let fx = FixtureHttp::start(&[]).await;
    let a = fx.session(json!({})).await;
    let b = fx.session(json!({})).await;
    let instance = async |session: Option<&str>, body: Value, extra: &[(&str, &str)]| {
        let resp = fx.post(session, &body, extra).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let answer = messages(resp).await.pop().unwrap();
        let id = answer["result"]["structuredContent"]["instance"]
            .as_str()
            .unwrap_or_else(|| panic!("no instance in {answer}"))
            .to_owned();
        assert_eq!(answer["result"]["content"][0]["text"], id.as_str());
        id
    };
    let of_a = instance(Some(&a), call(1, "instance", json!({})), &[]).await;
    assert_eq!(
        instance(Some(&a), call(2, "instance", json!({})), &[]).await,
        of_a,
        "stable within the session"
    );
    let of_b = instance(Some(&b), call(1, "instance", json!({})), &[]).await;
    assert_ne!(of_a, of_b);
    let seen = fx
        .announced_when("both sessions", |s| s.opened.len() == 2)
        .await;
    assert_eq!(seen.session_of(&of_a), Some(a.as_str()));
    assert_eq!(seen.session_of(&of_b), Some(b.as_str()));

    let modern = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "instance", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "instance"),
    ];
    let shared = instance(None, modern.clone(), &headers).await;
    assert_eq!(instance(None, modern, &headers).await, shared);
    assert!(shared != of_a && shared != of_b, "{shared}");

    let deleted = fx
        .http
        .delete(&fx.url)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::OK);
    fx.announced_when("the DELETE", |s| s.closed == [a.clone()])
        .await;
}

/// Threads of process `pid` (Linux: its `/proc/PID/task` entries).
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

/// `--threads 4` serves on a multi-threaded runtime (four workers besides the main thread)
/// and answers concurrent requests, each its own; without it the fixture is one thread.
#[tokio::test]
async fn threads_serve_concurrent_requests_on_that_many_workers() {
    let single = FixtureHttp::start(&[]).await;
    assert_eq!(threads_of(single.pid()), 1, "one thread by default");
    drop(single);
    let fx = FixtureHttp::start(&["--threads", "4"]).await;
    assert!(
        threads_of(fx.pid()) >= 5,
        "main + 4 workers: {}",
        threads_of(fx.pid())
    );
    let session = fx.session(json!({})).await;
    let calls = (0..64u64).map(|i| {
        let fx = &fx;
        let session = &session;
        async move {
            let body = call(i, "echo", json!({"text": format!("n{i}"), "delayMs": 20}));
            let resp = fx.post(Some(session), &body, &[]).await;
            assert_eq!(resp.status(), StatusCode::OK);
            let answer = messages(resp).await.pop().unwrap();
            assert_eq!(answer["id"], i);
            assert_eq!(
                answer["result"]["structuredContent"]["text"],
                format!("n{i}")
            );
        }
    });
    futures::future::join_all(calls).await;
}

/// `--threads` takes 1 to 1024 and only with `--http`; anything else is refused before
/// anything starts, naming the flag.
#[tokio::test]
async fn bad_thread_counts_are_refused() {
    for (args, want) in [
        (&["--http", "--threads", "0"][..], "--threads"),
        (&["--http", "--threads", "many"][..], "--threads"),
        (&["--http", "--threads", "1025"][..], "--threads"),
        (&["--threads", "2"][..], "--http"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .arg("fixture")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing served");
    }
}
