//! Resilience: a bounded mixed-era soak with disconnects and DELETEs, a consumer that stops
//! reading, and a malformed-input corpus. Loopback only; every wait is bounded; non-delivery
//! is proven by ordering (a sentinel after the message under test), never by sleeping.
//!
//! The soak is seeded: it prints `resilience seed: N`; rerun with `RESILIENCE_SEED=N` to replay
//! the same schedule of operations.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{emit, pushy, sse_data, stats, tool_text, Listener, Reply, TestGateway, BOTH};

/// A notification nothing else in these tests sends: when it arrives, everything before it
/// has arrived.
const SENTINEL: &str = "notifications/prompts/list_changed";

/// Longest any single request, stream read or cleanup may take before it counts as a hang.
const BOUND: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} did not finish within {BOUND:?}"))
}

/// Reads an evicted stream until it ends: eviction must be visible to the client that
/// stopped reading, once it reads again.
async fn until_evicted_stream_ends(stalled: reqwest::Response) {
    let mut body = stalled.bytes_stream();
    bounded("the evicted stream to end", async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
}

/// The backend emits a sentinel; every listener must get it next (so nothing else, such as
/// another session's flood, came before it).
async fn sentinel_reaches_next(gw: &TestGateway, flooder: &str, listeners: &mut [Listener]) {
    emit(gw, flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    for l in listeners {
        assert_eq!(l.next().await.data["method"], SENTINEL);
    }
}

/// xorshift64*: tiny, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    let seed = std::env::var("RESILIENCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("resilience seed: {seed} (rerun with RESILIENCE_SEED={seed})");
    seed
}

/// Polls `check` until it holds, for at most [`BOUND`]: only for state the test waits on
/// (asynchronous cleanup), never to prove that something did not happen.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + BOUND;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

const MODERN: &str = "2026-07-28";

fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
           "io.modelcontextprotocol/clientCapabilities": {}})
}

const MODERN_CALL_HEADERS: &[(&str, &str)] = &[
    ("mcp-protocol-version", MODERN),
    ("mcp-method", "tools/call"),
    ("mcp-name", "echo"),
];

fn echo_body(id: u64, text: &str, delay: u64, modern: bool) -> String {
    let mut params = json!({"name":"echo","arguments":{"text":text,"delayMs":delay}});
    if modern {
        params["_meta"] = modern_meta();
    }
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params}).to_string()
}

/// The answer is this request's own: its id, its text (twice), and nothing else.
fn assert_own_echo(v: &Value, id: u64, text: &str) {
    assert_eq!(v["id"], id, "cross-delivery: wrong id in {v}");
    assert_eq!(tool_text(v), text, "cross-delivery: wrong text in {v}");
    assert_eq!(
        v["result"]["structuredContent"]["text"], text,
        "cross-delivery: {v}"
    );
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP+SSE (2024-11-05) client.

type Events =
    Pin<Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>>;

struct SseConn {
    events: Events,
    post_url: String,
    http: reqwest::Client,
}

impl SseConn {
    async fn connect(gw: &TestGateway) -> Self {
        let resp = bounded(
            "GET /sse",
            gw.http
                .get(format!("{}/sse", gw.base()))
                .header("accept", "text/event-stream")
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let mut events: Events = Box::pin(sse_stream::SseStream::from_bytes_stream(
            resp.bytes_stream(),
        ));
        let endpoint = bounded("endpoint event", async {
            loop {
                let sse = events.next().await.expect("stream ended").unwrap();
                if sse.event.as_deref() == Some("endpoint") {
                    return sse.data.unwrap();
                }
            }
        })
        .await;
        SseConn {
            events,
            post_url: format!("{}{endpoint}", gw.base()),
            http: gw.http.clone(),
        }
    }

    async fn open(gw: &TestGateway) -> Self {
        let mut c = Self::connect(gw).await;
        c.send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"soak","version":"0"}}})
            .to_string())
            .await;
        let init = c.next().await;
        assert_eq!(init["id"], 0, "{init}");
        c.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string())
            .await;
        c
    }

    async fn post(&mut self, body: impl Into<reqwest::Body>) -> (StatusCode, String) {
        let r = bounded(
            "POST /messages",
            self.http
                .post(&self.post_url)
                .header("content-type", "application/json")
                .body(body)
                .send(),
        )
        .await
        .unwrap();
        let status = r.status();
        (status, bounded("/messages body", r.text()).await.unwrap())
    }

    async fn send(&mut self, body: String) {
        let (status, text) = self.post(body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    }

    /// The next `message` event.
    async fn next(&mut self) -> Value {
        bounded("an HTTP+SSE message", async {
            loop {
                let sse = self
                    .events
                    .next()
                    .await
                    .expect("stream ended")
                    .expect("sse error");
                if let Some(data) = sse.data.filter(|d| !d.is_empty()) {
                    return serde_json::from_str(&data).unwrap();
                }
            }
        })
        .await
    }

    /// Whether the server ends the stream (skipping whatever was still queued).
    async fn ends(&mut self) -> bool {
        tokio::time::timeout(BOUND, async {
            while let Some(item) = self.events.next().await {
                if item.is_err() {
                    break;
                }
            }
        })
        .await
        .is_ok()
    }

    /// A ping whose answer must be the very next message on the stream.
    async fn sentinel(&mut self, tag: &str) {
        self.send(json!({"jsonrpc":"2.0","id":tag,"method":"ping"}).to_string())
            .await;
        let v = self.next().await;
        assert_eq!(v["id"], tag, "something arrived before the sentinel: {v}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Soak

mod byte_budget;
mod corpus;
mod slow_consumer;
mod soak;
