//! `switchboard_upstream::remote::SseClient` (HTTP+SSE, 2024-11-05) against a real remote:
//! `fixture --http`'s `/sse` as a child process, and hand-written servers on raw sockets for
//! the fault cases.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchboard_upstream::remote::{
    Outgoing, RemoteConfig, RemoteError, RemoteResponse, RemoteSink, SseClient,
};
use switchboard_wire::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

use crate::fixture_http::FixtureHttp;

/// Every wait in this file: generous, so only a hang fails on it.
const WAIT: Duration = Duration::from_secs(10);

/// Records every delivered message (and forwards it to the test) and counts stream ends.
#[derive(Debug)]
struct Recorder {
    seen: Mutex<Vec<Value>>,
    closed: AtomicUsize,
    tx: mpsc::Sender<Value>,
}

impl RemoteSink for Recorder {
    fn deliver(&self, line: &Bytes, _msg: &Message<'_>) {
        let v: Value = serde_json::from_slice(line).unwrap();
        self.seen.lock().push(v.clone());
        let _ = self.tx.try_send(v);
    }
    fn listen_closed(&self, reason: &RemoteError) {
        assert!(matches!(reason, RemoteError::SessionLost), "{reason:?}");
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

type Connected = (SseClient, Arc<Recorder>, mpsc::Receiver<Value>);

async fn connect(
    url: &str,
    tweak: impl FnOnce(&mut RemoteConfig),
) -> Result<Connected, RemoteError> {
    let (tx, rx) = mpsc::channel(64);
    let sink = Arc::new(Recorder {
        seen: Mutex::new(Vec::new()),
        closed: AtomicUsize::new(0),
        tx,
    });
    let mut config = RemoteConfig::new(url);
    tweak(&mut config);
    let opening = SseClient::connect(config, sink.clone());
    let client = tokio::time::timeout(WAIT, opening)
        .await
        .expect("connect hung")?;
    Ok((client, sink, rx))
}

async fn call(
    c: &SseClient,
    id: Value,
    method: &str,
    params: Value,
) -> Result<RemoteResponse, RemoteError> {
    let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let raw = id.to_string();
    c.call(Outgoing {
        line: Bytes::from(line.to_string()),
        id: &raw,
        headers: Vec::new(),
        stateless: false,
    })
    .await
}

fn tool(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

fn payload(r: &RemoteResponse) -> Value {
    serde_json::from_str(r.payload()).unwrap()
}

async fn fixture_session(capabilities: Value) -> (FixtureHttp, Connected) {
    let fx = FixtureHttp::start(&[]).await;
    let connected = connect(&format!("{}/sse", fx.base()), |_| {})
        .await
        .unwrap();
    let c = &connected.0;
    let init = call(
        c,
        json!(0),
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": capabilities,
               "clientInfo": {"name": "sse-client-test", "version": "1"}}),
    )
    .await
    .unwrap();
    assert!(!init.is_error(), "{:?}", init.line());
    assert!(payload(&init)["serverInfo"].is_object());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    c.send(Bytes::from(initialized.to_string()), &[])
        .await
        .unwrap();
    (fx, connected)
}

#[tokio::test]
async fn a_fixture_session_answers_every_call_by_its_own_id() {
    let (_fx, (c, sink, _rx)) = fixture_session(json!({})).await;
    let tools = call(&c, json!("l"), "tools/list", json!({})).await.unwrap();
    let names = payload(&tools)["tools"].to_string();
    assert!(names.contains("\"echo\""), "{names}");
    let echoed = call(
        &c,
        json!(1),
        "tools/call",
        tool("echo", json!({"text": "x"})),
    );
    assert_eq!(
        payload(&echoed.await.unwrap())["structuredContent"]["text"],
        "x"
    );

    // Integer and string ids, answered in roughly reverse order of sending.
    let calls = (0..32u64).map(|i| {
        let id = if i % 2 == 0 {
            json!(9_007_199_254_740_993u64 + i)
        } else {
            json!(format!("c{i}"))
        };
        let args = json!({"text": format!("t{i}"), "delayMs": (32 - i) * 5});
        let c = c.clone();
        async move {
            let answer = call(&c, id.clone(), "tools/call", tool("echo", args))
                .await
                .unwrap();
            (i, id, answer)
        }
    });
    for (i, id, answer) in futures::future::join_all(calls).await {
        let line: Value = serde_json::from_slice(answer.line()).unwrap();
        assert_eq!(line["id"], id);
        assert_eq!(
            payload(&answer)["structuredContent"]["text"],
            format!("t{i}")
        );
    }
    assert_eq!(c.pending_len(), 0);
    assert!(!c.is_closed());
    // Dropping the last clone ends the session, reported once.
    drop(c);
    assert_eq!(sink.closed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn notifications_a_call_causes_reach_the_sink_before_its_answer() {
    let (_fx, (c, sink, _rx)) = fixture_session(json!({})).await;
    let params = json!({"name": "progress", "arguments": {"steps": 3},
                        "_meta": {"progressToken": "pt"}});
    let answer = call(&c, json!("p"), "tools/call", params).await.unwrap();
    assert_eq!(payload(&answer)["content"][0]["text"], "done");
    // Already delivered, in order, when the call resolved: no waiting here.
    let steps: Vec<_> = sink
        .seen
        .lock()
        .iter()
        .map(|m| m["params"]["progress"].clone())
        .collect();
    assert_eq!(steps, vec![json!(1), json!(2), json!(3)]);
}

#[tokio::test]
async fn a_server_request_reaches_the_sink_and_its_answer_goes_back() {
    let (_fx, (c, _sink, mut rx)) = fixture_session(json!({"sampling": {}})).await;
    let pending = tokio::spawn({
        let c = c.clone();
        async move {
            let args = json!({"prompt": "p"});
            call(&c, json!("s"), "tools/call", tool("test_sampling", args)).await
        }
    });
    let request = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"role": "assistant",
        "model": "m", "content": {"type": "text", "text": "from-the-client"}}});
    c.send(Bytes::from(answer.to_string()), &[]).await.unwrap();
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        result.payload().contains("from-the-client"),
        "{}",
        result.payload()
    );
}

#[tokio::test]
async fn a_dropped_call_leaves_nothing_pending() {
    let (_fx, (c, _sink, _rx)) = fixture_session(json!({})).await;
    // Boxed, so that dropping it drops the future itself.
    let mut slow = Box::pin(call(
        &c,
        json!("d"),
        "tools/call",
        tool("slow", json!({"ms": 5000})),
    ));
    assert!(tokio::time::timeout(Duration::from_millis(200), &mut slow)
        .await
        .is_err());
    assert_eq!(c.pending_len(), 1, "the call was registered");
    drop(slow);
    assert_eq!(c.pending_len(), 0);
    // The session is unaffected.
    let echoed = call(
        &c,
        json!("d"),
        "tools/call",
        tool("echo", json!({"text": "after"})),
    );
    assert_eq!(
        payload(&echoed.await.unwrap())["structuredContent"]["text"],
        "after"
    );
}

#[tokio::test]
async fn close_fails_pending_calls_and_ends_the_session_once() {
    let (_fx, (c, sink, _rx)) = fixture_session(json!({})).await;
    {
        let slow = call(
            &c,
            json!(1),
            "tools/call",
            tool("slow", json!({"ms": 30000})),
        );
        tokio::pin!(slow);
        // The first poll registers the call (and starts its POST).
        assert!(futures::poll!(&mut slow).is_pending());
        assert_eq!(c.pending_len(), 1);
        c.close();
        let result = tokio::time::timeout(WAIT, slow).await.unwrap();
        assert!(
            matches!(result, Err(RemoteError::SessionEndedInFlight)),
            "{result:?}"
        );
    }
    assert!(c.is_closed());
    let again = call(&c, json!(2), "ping", json!({})).await;
    assert!(matches!(again, Err(RemoteError::SessionLost)), "{again:?}");
    let note = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert!(matches!(
        c.send(note, &[]).await,
        Err(RemoteError::SessionLost)
    ));
    drop(c);
    assert_eq!(sink.closed.load(Ordering::SeqCst), 1);
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// What a hand-written server does with the GET.
#[derive(Debug, Clone, Copy)]
enum Get {
    /// The SSE head and an `endpoint` event with this data, then holds the stream open.
    Endpoint(&'static str),
    /// The endpoint `/messages?session_id=s1`, then closes the stream once a POST arrived.
    CloseAfterPost,
    /// The endpoint, then one endless event once a POST arrived.
    FloodAfterPost,
    /// One endless event before any endpoint.
    FloodFirst,
    /// An HTML page.
    Html,
    /// Only keep-alive comments, forever.
    KeepAlivesOnly,
}

/// What it answers to a POST.
#[derive(Debug, Clone, Copy)]
enum Post {
    Accepted,
    HtmlError,
    /// 400 with a JSON-RPC error for id 1.
    RpcError,
}

/// A raw-socket HTTP+SSE server; `heads` holds every request head it read.
struct Fake {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
}

async fn fake(get: Get, post: Post) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let posted = Arc::new(Notify::new());
    let recorded = heads.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(sock, get, post, recorded.clone(), posted.clone()));
        }
    });
    Fake { url, heads }
}

async fn serve(
    mut sock: TcpStream,
    get: Get,
    post: Post,
    heads: Arc<Mutex<Vec<String>>>,
    posted: Arc<Notify>,
) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    heads.lock().push(head.clone());
    if head.starts_with("post ") {
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while got.len() < end + length {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let reply = match post {
            Post::Accepted => "HTTP/1.1 202 Accepted\r\ncontent-length: 8\r\n\r\nAccepted".into(),
            Post::HtmlError => "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\n\
                content-length: 20\r\n\r\n<html>oh no!!</html>"
                .to_owned(),
            Post::RpcError => {
                let body = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#;
                format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                    content-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        };
        let _ = sock.write_all(reply.as_bytes()).await;
        posted.notify_one();
        return;
    }
    let _ = answer_get(&mut sock, get, &posted).await;
    // Hold the connection open until the client leaves.
    let _ = sock.read(&mut buf).await;
}

async fn answer_get(sock: &mut TcpStream, get: Get, posted: &Notify) -> std::io::Result<()> {
    let endpoint = b"event: endpoint\ndata: /messages?session_id=s1\n\n";
    match get {
        Get::Html => {
            let page = "<html>login</html>";
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\r\n{page}",
                page.len()
            );
            sock.write_all(head.as_bytes()).await
        }
        Get::Endpoint(data) => {
            let event = format!("{SSE_HEAD}event: endpoint\ndata: {data}\n\n");
            sock.write_all(event.as_bytes()).await
        }
        Get::CloseAfterPost => {
            sock.write_all(SSE_HEAD.as_bytes()).await?;
            sock.write_all(endpoint).await?;
            posted.notified().await;
            sock.shutdown().await
        }
        Get::FloodAfterPost | Get::FloodFirst => {
            sock.write_all(SSE_HEAD.as_bytes()).await?;
            if matches!(get, Get::FloodAfterPost) {
                sock.write_all(endpoint).await?;
                posted.notified().await;
            }
            sock.write_all(b"event: message\ndata: ").await?;
            loop {
                sock.write_all(&[b'x'; 8192]).await?;
            }
        }
        Get::KeepAlivesOnly => {
            sock.write_all(SSE_HEAD.as_bytes()).await?;
            loop {
                sock.write_all(b": keep-alive\n\n").await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused() {
    for hostile in [
        "http://evil.example/messages?session_id=s1",
        "//evil.example/messages",
        "http://127.0.0.1:1/messages",
        "https://127.0.0.1/messages",
    ] {
        let server = fake(Get::Endpoint(hostile), Post::Accepted).await;
        let result = connect(&server.url, |_| {}).await;
        assert!(
            matches!(result, Err(RemoteError::Malformed(_))),
            "{hostile}: {:?}",
            result.err()
        );
        assert_eq!(server.heads.lock().len(), 1, "nothing was posted anywhere");
    }
}

#[tokio::test]
async fn an_html_answer_to_the_get_is_not_json() {
    let server = fake(Get::Html, Post::Accepted).await;
    match connect(&server.url, |_| {}).await.err() {
        Some(RemoteError::NotJson {
            status: 200,
            content_type,
        }) => {
            assert_eq!(content_type, "text/html");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_closed_stream_fails_the_pending_call_at_once() {
    let server = fake(Get::CloseAfterPost, Post::Accepted).await;
    let secret = (
        HeaderName::from_static("authorization"),
        HeaderValue::from_static("Bearer s3"),
    );
    let (c, sink, _rx) = connect(&server.url, |cfg| {
        cfg.headers.push(secret);
        // Far longer than the test's wait: only the stream's end can resolve the call in time.
        cfg.call_timeout = Duration::from_secs(120);
    })
    .await
    .unwrap();
    let result = tokio::time::timeout(WAIT, call(&c, json!(1), "tools/list", json!({})))
        .await
        .expect("the call hung after the stream closed");
    assert!(
        matches!(result, Err(RemoteError::SessionEndedInFlight)),
        "{result:?}"
    );
    assert!(c.is_closed());
    assert_eq!(c.pending_len(), 0);
    assert_eq!(sink.closed.load(Ordering::SeqCst), 1);
    let heads = server.heads.lock().clone();
    assert!(heads[0].starts_with("get /sse "), "{heads:?}");
    assert!(
        heads[1].starts_with("post /messages?session_id=s1 "),
        "{heads:?}"
    );
    assert!(
        heads
            .iter()
            .all(|h| h.contains("\r\nauthorization: bearer s3\r\n")),
        "{heads:?}"
    );
    drop(c);
    assert_eq!(
        sink.closed.load(Ordering::SeqCst),
        1,
        "reported exactly once"
    );
}

#[tokio::test]
async fn an_endless_event_ends_the_session_instead_of_hanging() {
    let server = fake(Get::FloodAfterPost, Post::Accepted).await;
    let (c, sink, _rx) = connect(&server.url, |cfg| {
        cfg.max_message_bytes = 64 * 1024;
        cfg.call_timeout = Duration::from_secs(120);
    })
    .await
    .unwrap();
    let result = tokio::time::timeout(WAIT, call(&c, json!(1), "tools/list", json!({})))
        .await
        .expect("the call hung on an endless event");
    assert!(
        matches!(result, Err(RemoteError::SessionEndedInFlight)),
        "{result:?}"
    );
    assert!(c.is_closed());
    assert_eq!(sink.closed.load(Ordering::SeqCst), 1);

    let first = fake(Get::FloodFirst, Post::Accepted).await;
    let result = connect(&first.url, |cfg| cfg.max_message_bytes = 64 * 1024).await;
    assert!(
        matches!(result, Err(RemoteError::TooLarge { limit: 65536 })),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn no_endpoint_within_the_connect_timeout_is_a_timeout() {
    let server = fake(Get::KeepAlivesOnly, Post::Accepted).await;
    let result = connect(&server.url, |cfg| {
        cfg.connect_timeout = Duration::from_millis(400)
    })
    .await;
    assert!(
        matches!(result, Err(RemoteError::Timeout)),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn a_failed_post_is_its_status_or_its_json_rpc_error() {
    let server = fake(Get::Endpoint("/messages"), Post::HtmlError).await;
    let (c, _sink, _rx) = connect(&server.url, |_| {}).await.unwrap();
    match call(&c, json!(1), "tools/list", json!({})).await {
        Err(e @ RemoteError::Status { status: 500 }) => {
            assert!(
                !e.to_string().contains("oh no"),
                "the body is never kept: {e}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.pending_len(), 0);

    let server = fake(Get::Endpoint("/messages"), Post::RpcError).await;
    let (c, _sink, _rx) = connect(&server.url, |_| {}).await.unwrap();
    let answer = call(&c, json!(1), "tools/list", json!({})).await.unwrap();
    assert!(answer.is_error());
    assert_eq!(answer.status(), 400);
    assert_eq!(payload(&answer)["code"], -32602);
}
