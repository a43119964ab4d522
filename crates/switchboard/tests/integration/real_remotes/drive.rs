//! The real clients that drive a remote (through the gateway): rmcp's client in either era, and
//! the official Python SDKs (`clients/py_remote_legacy.py` with 1.x, `clients/py_remote_modern.py`
//! with 2.3). Each asserts on what the server really answered: the echo text, the tool list,
//! the progress notifications of one call, and log messages.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, NotificationContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientServiceExt, RoleClient};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A protocol era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25: `initialize`, `Mcp-Session-Id`.
    Legacy,
    /// 2026-07-28: `server/discover`, stateless requests.
    Modern,
}

/// What a remote's tools are called and answer (every server names them differently).
pub struct Spec {
    pub server: &'static str,
    pub echo_tool: &'static str,
    pub echo_arg: &'static str,
    /// What the echo tool puts before the text it was sent.
    pub echo_prefix: &'static str,
    pub progress_tool: &'static str,
    pub progress_args: Value,
    /// The progress notifications the call sends (1..=steps of steps).
    pub steps: u64,
    pub progress_result: &'static str,
    /// Whether the progress tool logs `step i` (info) on its request as it goes.
    pub logs_steps: bool,
    /// A tool that starts (and, called again, stops) periodic logging to the caller's session,
    /// answering with text that names the server's own session id.
    pub log_tool: Option<&'static str>,
}

impl Spec {
    /// `@modelcontextprotocol/server-everything`.
    pub fn everything() -> Spec {
        Spec {
            server: "mcp-servers/everything",
            echo_tool: "echo",
            echo_arg: "message",
            echo_prefix: "Echo: ",
            progress_tool: "trigger-long-running-operation",
            progress_args: json!({"duration": 0.3, "steps": 3}),
            steps: 3,
            progress_result: "Long running operation completed. Duration: 0.3 seconds, Steps: 3.",
            logs_steps: false,
            log_tool: Some("toggle-simulated-logging"),
        }
    }

    /// `backends/py_http_server.py`.
    pub fn python_sdk() -> Spec {
        Spec {
            server: "py-http-server",
            echo_tool: "echo",
            echo_arg: "text",
            echo_prefix: "py: ",
            progress_tool: "progress",
            progress_args: json!({"steps": 3}),
            steps: 3,
            progress_result: "done 3",
            logs_steps: true,
            log_tool: None,
        }
    }

    /// The form the Python clients take it in.
    fn to_json(&self) -> Value {
        json!({
            "echo": {"tool": self.echo_tool, "arg": self.echo_arg},
            "progress": {"tool": self.progress_tool, "args": self.progress_args},
            "logTool": self.log_tool,
        })
    }

    /// The `[progress, total]` pairs the progress call sends, in order.
    fn expected_progress(&self) -> Vec<(f64, f64)> {
        #[allow(clippy::cast_precision_loss)]
        (1..=self.steps)
            .map(|i| (i as f64, self.steps as f64))
            .collect()
    }

    /// The log messages (`[level, data]`) the progress call sends on its own request.
    fn expected_step_logs(&self) -> Value {
        if !self.logs_steps {
            return json!([]);
        }
        (1..=self.steps)
            .map(|i| json!(["info", format!("step {i}")]))
            .collect()
    }
}

/// The server's session id, as the log tool's answer names it ("… for session <id> …").
fn session_named(text: &str) -> &str {
    text.split("for session ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session id in {text:?}"))
}

/// An rmcp client handler that forwards progress and log notifications to the test.
#[derive(Clone)]
struct Recorder {
    progress: mpsc::Sender<ProgressNotificationParam>,
    logs: mpsc::Sender<LoggingMessageNotificationParam>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Bounded; a test that floods itself fails on the count instead.
        let _ = self.progress.try_send(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.logs.try_send(params);
    }
}

/// Receives one item (bounded wait) or fails the test with `what`.
async fn next<T>(rx: &mut mpsc::Receiver<T>, bound: Duration, what: &str) -> T {
    tokio::time::timeout(bound, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {bound:?}"))
        .unwrap_or_else(|| panic!("{what}: channel closed"))
}

/// Text of a tool result's first content block.
fn text_of(r: &rmcp::model::CallToolResult) -> String {
    r.content[0].as_text().expect("text content").text.clone()
}

/// rmcp's client in `era` against `url`: lists tools, echoes, and makes the progress call
/// (every rmcp request carries a progress token), checking every notification it gets. In
/// the Legacy era, with a log tool, it also starts logging and checks that each log message
/// names this client's own upstream session. Returns that session id (if any).
pub async fn rmcp(url: &str, era: Era, spec: &Spec, label: &str) -> Option<String> {
    let label = format!("rmcp {era:?} {label}");
    let (progress, mut progress_rx) = mpsc::channel(64);
    let (logs, mut logs_rx) = mpsc::channel(64);
    let lifecycle = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let client = Recorder { progress, logs }
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
    for want in [spec.echo_tool, spec.progress_tool] {
        assert!(tools.iter().any(|t| t.name == want), "{label}: no {want}");
    }
    let sent = format!("{label} says hi");
    let echo = call(
        &client,
        spec.echo_tool,
        json!({ spec.echo_arg: sent }),
        &label,
    )
    .await;
    assert_eq!(echo, format!("{}{sent}", spec.echo_prefix), "{label}");
    let done = call(
        &client,
        spec.progress_tool,
        spec.progress_args.clone(),
        &label,
    )
    .await;
    assert_eq!(done, spec.progress_result, "{label}");
    progress_notes(&mut progress_rx, spec, &label).await;
    let mut session = None;
    if era == Era::Legacy {
        if spec.logs_steps {
            step_logs(&mut logs_rx, spec, &label).await;
        }
        if let Some(tool) = spec.log_tool {
            session = Some(logs_name_own_session(&client, tool, &mut logs_rx, &label).await);
        }
    }
    client
        .cancel()
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    session
}

/// The progress call's notifications. rmcp hands each notification to its own task: they
/// may arrive after the answer, and in any order.
async fn progress_notes(
    rx: &mut mpsc::Receiver<ProgressNotificationParam>,
    spec: &Spec,
    label: &str,
) {
    let mut seen = Vec::new();
    for _ in 0..spec.steps {
        let p = next(rx, Duration::from_secs(10), label).await;
        seen.push((p.progress, p.total.unwrap_or(-1.0)));
    }
    seen.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(seen, spec.expected_progress(), "{label}");
}

/// The log messages the progress call sent on its own request (any order, as above).
async fn step_logs(
    rx: &mut mpsc::Receiver<LoggingMessageNotificationParam>,
    spec: &Spec,
    label: &str,
) {
    let mut steps = Vec::new();
    for _ in 0..spec.steps {
        let l = next(rx, Duration::from_secs(10), label).await;
        steps.push(json!([l.level, l.data]));
    }
    steps.sort_by_key(Value::to_string);
    assert_eq!(Value::from(steps), spec.expected_step_logs(), "{label}");
}

/// Starts the server's periodic logging, checks that a log message arrives (bounded: one is
/// sent at once, then one every 5 s) and names the session the tool's answer named, stops
/// the logging, and returns that session id.
async fn logs_name_own_session(
    client: &rmcp::service::RunningService<RoleClient, Recorder>,
    tool: &str,
    logs: &mut mpsc::Receiver<LoggingMessageNotificationParam>,
    label: &str,
) -> String {
    let started = call(client, tool, json!({}), label).await;
    let session = session_named(&started).to_owned();
    let log = next(logs, Duration::from_secs(20), label).await;
    let data = log.data.as_str().unwrap_or_default().to_owned();
    assert!(
        data.ends_with(&format!("SessionId {session}")),
        "{label}: a log message for another session: {data:?} (ours: {session})"
    );
    call(client, tool, json!({}), label).await;
    session
}

async fn call(
    client: &rmcp::service::RunningService<RoleClient, Recorder>,
    tool: &str,
    args: Value,
    label: &str,
) -> String {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().expect("object arguments").clone());
    let r = client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("{label}: {tool}: {e}"));
    assert_ne!(r.is_error, Some(true), "{label}: {tool}: {r:?}");
    text_of(&r)
}

/// The Python SDK 1.x client (`streamable` or `sse` transport) against `url`.
pub async fn python_legacy(url: &str, transport: &str, spec: &Spec) {
    let v = run_python(
        "sse",
        "py_remote_legacy.py",
        &[url, transport, &spec.to_json().to_string()],
    )
    .await;
    let label = format!("python 1.x {transport} {url}");
    assert_eq!(v["protocolVersion"], "2025-11-25", "{label}: {v}");
    assert_eq!(v["server"], spec.server, "{label}: {v}");
    check_common(&v, spec, &label);
    assert_eq!(
        v["logsDuringProgress"],
        spec.expected_step_logs(),
        "{label}: {v}"
    );
    if spec.log_tool.is_some() {
        // The `logTool` answer names the server's session; every log message is for it.
        let session = session_named(v["logToolResult"].as_str().expect("logToolResult"));
        let logs = v["logs"].as_array().expect("logs");
        assert!(!logs.is_empty(), "{label}: {v}");
        for log in logs {
            let data = log[1].as_str().unwrap_or_default();
            assert!(
                data.ends_with(&format!("SessionId {session}")),
                "{label}: {v}"
            );
        }
    }
}

/// The Python SDK 2.3 client, pinned to 2026-07-28, against `url`. It opts in to log messages
/// on every request; `step_logs` says whether the progress call's own ones reach it.
pub async fn python_modern(url: &str, spec: &Spec, step_logs: bool) {
    let v = run_python(
        "modern",
        "py_remote_modern.py",
        &[url, &spec.to_json().to_string()],
    )
    .await;
    let label = format!("python 2.3 modern {url}");
    assert_eq!(v["protocolVersion"], "2026-07-28", "{label}: {v}");
    check_common(&v, spec, &label);
    let expected = if step_logs {
        spec.expected_step_logs()
    } else {
        json!([])
    };
    assert_eq!(v["logsDuringProgress"], expected, "{label}: {v}");
}

/// What both Python clients report: the tools, the echo, the progress call.
fn check_common(v: &Value, spec: &Spec, label: &str) {
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [spec.echo_tool, spec.progress_tool] {
        assert!(tools.contains(&want), "{label}: no {want}: {v}");
    }
    let sent = v["echoSent"].as_str().expect("echoSent");
    assert_eq!(v["echo"], format!("{}{sent}", spec.echo_prefix), "{label}");
    assert_eq!(v["progressResult"], spec.progress_result, "{label}: {v}");
    let progress: Vec<(f64, f64)> = v["progress"]
        .as_array()
        .expect("progress")
        .iter()
        .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
        .collect();
    assert_eq!(progress, spec.expected_progress(), "{label}: {v}");
}

pub(crate) use crate::legacy_sse::sdk_python;

/// Runs `clients/<script> <args…>` with the SDK `sdk` and returns the JSON it prints.
async fn run_python(sdk: &str, script: &str, args: &[&str]) -> Value {
    let python = sdk_python(sdk).await;
    let script = format!(
        "{}/tests/integration/clients/{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .arg(&script)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{script} {args:?} timed out"))
    .unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
