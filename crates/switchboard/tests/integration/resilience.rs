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

/// Longest any single request, stream read or cleanup may take before it counts as a hang.
const BOUND: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} did not finish within {BOUND:?}"))
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

const WORKERS: u64 = 64;
const OPS: u64 = 24;

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    answered: u64,
    disconnects: u64,
    deletes: u64,
    cancelled: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Self) {
        self.answered += o.answered;
        self.disconnects += o.disconnects;
        self.deletes += o.deletes;
        self.cancelled += o.cancelled;
    }
}

/// Streamable HTTP, Legacy or Modern: one request, answered within the bound, verified.
async fn http_echo(
    gw: &TestGateway,
    session: Option<&str>,
    id: u64,
    text: &str,
    delay: u64,
    sse: bool,
) -> Reply {
    let modern = session.is_none();
    let mut headers: Vec<(&str, &str)> = if modern {
        MODERN_CALL_HEADERS.to_vec()
    } else {
        Vec::new()
    };
    if sse {
        headers.push(("accept", "text/event-stream, application/json;q=0.5"));
    }
    gw.post_raw(session, echo_body(id, text, delay, modern), &headers)
        .await
}

async fn legacy_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut sid = bounded("initialize", gw.session()).await;
    for op in 0..OPS {
        let text = |id: u64| format!("legacy-w{w}-op{op}-id{id}");
        match rng.below(10) {
            // The client goes away mid-request: drop the in-flight future.
            0 | 1 => {
                let (delay, after) = (5 + rng.below(30), rng.below(15));
                let sse = rng.below(2) == 0;
                let t1 = text(1);
                let call = http_echo(gw, Some(&sid), 1, &t1, delay, sse);
                t.disconnects += 1;
                if let Ok(r) = tokio::time::timeout(Duration::from_millis(after), call).await {
                    assert_own_echo(&r.json(), 1, &t1);
                    t.answered += 1;
                }
            }
            // DELETE the session while a request is in flight.
            2 => {
                let delay = 10 + rng.below(40);
                let pause = Duration::from_millis(rng.below(30));
                let t2 = text(2);
                let call = bounded(
                    "request racing a DELETE",
                    http_echo(gw, Some(&sid), 2, &t2, delay, rng.below(2) == 0),
                );
                let delete = async {
                    tokio::time::sleep(pause).await;
                    bounded(
                        "DELETE",
                        gw.http
                            .delete(&gw.url)
                            .header("mcp-session-id", &sid)
                            .send(),
                    )
                    .await
                    .unwrap()
                    .status()
                };
                let (r, status) = tokio::join!(call, delete);
                assert_eq!(status, StatusCode::NO_CONTENT);
                let v = r.json();
                assert_eq!(v["id"], 2, "{v}");
                match r.status {
                    StatusCode::OK if v.get("result").is_some() => assert_own_echo(&v, 2, &text(2)),
                    // Cancelled by the DELETE, or arrived after it: an error with its own id.
                    StatusCode::OK => {
                        assert_eq!(v["error"]["code"], -32800, "{v}");
                        t.cancelled += 1;
                    }
                    StatusCode::NOT_FOUND => assert_eq!(v["error"]["code"], -32001, "{v}"),
                    s => panic!("unexpected {s}: {v}"),
                }
                t.deletes += 1;
                t.answered += 1;
                sid = bounded("initialize", gw.session()).await;
            }
            // A burst of concurrent requests with colliding ids (1..=k in every session).
            _ => {
                let k = 1 + rng.below(4);
                let calls = (1..=k).map(|id| {
                    let (delay, sse) = (rng.below(10), rng.below(3) == 0);
                    let (sid, text) = (sid.clone(), text(id));
                    async move {
                        let r = bounded(
                            "legacy request",
                            http_echo(gw, Some(&sid), id, &text, delay, sse),
                        )
                        .await;
                        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                        assert_own_echo(&r.json(), id, &text);
                    }
                });
                futures::future::join_all(calls).await;
                t.answered += k;
            }
        }
    }
    let status = bounded(
        "final DELETE",
        gw.http
            .delete(&gw.url)
            .header("mcp-session-id", &sid)
            .send(),
    )
    .await
    .unwrap()
    .status();
    assert_eq!(status, StatusCode::NO_CONTENT);
    t
}

async fn modern_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    for op in 0..OPS {
        let text = |id: u64| format!("modern-w{w}-op{op}-id{id}");
        if rng.below(5) == 0 {
            let (delay, after) = (5 + rng.below(30), rng.below(15));
            let t1 = text(1);
            let call = http_echo(gw, None, 1, &t1, delay, rng.below(2) == 0);
            t.disconnects += 1;
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(after), call).await {
                assert_own_echo(&r.json(), 1, &t1);
                t.answered += 1;
            }
            continue;
        }
        let k = 1 + rng.below(4);
        let calls = (1..=k).map(|id| {
            let (delay, sse) = (rng.below(10), rng.below(3) == 0);
            let text = text(id);
            async move {
                let r = bounded("modern request", http_echo(gw, None, id, &text, delay, sse)).await;
                assert_eq!(r.status, StatusCode::OK, "{}", r.text);
                let v = r.json();
                assert_own_echo(&v, id, &text);
                assert_eq!(v["result"]["resultType"], "complete");
            }
        });
        futures::future::join_all(calls).await;
        t.answered += k;
    }
    t
}

async fn sse_worker(gw: &TestGateway, w: u64, mut rng: Rng) -> Tally {
    let mut t = Tally::default();
    let mut conn = SseConn::open(gw).await;
    for op in 0..OPS {
        let k = 1 + rng.below(4);
        let mut expect: HashMap<u64, String> = HashMap::new();
        for id in 1..=k {
            let text = format!("sse-w{w}-op{op}-id{id}");
            conn.send(echo_body(id, &text, rng.below(20), false)).await;
            expect.insert(id, text);
        }
        if rng.below(6) == 0 {
            // Close the stream with answers outstanding: the session ends, its answers are
            // dropped, and the next session must never see them (its texts differ).
            t.disconnects += 1;
            conn = SseConn::open(gw).await;
            continue;
        }
        while !expect.is_empty() {
            let v = conn.next().await;
            let id = v["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("stray message {v}"));
            let text = expect
                .remove(&id)
                .unwrap_or_else(|| panic!("cross-delivery or duplicate: {v}"));
            assert_own_echo(&v, id, &text);
            t.answered += 1;
        }
    }
    conn.sentinel("soak-end").await;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_mixed_eras_with_disconnects_and_deletes() {
    let seed = seed();
    let gw = Arc::new(TestGateway::start(&[]).await);
    let started = Instant::now();
    let workers = (0..WORKERS).map(|w| {
        let gw = gw.clone();
        let rng = Rng::new(seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        tokio::spawn(async move {
            match w % 3 {
                0 => legacy_worker(&gw, w, rng).await,
                1 => modern_worker(&gw, w, rng).await,
                _ => sse_worker(&gw, w, rng).await,
            }
        })
    });
    let mut total = Tally::default();
    for r in futures::future::join_all(workers).await {
        total += r.unwrap_or_else(|e| panic!("worker failed (seed {seed}): {e}"));
    }
    println!("soak: {total:?} in {:.2?} (seed {seed})", started.elapsed());
    assert!(total.disconnects > 0 && total.deletes > 0, "{total:?}");
    // Every client is gone: every registry drains (asynchronous cleanup, so poll, bounded).
    eventually("every table back to empty", || {
        let gw = gw.clone();
        async move {
            let s = stats(&gw).await;
            s["sessions"] == 0 && s["tableEntries"] == 0
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 2. Slow consumer

/// A URI of about 64 KiB: every `resources/updated` for it is that large on the wire.
fn big_uri() -> String {
    format!("file:///{}", "u".repeat(64 * 1024))
}

fn updated(uri: &str) -> Value {
    json!({"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":uri}})
}

const SENTINEL: &str = "notifications/prompts/list_changed";
/// Updates per `emit` call (about 2 MiB of arguments).
const FLOOD_BATCH: usize = 32;
/// Upper bound on flood rounds (about 128 MiB): eviction must come long before.
const FLOOD_ROUNDS: usize = 64;

/// Echo requests from the well-behaved sessions; returns their latencies.
async fn others_work(gw: &TestGateway, sessions: &[String], round: usize) -> Vec<Duration> {
    let calls = sessions.iter().enumerate().flat_map(|(s, sid)| {
        (1..=4u64).map(move |id| async move {
            let text = format!("other-{s}-round{round}-{id}");
            let t0 = Instant::now();
            let r = bounded(
                "a well-behaved session's request",
                gw.call_tool(Some(sid), json!(id), "echo", json!({"text": text})),
            )
            .await;
            let elapsed = t0.elapsed();
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            // pushy has no echo: the answer is its own error, still with this request's id.
            let v = r.json();
            assert_eq!(v["id"], id, "{v}");
            elapsed
        })
    });
    futures::future::join_all(calls).await
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Floods the slow session until `evicted` holds (checked between rounds, when nothing else is
/// in flight), while the other sessions keep working. Returns (baseline, during) latencies.
async fn flood_until<F, Fut>(
    gw: &TestGateway,
    flooder: &str,
    others: &[String],
    uri: &str,
    mut evicted: F,
) -> (Vec<Duration>, Vec<Duration>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let baseline = others_work(gw, others, 0).await;
    let mut during = Vec::new();
    let lines: Vec<Value> = (0..FLOOD_BATCH).map(|_| updated(uri)).collect();
    for round in 1..=FLOOD_ROUNDS {
        let flood = bounded("flood round", emit(gw, flooder, json!(lines)));
        let (_, lat) = tokio::join!(flood, others_work(gw, others, round));
        during.extend(lat);
        if evicted().await {
            println!(
                "slow consumer evicted after {} updates (~{} MiB)",
                round * FLOOD_BATCH,
                (round * FLOOD_BATCH * uri.len()) >> 20
            );
            return (baseline, during);
        }
    }
    panic!("the slow consumer was never evicted");
}

fn report(name: &str, mut baseline: Vec<Duration>, mut during: Vec<Duration>) {
    println!(
        "{name}: others' p50/p99 before the flood {:?}/{:?}, during {:?}/{:?} ({} requests)",
        percentile(&mut baseline, 0.5),
        percentile(&mut baseline, 0.99),
        percentile(&mut during, 0.5),
        percentile(&mut during, 0.99),
        during.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_that_is_never_read_is_evicted_and_slows_nobody() {
    let gw = pushy(&[]).await;
    let uri = big_uri();
    let slow = gw.session().await;
    let r = gw
        .post(
            Some(&slow),
            &json!({"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":uri}}),
        )
        .await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text);
    // Opened, then never read.
    let stalled = gw
        .http
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &slow)
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), StatusCode::OK);

    let others: Vec<String> = futures::future::join_all((0..4).map(|_| gw.session())).await;
    let mut listeners = Vec::new();
    for sid in &others {
        listeners.push(Listener::open(&gw, sid, None).await);
    }
    let flooder = gw.session().await;
    // Quiescent table size with every stream attached; eviction detaches exactly one.
    let attached = stats(&gw).await["tableEntries"].as_u64().unwrap();
    let (baseline, during) = flood_until(&gw, &flooder, &others, &uri, || async {
        stats(&gw).await["tableEntries"].as_u64().unwrap() == attached - 1
    })
    .await;
    report("listen stream", baseline, during);

    // The eviction is visible to the stalled client: once it reads, its stream ends.
    let mut body = stalled.bytes_stream();
    bounded("the evicted stream to end", async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;

    // Everyone else still listens, and got nothing of the slow session's updates.
    emit(&gw, &flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    for l in &mut listeners {
        assert_eq!(l.next().await.data["method"], SENTINEL);
    }
    // The evicted session itself lives on and can listen again.
    let mut again = Listener::open(&gw, &slow, None).await;
    emit(&gw, &flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    assert_eq!(again.next().await.data["method"], SENTINEL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_that_is_never_read_is_evicted_and_slows_nobody() {
    let gw = pushy(&[]).await;
    let uri = big_uri();
    let mut slow = SseConn::open(&gw).await;
    slow.send(
        json!({"jsonrpc":"2.0","id":"s","method":"resources/subscribe","params":{"uri":uri}})
            .to_string(),
    )
    .await;
    assert_eq!(slow.next().await["result"], json!({}));
    // From here on the slow client never reads.

    let others: Vec<String> = futures::future::join_all((0..4).map(|_| gw.session())).await;
    let mut listeners = Vec::new();
    for sid in &others {
        listeners.push(Listener::open(&gw, sid, None).await);
    }
    let flooder = gw.session().await;
    // Quiescent table size with every stream attached; eviction detaches exactly one.
    let attached = stats(&gw).await["tableEntries"].as_u64().unwrap();
    let (baseline, during) = flood_until(&gw, &flooder, &others, &uri, || async {
        stats(&gw).await["tableEntries"].as_u64().unwrap() == attached - 1
    })
    .await;
    report("HTTP+SSE stream", baseline, during);
    // An HTTP+SSE stream is its session: once the client reads, the stream ends, and the
    // session with it.
    assert!(slow.ends().await, "the evicted stream must end");
    let (status, _) = slow
        .post(json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the session ended with it");

    emit(&gw, &flooder, json!([{"jsonrpc":"2.0","method":SENTINEL}])).await;
    for l in &mut listeners {
        assert_eq!(l.next().await.data["method"], SENTINEL);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Malformed-input corpus

/// Where a case is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// POST /mcp with a Legacy session.
    Legacy,
    /// POST /mcp with the Modern (2026-07-28) headers.
    Modern,
    /// POST /messages of an HTTP+SSE session.
    Messages,
}

const ALL: &[To] = &[To::Legacy, To::Modern, To::Messages];

/// The defined answer.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// An HTTP error status with a JSON-RPC error body: (status, code, id raw text or absent).
    Http(u16, i64, Option<&'static str>),
    /// A JSON-RPC error as the request's answer (200 on /mcp; 202 then the stream's next
    /// message on /messages).
    Rpc(i64, Option<&'static str>),
    /// 202 and nothing else: a notification the spec says to ignore.
    Ignored,
}

struct Case {
    name: String,
    to: &'static [To],
    body: Vec<u8>,
    want: Want,
}

fn case(name: &str, to: &'static [To], body: impl Into<Vec<u8>>, want: Want) -> Case {
    Case {
        name: name.to_owned(),
        to,
        body: body.into(),
        want,
    }
}

/// The largest body the corpus gateway accepts.
const LIMIT: usize = 256 * 1024;

fn call_with(params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
}

fn req(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{params}}}"#)
}

const META: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}"#;

fn corpus() -> Vec<Case> {
    use Want::{Http, Ignored, Rpc};
    let id7 = Some("7");
    let deep_arr = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep_obj = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    let echo_args = |extra: &str| format!(r#"{{"name":"echo","arguments":{{"text":"t"{extra}}}}}"#);
    let mut c = vec![
        // Truncated and otherwise broken JSON.
        case("empty body", ALL, "", Http(400, -32700, None)),
        case("lone brace", ALL, "{", Http(400, -32700, None)),
        case(
            "truncated object",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo""#,
            Http(400, -32700, None),
        ),
        case(
            "truncated inside a string",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/ca"#,
            Http(400, -32700, None),
        ),
        case(
            "trailing garbage",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"} x"#,
            Http(400, -32700, None),
        ),
        case(
            "two messages",
            ALL,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
            Http(400, -32700, None),
        ),
        case(
            "raw control character in a string",
            ALL,
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\"a\u{1}b\"}}",
            Http(400, -32700, None),
        ),
        case(
            "NUL byte between members",
            ALL,
            "{\"jsonrpc\":\"2.0\",\0\"id\":7,\"method\":\"ping\"}",
            Http(400, -32700, None),
        ),
        case(
            "byte order mark",
            ALL,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}",
            Http(400, -32700, None),
        ),
        case("not JSON at all", ALL, "hello", Http(400, -32700, None)),
        case("a JSON string", ALL, r#""ping""#, Http(400, -32600, None)),
        case("a JSON number", ALL, "7", Http(400, -32600, None)),
        // Deep nesting.
        case(
            "100k open brackets",
            ALL,
            "[".repeat(100_000),
            Http(400, -32600, None),
        ),
        case(
            "100k nested arrays",
            ALL,
            deep_arr(100_000),
            Http(400, -32600, None),
        ),
        case(
            "100k nested arrays in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_arr(100_000)))),
            Http(400, -32600, id7),
        ),
        case(
            "20k nested objects in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_obj(20_000)))),
            Http(400, -32600, id7),
        ),
        case(
            "200 nested arrays in params",
            ALL,
            call_with(&echo_args(&format!(r#","deep":{}"#, deep_arr(200)))),
            Http(400, -32600, id7),
        ),
        case(
            "100k unclosed brackets in params",
            ALL,
            call_with(&format!(
                r#"{{"name":"echo","arguments":{}"#,
                "[".repeat(100_000)
            )),
            Http(400, -32700, None),
        ),
        // Huge strings around the body limit (over it: see the end of the corpus test).
        case(
            "unterminated string just under the limit",
            ALL,
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{}"#,
                "x".repeat(LIMIT - 100)
            ),
            Http(400, -32700, None),
        ),
        // Invalid UTF-8.
        case(
            "invalid UTF-8 in a string",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xff\xfe",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "overlong UTF-8 encoding",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xc0\xaf",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "UTF-8-encoded surrogate",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\""[..],
                b"\xed\xa0\x80",
                b"\"}}",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        case(
            "truncated multi-byte sequence at the end",
            ALL,
            [
                &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}"[..],
                b"\xe2\x82",
            ]
            .concat(),
            Http(400, -32700, None),
        ),
        // jsonrpc
        case(
            "jsonrpc missing",
            ALL,
            r#"{"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc a number",
            ALL,
            r#"{"jsonrpc":2.0,"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc null",
            ALL,
            r#"{"jsonrpc":null,"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc an object",
            ALL,
            r#"{"jsonrpc":{},"id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
        case(
            "jsonrpc 2.1",
            ALL,
            r#"{"jsonrpc":"2.1","id":7,"method":"ping"}"#,
            Http(400, -32600, id7),
        ),
    ];
    // id: every type the spec forbids.
    for bad in ["null", "1.5", "1e3", "-0.0", "true", "{}", "[7]"] {
        c.push(case(
            &format!("id {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":{bad},"method":"ping"}}"#),
            Http(400, -32600, None),
        ));
    }
    // method
    for bad in ["42", "null", "{}", "[]", "true", r#""tools\/list""#] {
        c.push(case(
            &format!("method {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":{bad}}}"#),
            Http(400, -32600, id7),
        ));
    }
    c.push(case(
        "neither method nor result",
        ALL,
        r#"{"jsonrpc":"2.0","id":7}"#,
        Http(400, -32600, id7),
    ));
    // params
    for bad in ["5", r#""x""#, "true"] {
        c.push(case(
            &format!("params {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{bad}}}"#),
            Http(400, -32600, id7),
        ));
        c.push(case(
            &format!("notification params {bad}"),
            ALL,
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{bad}}}"#),
            Http(400, -32600, None),
        ));
    }
    // params._meta.progressToken: a string or a number, nothing else.
    for bad in ["null", "{}", "[1]", "true"] {
        c.push(case(
            &format!("progressToken {bad}"),
            &[To::Legacy, To::Messages],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"progressToken":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
        c.push(case(
            &format!("Modern progressToken {bad}"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{{META},"progressToken":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    // params._meta and the Modern envelope keys.
    for bad in ["5", r#""x""#, "[]"] {
        c.push(case(
            &format!("Modern _meta {bad}"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{bad}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    for bad in ["5", "null", "{}", "[]"] {
        c.push(case(
            &format!("protocolVersion claim {bad}, Legacy header"),
            &[To::Legacy],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
        c.push(case(
            &format!("protocolVersion claim {bad}, Modern header"),
            &[To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":{bad},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#
            )),
            Http(400, -32020, id7),
        ));
    }
    c.push(case(
        "protocolVersion claim unknown",
        &[To::Legacy],
        call_with(r#"{"name":"echo","arguments":{"text":"t"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#),
        Http(400, -32022, id7),
    ));
    for bad in ["5", "null", r#""x""#, "[]"] {
        c.push(case(
            &format!("clientCapabilities {bad}"),
            &[To::Legacy, To::Modern],
            call_with(&format!(
                r#"{{"name":"echo","arguments":{{"text":"t"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{bad}}}}}"#
            )),
            Http(400, -32602, id7),
        ));
    }
    // notifications/cancelled with a requestId of the wrong type: the spec says to ignore
    // invalid cancellations.
    for bad in ["null", "{}", "[7]", "true", "1.5"] {
        c.push(case(
            &format!("cancelled requestId {bad}"),
            &[To::Legacy, To::Messages],
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{bad}}}}}"#),
            Ignored,
        ));
    }
    // Fields of state-changing methods the gateway reads itself.
    for bad in ["5", "null", "{}", "[]"] {
        c.push(case(
            &format!("subscribe uri {bad}"),
            &[To::Legacy, To::Messages],
            req("resources/subscribe", &format!(r#"{{"uri":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
        c.push(case(
            &format!("setLevel level {bad}"),
            &[To::Legacy, To::Messages],
            req("logging/setLevel", &format!(r#"{{"level":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
        c.push(case(
            &format!("tasks/get taskId {bad}"),
            &[To::Legacy, To::Messages],
            req("tasks/get", &format!(r#"{{"taskId":{bad}}}"#)),
            Rpc(-32602, id7),
        ));
    }
    c.push(case(
        "setLevel unknown level",
        &[To::Legacy, To::Messages],
        req("logging/setLevel", r#"{"level":"LOUD"}"#),
        Rpc(-32602, id7),
    ));
    c
}

/// An error body: JSON-RPC 2.0, the code, a message, and the id echoed exactly or absent.
fn assert_error_body(name: &str, text: &str, code: i64, id: Option<&str>) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}: {text:?}"));
    assert_eq!(v["jsonrpc"], "2.0", "{name}: {text}");
    assert_eq!(v["error"]["code"], code, "{name}: {text}");
    assert!(v["error"]["message"].is_string(), "{name}: {text}");
    match id {
        None => assert!(
            v.get("id").is_none(),
            "{name}: id must be omitted, never null: {text}"
        ),
        Some(id) => assert!(
            text.contains(&format!(r#""id":{id}"#)),
            "{name}: {text} should echo id {id}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_input_gets_its_defined_error_and_the_gateway_keeps_serving() {
    let limit = LIMIT.to_string();
    let gw = TestGateway::start(&["--max-body-bytes", &limit, "--request-timeout", "10"]).await;
    let sid = gw.session().await;
    let mut sse = SseConn::open(&gw).await;
    let cases = corpus();
    let mut sent = 0;
    for c in &cases {
        for &to in c.to {
            sent += 1;
            let what = format!("{} → {to:?}", c.name);
            let (status, ctype, text) = match to {
                To::Legacy | To::Modern => {
                    let (session, headers) = match to {
                        To::Legacy => (Some(sid.as_str()), &[][..]),
                        _ => (None, MODERN_CALL_HEADERS),
                    };
                    let r = bounded(&what, gw.post_raw(session, c.body.clone(), headers)).await;
                    let ctype = r.content_type().to_owned();
                    (r.status, ctype, r.text)
                }
                To::Messages => {
                    let (status, text) = sse.post(c.body.clone()).await;
                    (status, String::new(), text)
                }
            };
            match (c.want, to) {
                (Want::Http(code_status, code, id), _) => {
                    assert_eq!(status.as_u16(), code_status, "{what}: {text}");
                    if to != To::Messages {
                        assert_eq!(ctype, "application/json", "{what}");
                    }
                    assert_error_body(&what, &text, code, id);
                }
                (Want::Rpc(code, id), To::Messages) => {
                    assert_eq!(status, StatusCode::ACCEPTED, "{what}: {text}");
                    let answer = sse.next().await;
                    assert_error_body(&what, &answer.to_string(), code, id);
                }
                (Want::Rpc(code, id), _) => {
                    assert_eq!(status, StatusCode::OK, "{what}: {text}");
                    let body = if ctype.starts_with("text/event-stream") {
                        let data = sse_data(&text);
                        assert_eq!(data.len(), 1, "{what}: {text}");
                        data[0].clone()
                    } else {
                        text
                    };
                    assert_error_body(&what, &body, code, id);
                }
                (Want::Ignored, _) => {
                    assert_eq!(status, StatusCode::ACCEPTED, "{what}: {text}");
                }
            }
            // The gateway keeps serving, and nothing of the case is left on the stream.
            let r = bounded(
                "a real request after a malformed one",
                gw.call_tool(
                    Some(&sid),
                    json!("after"),
                    "echo",
                    json!({"text": "still here"}),
                ),
            )
            .await;
            assert_eq!(tool_text(&r.json()), "still here", "after {what}");
            if to == To::Messages {
                sse.sentinel("after").await;
            }
        }
    }
    // Over the body limit. Sent the way a careful client sends a large body (`Expect:
    // 100-continue`, body held back): a client that streams the whole body may see the
    // connection reset before it reads the 413, because the gateway closes the connection
    // without reading the refused body.
    let addr = gw.base().trim_start_matches("http://").to_owned();
    let size = LIMIT + 1;
    for (path, extra) in [
        ("/mcp".to_owned(), format!("Mcp-Session-Id: {sid}\r\n")),
        (
            "/mcp".to_owned(),
            format!(
                "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
            ),
        ),
        (
            sse.post_url.trim_start_matches(&gw.base()).to_owned(),
            String::new(),
        ),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: {BOTH}\r\n\
             Content-Type: application/json\r\nContent-Length: {size}\r\n\
             Expect: 100-continue\r\n{extra}\r\n"
        );
        let (status, body) = raw_http(&addr, head.as_bytes()).await;
        assert_eq!(status, 413, "{path}: {body}");
        assert_error_body(&path, &body, -32600, None);
        sent += 1;
    }
    sse.sentinel("after-413").await;
    println!("malformed corpus: {} cases, {sent} requests", cases.len());
}

/// One header value, as raw bytes.
fn hv(bytes: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_header_values_get_their_defined_errors() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let junk: &[u8] = b"\xff\xfe\x80bad";
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    let modern_call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"t"},"_meta":modern_meta()}})
    .to_string();
    let base = |session: bool| {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("accept", HeaderValue::from_static(BOTH));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        if session {
            h.insert("mcp-session-id", HeaderValue::from_str(&sid).unwrap());
        }
        h
    };
    let modern = || {
        let mut h = base(false);
        h.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
        h.insert("mcp-method", HeaderValue::from_static("tools/call"));
        h.insert("mcp-name", HeaderValue::from_static("echo"));
        h
    };
    // (what, method, headers with one value replaced by junk, body, status, code, id)
    type Row = (
        &'static str,
        reqwest::Method,
        reqwest::header::HeaderMap,
        String,
        u16,
        i64,
        Option<&'static str>,
    );
    let with = |mut h: reqwest::header::HeaderMap, name: &'static str| {
        h.insert(HeaderName::from_static(name), hv(junk));
        h
    };
    let post = reqwest::Method::POST;
    let rows: Vec<Row> = vec![
        (
            "POST Mcp-Session-Id",
            post.clone(),
            with(base(false), "mcp-session-id"),
            ping.into(),
            404,
            -32001,
            Some("7"),
        ),
        (
            "POST MCP-Protocol-Version",
            post.clone(),
            with(base(true), "mcp-protocol-version"),
            ping.into(),
            400,
            -32600,
            None,
        ),
        (
            "POST Accept",
            post.clone(),
            with(base(true), "accept"),
            ping.into(),
            406,
            -32600,
            None,
        ),
        (
            "POST Content-Type",
            post.clone(),
            with(base(true), "content-type"),
            ping.into(),
            415,
            -32600,
            None,
        ),
        (
            "POST Origin",
            post.clone(),
            with(base(true), "origin"),
            ping.into(),
            403,
            -32600,
            None,
        ),
        (
            "Modern Mcp-Method",
            post.clone(),
            with(modern(), "mcp-method"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "Modern Mcp-Name",
            post.clone(),
            with(modern(), "mcp-name"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "Modern MCP-Protocol-Version",
            post.clone(),
            with(modern(), "mcp-protocol-version"),
            modern_call.clone(),
            400,
            -32020,
            Some("7"),
        ),
        (
            "GET Mcp-Session-Id",
            reqwest::Method::GET,
            with(base(false), "mcp-session-id"),
            String::new(),
            404,
            -32001,
            None,
        ),
        (
            "GET MCP-Protocol-Version",
            reqwest::Method::GET,
            with(base(true), "mcp-protocol-version"),
            String::new(),
            400,
            -32600,
            None,
        ),
        (
            "GET Origin",
            reqwest::Method::GET,
            with(base(true), "origin"),
            String::new(),
            403,
            -32600,
            None,
        ),
        (
            "DELETE Mcp-Session-Id",
            reqwest::Method::DELETE,
            with(base(false), "mcp-session-id"),
            String::new(),
            404,
            -32001,
            None,
        ),
        (
            "DELETE MCP-Protocol-Version",
            reqwest::Method::DELETE,
            with(base(true), "mcp-protocol-version"),
            String::new(),
            400,
            -32600,
            None,
        ),
        (
            "DELETE Origin",
            reqwest::Method::DELETE,
            with(base(true), "origin"),
            String::new(),
            403,
            -32600,
            None,
        ),
    ];
    for (what, method, headers, body, status, code, id) in rows {
        let r = bounded(
            what,
            gw.http
                .request(method, &gw.url)
                .headers(headers)
                .body(body)
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), status, "{what}");
        assert_error_body(what, &r.text().await.unwrap(), code, id);
        let r = gw
            .call_tool(Some(&sid), json!(1), "echo", json!({"text": "still here"}))
            .await;
        assert_eq!(tool_text(&r.json()), "still here", "after {what}");
    }
    // A junk Last-Event-ID names no event: the stream opens and replays nothing.
    let r = gw
        .http
        .get(&gw.url)
        .headers(with(base(true), "last-event-id"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(r);
    // The session survived every case.
    let r = gw
        .call_tool(Some(&sid), json!(2), "echo", json!({"text": "done"}))
        .await;
    assert_eq!(tool_text(&r.json()), "done");
}

/// Sends raw bytes as one HTTP/1.1 request; returns (status, body).
async fn raw_http(addr: &str, request: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut buf = Vec::new();
    bounded("a raw HTTP answer", s.read_to_end(&mut buf))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_headers_are_refused_and_the_gateway_keeps_serving() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let addr = gw.base().trim_start_matches("http://").to_owned();
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    let headers = [
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Accept",
        "Content-Type",
        "Last-Event-ID",
        "Origin",
    ];
    for name in headers {
        for ctl in [&b"\x01"[..], b"\x00", b"\x7f", b"\x1b[2J", b"a\rb"] {
            for method in ["POST", "GET", "DELETE"] {
                let mut head = format!(
                    "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                     Accept: {BOTH}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n",
                    if method == "POST" { ping.len() } else { 0 }
                )
                .into_bytes();
                head.extend_from_slice(name.as_bytes());
                head.extend_from_slice(b": x");
                head.extend_from_slice(ctl);
                head.extend_from_slice(format!("{sid}\r\n\r\n").as_bytes());
                if method == "POST" {
                    head.extend_from_slice(ping.as_bytes());
                }
                let (status, body) = raw_http(&addr, &head).await;
                // Refused by the HTTP parser before any handler runs (no JSON-RPC body can be
                // produced there), or by the gateway with its JSON-RPC error.
                assert!(
                    (400..500).contains(&status),
                    "{method} {name} {ctl:?}: {status} {body}"
                );
                if !body.is_empty() {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    assert!(v["error"]["code"].is_i64(), "{body}");
                    assert!(!v.get("id").is_some_and(Value::is_null), "{body}");
                }
            }
        }
    }
    let r = gw
        .call_tool(Some(&sid), json!(1), "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(tool_text(&r.json()), "still here");
}

/// A deeply nested payload must never reach a backend that cannot parse it: a Python backend
/// dies of `RecursionError` (taking every session with it), a serde_json one never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_never_reaches_the_shared_backend() {
    let gw = pushy(&[]).await;
    let sid = gw.session().await;
    let n = 5_000;
    let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"stats","arguments":{{"deep":{deep}}}}}}}"#
    );
    let r = bounded("deep request", gw.post_raw(Some(&sid), body, &[])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_error_body("deep", &r.text, -32600, Some("7"));
    // The backend is alive for everyone.
    let st = crate::common::backend_stats(&gw, &sid).await;
    assert!(st["held"].is_array(), "{st}");
}
