//! Test harness: start the gateway, talk raw HTTP to it.

use std::process::Stdio;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub use crate::stdout_log::StdoutLog;

/// The third-party server the real-server tests run, pinned (a new release may change what
/// its lists hold); `scripts/conformance.sh` pins the same version.
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

pub const BOTH: &str = "application/json, text/event-stream";

/// A running `switchboard run` process. Killed on drop.
pub struct TestGateway {
    /// Held so the process lives as long as the test (kill_on_drop).
    _child: Child,
    pub url: String,
    pub http: reqwest::Client,
    /// Everything the gateway wrote to stderr so far (its logs).
    pub stderr: std::sync::Arc<parking_lot::Mutex<String>>,
    /// What it printed on stdout before its listening line.
    pub startup: Vec<String>,
    /// What it printed on stdout after its listening line (see [`TestGateway::wait_stdout`]).
    pub stdout: std::sync::Arc<StdoutLog>,
    /// True once stderr reached its end (the process exited): `stderr` is then complete.
    pub stderr_done: tokio::sync::watch::Receiver<bool>,
}

impl TestGateway {
    /// `switchboard run --port 0 <args>` in front of the built-in fixture.
    pub async fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[]).await
    }

    /// Same, fronting `backend` (empty: the built-in fixture).
    pub async fn start_with(args: &[&str], backend: &[&str]) -> Self {
        Self::start_env(args, backend, &[]).await
    }

    /// Same, with extra environment variables for the gateway.
    pub async fn start_env(args: &[&str], backend: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        cmd.envs(env.iter().copied());
        cmd.args(["run", "--host", "127.0.0.1", "--port", "0"])
            .args(args);
        if !backend.is_empty() {
            cmd.arg("--").args(backend);
        }
        Self::spawn(cmd).await
    }

    /// `switchboard run --port 0 <args>` with its open-file limit (soft and hard) lowered to
    /// `nofile`, set by the shell that then execs the gateway.
    pub async fn start_nofile(nofile: u32, args: &[&str]) -> Self {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {nofile} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_switchboard"))
            .args(["run", "--host", "127.0.0.1", "--port", "0"])
            .args(args);
        Self::spawn(cmd).await
    }

    /// Any `switchboard` command line that ends up listening (`serve --config …`).
    pub async fn start_command(cmd: Command) -> Self {
        Self::spawn(cmd).await
    }

    /// Sends SIGTERM and waits (at most `bound`) for the gateway to exit; false if it did not.
    pub async fn terminate_within(&mut self, bound: Duration) -> bool {
        let pid = self.pid().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(status.success());
        tokio::time::timeout(bound, self._child.wait())
            .await
            .is_ok()
    }

    async fn spawn(mut cmd: Command) -> Self {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn switchboard");
        let stdout = child.stdout.take().unwrap();
        let stderr = std::sync::Arc::new(parking_lot::Mutex::new(String::new()));
        let mut err_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = stderr.clone();
        let (eof, stderr_done) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                let mut s = sink.lock();
                // Bounded: a chatty gateway cannot grow the test's memory without limit.
                if s.len() < 4 * 1024 * 1024 {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
            let _ = eof.send(true);
        });
        let mut lines = BufReader::new(stdout).lines();
        let mut startup = Vec::new();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.strip_prefix("switchboard: listening on ") {
                    return url.trim().to_owned();
                }
                startup.push(line);
            }
            panic!("switchboard exited before listening");
        })
        .await
        .expect("switchboard did not start within 60s");
        // Keep draining stdout so the gateway never blocks on a full pipe; kept for waiters.
        let stdout = std::sync::Arc::new(StdoutLog::default());
        let log = stdout.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                log.push(line);
            }
            log.close();
        });
        TestGateway {
            _child: child,
            stderr,
            stderr_done,
            startup,
            stdout,
            url,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .unwrap(),
        }
    }

    /// Waits (at most `bound`) for the next stdout line starting with `prefix` that no
    /// earlier call took, and takes it. Panics (with what it printed) if none comes.
    pub async fn wait_stdout(&self, prefix: &str, bound: Duration) -> String {
        match self.stdout.wait(prefix, bound).await {
            Some(line) => line,
            None => panic!(
                "no stdout line starting with {prefix:?} within {bound:?}\nstdout: {:#?}\nstderr:\n{}",
                self.stdout.lines(),
                self.stderr.lock()
            ),
        }
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self._child.id().expect("gateway running")
    }

    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// POSTs `body` with the standard headers plus `extra`.
    pub async fn post_raw(
        &self,
        session: Option<&str>,
        body: impl Into<reqwest::Body>,
        extra: &[(&str, &str)],
    ) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static(BOTH));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = session {
            headers.insert("mcp-session-id", HeaderValue::from_str(s).unwrap());
        }
        for (k, v) in extra {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let resp = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .unwrap();
        Reply::read(resp).await
    }

    pub async fn post(&self, session: Option<&str>, body: &Value) -> Reply {
        self.post_raw(session, body.to_string(), &[]).await
    }

    /// Opens a Legacy session and completes the handshake.
    pub async fn session(&self) -> String {
        self.session_with_version("2025-11-25").await.0
    }

    pub async fn session_with_version(&self, version: &str) -> (String, Value) {
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"it","version":"0"}}});
        let reply = self.post(None, &init).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let sid = reply
            .headers
            .get("mcp-session-id")
            .expect("session header")
            .to_str()
            .unwrap()
            .to_owned();
        let done = self
            .post(
                Some(&sid),
                &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            )
            .await;
        assert_eq!(done.status, StatusCode::ACCEPTED);
        (sid, reply.json())
    }

    /// Calls a tool and returns the whole JSON-RPC response.
    pub async fn call_tool(
        &self,
        session: Option<&str>,
        id: Value,
        name: &str,
        args: Value,
    ) -> Reply {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}});
        self.post(session, &body).await
    }
}

/// A buffered HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    async fn read(resp: reqwest::Response) -> Self {
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        Reply {
            status,
            headers,
            text,
        }
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    /// The one JSON-RPC message in the body (JSON, or the data of SSE `message` events).
    pub fn json(&self) -> Value {
        let msgs = self.messages();
        assert_eq!(
            msgs.len(),
            1,
            "expected exactly one message in {:?}",
            self.text
        );
        msgs.into_iter().next().unwrap()
    }

    /// Every JSON-RPC message in the body, in order.
    pub fn messages(&self) -> Vec<Value> {
        if self.content_type().starts_with("text/event-stream") {
            sse_data(&self.text)
                .iter()
                .map(|d| serde_json::from_str(d).unwrap())
                .collect()
        } else {
            vec![serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {:?}", self.text))]
        }
    }

    /// The JSON-RPC error code.
    pub fn error_code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error in {}", self.text))
    }
}

/// The `data:` payloads of the `message` events in an SSE body (comments skipped).
pub fn sse_data(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in text.replace("\r\n", "\n").split("\n\n") {
        let mut event = "message";
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = e.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if event == "message" && !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

/// The text of the first content block of a tool result.
pub fn tool_text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
}

/// A `switchboard run` in front of the scriptable Python backend (`backends/pushy.py`).
pub async fn pushy(args: &[&str]) -> TestGateway {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/pushy.py"
    );
    TestGateway::start_with(args, &["python3", script]).await
}

/// One event of a listen stream.
#[derive(Debug)]
pub struct Event {
    pub id: Option<String>,
    pub data: Value,
}

/// An open GET listen stream.
pub struct Listener {
    events: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
    >,
}

impl Listener {
    /// Opens the session's listen stream (resuming after `last_event_id` if given).
    pub async fn open(gw: &TestGateway, session: &str, last_event_id: Option<&str>) -> Self {
        let mut req = gw
            .http
            .get(&gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session);
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        Self::from_request(req).await
    }

    /// Opens the session's listen stream with extra request headers (credentials).
    pub async fn open_with(gw: &TestGateway, session: &str, extra: &[(&str, &str)]) -> Self {
        let mut req = gw
            .http
            .get(&gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session);
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        Self::from_request(req).await
    }

    /// POSTs `body` in `session` asking for an event stream, and follows that request's own
    /// stream (its progress, then its answer).
    pub async fn post(gw: &TestGateway, session: &str, body: &Value) -> Self {
        let req = gw
            .http
            .post(&gw.url)
            .header("accept", "text/event-stream, application/json;q=0.5")
            .header("content-type", "application/json")
            .header("mcp-session-id", session)
            .body(body.to_string());
        Self::from_request(req).await
    }

    async fn from_request(req: reqwest::RequestBuilder) -> Self {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        Listener {
            events: Box::pin(sse_stream::SseStream::from_bytes_stream(
                resp.bytes_stream(),
            )),
        }
    }

    /// The next message event (comments skipped). Panics after 10 s: every caller expects an
    /// event because it sent a sentinel.
    pub async fn next(&mut self) -> Event {
        use futures::StreamExt;
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let sse = self
                    .events
                    .next()
                    .await
                    .expect("stream ended")
                    .expect("sse error");
                if let Some(data) = sse.data.filter(|d| !d.is_empty()) {
                    return Event {
                        id: sse.id,
                        data: serde_json::from_str(&data).unwrap(),
                    };
                }
            }
        })
        .await
        .expect("no event within 10s")
    }

    /// Whether the stream ends (server closed it) within 10 s, skipping any events.
    pub async fn ends(&mut self) -> bool {
        use futures::StreamExt;
        tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(item) = self.events.next().await {
                if item.is_err() {
                    break;
                }
            }
        })
        .await
        .is_ok()
    }
}

/// The gateway's table sizes (`GET /stats`), on a gateway without authentication.
pub async fn stats(gw: &TestGateway) -> Value {
    stats_as(gw, None).await
}

/// The same as the holder of `key` (`/stats` is behind `/mcp`'s authentication).
pub async fn stats_as(gw: &TestGateway, key: Option<&str>) -> Value {
    let mut get = gw.http.get(format!("{}/stats", gw.base()));
    if let Some(key) = key {
        get = get.bearer_auth(key);
    }
    let r = get.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "GET /stats: {text}");
    serde_json::from_str(&text).unwrap()
}

/// What the pushy backend saw.
pub async fn backend_stats(gw: &TestGateway, session: &str) -> Value {
    let r = gw
        .call_tool(Some(session), json!("stats"), "stats", json!({}))
        .await;
    serde_json::from_str(tool_text(&r.json())).unwrap()
}

/// Makes the pushy backend write `lines` as its own messages.
pub async fn emit(gw: &TestGateway, session: &str, lines: Value) {
    let r = gw
        .call_tool(
            Some(session),
            json!("emit"),
            "emit",
            json!({ "lines": lines }),
        )
        .await;
    assert_eq!(tool_text(&r.json()), "emitted");
}

/// rmcp's client in Legacy (`initialize`) and in Modern (`server/discover`) mode, each listing
/// tools and calling `echo`. `echo_arg` names the echo tool's text argument and `expect` maps
/// the text sent to the text the server answers.
pub async fn rmcp_both_eras(
    url: &str,
    context: &str,
    echo_arg: &str,
    expect: impl Fn(&str) -> String,
) {
    use rmcp::model::{CallToolRequestParams, ProtocolVersion};
    use rmcp::service::ClientLifecycleMode;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ClientServiceExt;
    for lifecycle in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let label = format!("{context}, {lifecycle:?}");
        let client = ()
            .serve_with_lifecycle(
                StreamableHttpClientTransport::from_uri(url.to_owned()),
                lifecycle,
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let tools = client
            .list_all_tools()
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(tools.iter().any(|t| t.name == "echo"), "{label}");
        let mut args = serde_json::Map::new();
        args.insert(echo_arg.to_owned(), json!(label));
        let r = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(
            r.content[0].as_text().unwrap().text,
            expect(&label),
            "{label}"
        );
        client.cancel().await.unwrap();
    }
}

/// Whether a process exists and is not a zombie (a killed child nobody reaped yet counts as
/// gone).
pub fn process_running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.split(") ")
                .nth(1)
                .is_some_and(|rest| rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Waits (bounded, probes spaced by `spacing`) until `session` is gone: a notification to it
/// answers 404. A probe refreshes the session's TTL, so `spacing` must exceed what the test
/// expects the session to live without traffic.
pub async fn until_session_gone(gw: &TestGateway, session: &str, spacing: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = gw
            .post(
                Some(session),
                &json!({"jsonrpc":"2.0","method":"notifications/x"}),
            )
            .await;
        if r.status == StatusCode::NOT_FOUND {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(spacing).await;
    }
}
