//! One interface over the real MCP clients the virtual-server tests drive: rmcp in-process,
//! and the official Python SDKs (1.x Legacy, 2.3.0 Modern) and TypeScript SDK as child
//! processes running `clients/*_vmcp.*`, which read one JSON command per stdin line and
//! answer each with one JSON line. A script keeps its one client (and, in Legacy, its one
//! session) for the whole test, so a test can kill a backend between two of its requests.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, PaginatedRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientServiceExt, RoleClient};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Bound on one command's answer (a script's own call timeout is 10 s; lists take a few
/// round trips).
const ANSWER: Duration = Duration::from_secs(60);
/// Bound on a script's start: interpreter, SDK import, connect (and, in Legacy, handshake).
const START: Duration = Duration::from_secs(120);
/// Pages a client follows at most (as the scripts do).
const MAX_PAGES: usize = 50;

/// A merged tools/list as one client saw it.
#[derive(Debug)]
pub(crate) struct Listed {
    /// Exposed names, in order.
    pub(crate) tools: Vec<String>,
    /// How many pages (requests) it took.
    pub(crate) pages: usize,
}

/// A call that did not produce a normal result.
#[derive(Debug)]
pub(crate) struct Failed {
    /// What the client surfaced (a JSON-RPC error message, its own timeout, or the text of
    /// an `isError` result).
    pub(crate) message: String,
    /// How long the client waited for it.
    pub(crate) elapsed: Duration,
}

/// A real client connected to the gateway.
pub(crate) enum Client {
    /// A client script in a child process.
    Script(Box<Script>),
    /// rmcp's client, in this process.
    Rmcp(Box<RunningService<RoleClient, ()>>),
}

impl Client {
    /// The Python SDK 1.x (`scripts/install-test-clients.sh sse`): one Legacy session over
    /// Streamable HTTP.
    pub(crate) async fn python_legacy(url: &str) -> Client {
        let python = crate::legacy_sse::sdk_python("sse").await;
        Self::script(&python, &[&script("py_vmcp_legacy.py"), url]).await
    }

    /// The Python SDK 2.3.0 (`install-test-clients.sh modern`) pinned to 2026-07-28.
    pub(crate) async fn python_modern(url: &str) -> Client {
        let python = crate::legacy_sse::sdk_python("modern").await;
        Self::script(&python, &[&script("py_vmcp_modern.py"), url]).await
    }

    /// The TypeScript SDK 1.x (`install-test-clients.sh ts`, npm) on system `node`.
    pub(crate) async fn typescript(url: &str) -> Client {
        let modules = install("ts").await;
        Self::script("node", &[&script("ts_vmcp.mjs"), url, &modules]).await
    }

    /// rmcp's client: Legacy (`initialize`) or Modern (`server/discover`, 2026-07-28).
    pub(crate) async fn rmcp(url: &str, modern: bool) -> Client {
        let lifecycle = if modern {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            }
        } else {
            ClientLifecycleMode::Initialize
        };
        let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
        let service = tokio::time::timeout(START, ().serve_with_lifecycle(transport, lifecycle))
            .await
            .expect("rmcp did not connect in time")
            .expect("rmcp connects");
        Client::Rmcp(Box::new(service))
    }

    async fn script(program: &str, args: &[&str]) -> Client {
        Client::Script(Box::new(Script::spawn(program, args).await))
    }

    /// What the client learned when it connected: `{protocolVersion, server}`.
    pub(crate) fn hello(&self) -> Value {
        match self {
            Client::Script(s) => s.hello.clone(),
            Client::Rmcp(service) => {
                let info = service.peer_info();
                json!({
                    "protocolVersion": info.as_ref().map(|i| i.protocol_version.to_string()),
                    "server": info.as_ref().and_then(|i| i.server_info.as_ref()).map(|s| s.name.clone()),
                })
            }
        }
    }

    /// Every page of the merged tools/list, following the gateway's cursors; `Err` with the
    /// client's message when a page was refused.
    pub(crate) async fn list(&mut self) -> Result<Listed, String> {
        match self {
            Client::Script(s) => {
                let answer = s.ask(json!({"op": "list"})).await;
                if let Some(e) = answer.get("error") {
                    return Err(e.to_string());
                }
                let tools = answer["tools"]
                    .as_array()
                    .unwrap_or_else(|| panic!("no list: {answer}"))
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect();
                let pages = answer["pages"].as_u64().unwrap() as usize;
                Ok(Listed { tools, pages })
            }
            Client::Rmcp(service) => rmcp_list(service).await,
        }
    }

    /// `tools/call name arguments`: the first text content, or how it failed.
    pub(crate) async fn call(&mut self, name: &str, arguments: Value) -> Result<String, Failed> {
        match self {
            Client::Script(s) => {
                let answer = s
                    .ask(json!({"op": "call", "name": name, "arguments": arguments}))
                    .await;
                let elapsed = Duration::from_millis(answer["ms"].as_u64().unwrap());
                let text = answer["text"].as_str().unwrap_or_default().to_owned();
                match answer.get("error").and_then(Value::as_str) {
                    Some(message) => Err(Failed {
                        message: message.to_owned(),
                        elapsed,
                    }),
                    None if answer["isError"] == true => Err(Failed {
                        message: text,
                        elapsed,
                    }),
                    None => Ok(text),
                }
            }
            Client::Rmcp(service) => rmcp_call(service, name, arguments).await,
        }
    }
}

async fn rmcp_list(service: &RunningService<RoleClient, ()>) -> Result<Listed, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for pages in 1..=MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = tokio::time::timeout(ANSWER, service.list_tools(Some(params)))
            .await
            .expect("rmcp tools/list answered in time")
            .map_err(|e| e.to_string())?;
        tools.extend(page.tools.iter().map(|t| t.name.to_string()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Listed { tools, pages }),
        }
    }
    panic!("rmcp: tools/list did not end within {MAX_PAGES} pages");
}

async fn rmcp_call(
    service: &RunningService<RoleClient, ()>,
    name: &str,
    arguments: Value,
) -> Result<String, Failed> {
    let params = CallToolRequestParams::new(name.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let started = Instant::now();
    let answer = tokio::time::timeout(ANSWER, service.call_tool(params))
        .await
        .expect("rmcp tools/call answered in time");
    let elapsed = started.elapsed();
    let result = answer.map_err(|e| Failed {
        message: e.to_string(),
        elapsed,
    })?;
    let text = result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default();
    if result.is_error == Some(true) {
        return Err(Failed {
            message: text,
            elapsed,
        });
    }
    Ok(text)
}

/// A client script in a child process, spoken to line by line.
pub(crate) struct Script {
    /// Killed on drop.
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The script's first line.
    hello: Value,
    /// What the script wrote to stderr (bounded), for failure messages.
    stderr: Arc<parking_lot::Mutex<String>>,
}

impl Script {
    async fn spawn(program: &str, args: &[&str]) -> Script {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let stderr = Arc::new(parking_lot::Mutex::new(String::new()));
        let mut err_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = stderr.clone();
        // Ends with the script's stderr; drained so a chatty SDK never blocks on the pipe.
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                let mut s = sink.lock();
                if s.len() < 64 * 1024 {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        let mut script = Script {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
            hello: Value::Null,
            stderr,
        };
        let hello = script.next_line(START, "its ready line").await;
        assert_eq!(hello["ready"], true, "{hello}");
        script.hello = hello;
        script
    }

    /// Sends one command and waits (bounded) for its one answer.
    async fn ask(&mut self, command: Value) -> Value {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        self.next_line(ANSWER, &command.to_string()).await
    }

    async fn next_line(&mut self, bound: Duration, what: &str) -> Value {
        let line = tokio::time::timeout(bound, self.stdout.next_line()).await;
        let stderr = || self.stderr.lock().clone();
        match line {
            Ok(Ok(Some(line))) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}\n{}", stderr())),
            Ok(_) => panic!("the client exited before answering {what}:\n{}", stderr()),
            Err(_) => panic!("the client did not answer {what} in time:\n{}", stderr()),
        }
    }
}

/// The path of `clients/<name>`.
fn script(name: &str) -> String {
    format!(
        "{}/tests/integration/clients/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// What `scripts/install-test-clients.sh <what>` prints (it installs on first use).
async fn install(what: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .arg(format!("{root}/scripts/install-test-clients.sh"))
        .arg(what)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "install-test-clients.sh {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
