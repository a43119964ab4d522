//! Concurrent `tools/call`s of one echo tool through the gateway until told to stop, each
//! answer checked, counting calls and failures: the traffic a reload must not disturb.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::common::{sse_data, TestGateway, BOTH};
use crate::vmcp::V;

/// What the tasks share.
#[derive(Default)]
struct Counters {
    stop: AtomicBool,
    calls: AtomicU64,
    errors: AtomicU64,
    /// The first few failures, for the assertion message.
    samples: Mutex<Vec<String>>,
}

impl Counters {
    fn fail(&self, what: String) {
        self.errors.fetch_add(1, Ordering::SeqCst);
        let mut samples = self.samples.lock();
        if samples.len() < 10 {
            samples.push(what);
        }
    }
}

/// How a load ended.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
    pub(crate) samples: Vec<String>,
}

/// A running load.
pub(crate) struct Load {
    counters: Arc<Counters>,
    tasks: Vec<JoinHandle<()>>,
}

/// Where one task sends its calls: in a Legacy session, or sessionless (Modern).
#[derive(Clone)]
struct Target {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    tool: String,
}

impl Load {
    /// `tasks` tasks calling `tool` (an echo) in a loop, half of them in the Legacy
    /// `session`, half sessionless (Modern), so both eras cross the reload.
    pub(crate) fn start(gw: &TestGateway, session: &str, tasks: usize, tool: &str) -> Load {
        let counters = Arc::new(Counters::default());
        let tasks = (0..tasks)
            .map(|task| {
                let target = Target {
                    http: gw.http.clone(),
                    url: gw.url.clone(),
                    session: (task % 2 == 0).then(|| session.to_owned()),
                    tool: tool.to_owned(),
                };
                tokio::spawn(run(target, task, counters.clone()))
            })
            .collect();
        Load { counters, tasks }
    }

    /// Calls answered so far (well or not).
    pub(crate) fn calls(&self) -> u64 {
        self.counters.calls.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until at least `n` calls were answered.
    pub(crate) async fn until_calls(&self, n: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.calls() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the load made {} of {n} calls within 30 s",
                self.calls()
            );
            // A bounded poll of a counter, not a wait for an event to maybe happen.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the tasks (each finishes its call in flight) and reports.
    pub(crate) async fn stop(self) -> Report {
        self.counters.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("load task panicked");
        }
        let c = &self.counters;
        Report {
            calls: c.calls.load(Ordering::SeqCst),
            errors: c.errors.load(Ordering::SeqCst),
            samples: c.samples.lock().clone(),
        }
    }
}

async fn run(target: Target, task: usize, counters: Arc<Counters>) {
    let mut n = 0u64;
    while !counters.stop.load(Ordering::SeqCst) {
        n += 1;
        let text = format!("load {task}-{n}");
        let outcome = target.call(n, &text).await;
        counters.calls.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = outcome {
            counters.fail(format!("task {task} call {n}: {e}"));
        }
    }
}

impl Target {
    /// One call; `Err` unless HTTP 200 and the echo's answer is `text` (no JSON-RPC error,
    /// no tool error).
    async fn call(&self, id: u64, text: &str) -> Result<(), String> {
        let mut params = json!({"name": self.tool, "arguments": {"text": text}});
        let mut req = self
            .http
            .post(&self.url)
            .header(ACCEPT, BOTH)
            .header(CONTENT_TYPE, "application/json");
        match &self.session {
            Some(s) => req = req.header("mcp-session-id", s),
            None => {
                params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": V,
                    "io.modelcontextprotocol/clientCapabilities": {}});
                req = req
                    .header("mcp-protocol-version", V)
                    .header("mcp-method", "tools/call")
                    .header("mcp-name", &self.tool);
            }
        }
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params});
        let resp = req
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status();
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let body = resp.text().await.map_err(|e| format!("body: {e}"))?;
        if status != StatusCode::OK {
            return Err(format!("HTTP {status}: {body}"));
        }
        check(&answer(&body, sse, id)?, text)
    }
}

/// The response to `id` among the messages of `body` (SSE may carry others before it).
fn answer(body: &str, sse: bool, id: u64) -> Result<Value, String> {
    let messages: Vec<Value> = if sse {
        sse_data(body)
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    } else {
        serde_json::from_str(body).into_iter().collect()
    };
    messages
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .ok_or_else(|| format!("no answer to {id} in {body:?}"))
}

fn check(answer: &Value, text: &str) -> Result<(), String> {
    let result = &answer["result"];
    if answer.get("error").is_some() || result["isError"] == json!(true) {
        return Err(format!("failed: {answer}"));
    }
    if result["content"][0]["text"] != json!(text) {
        return Err(format!("wrong answer (expected {text:?}): {answer}"));
    }
    Ok(())
}
