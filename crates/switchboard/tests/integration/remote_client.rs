//! `switchboard_upstream::remote::RemoteClient` against a real remote: `fixture --http` as a
//! child process, and hand-written misbehaving servers on raw sockets for the fault cases.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchboard_upstream::remote::{
    Outgoing, RemoteClient, RemoteConfig, RemoteError, RemoteResponse, RemoteSink,
};
use switchboard_wire::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::fixture_http::FixtureHttp;

/// Records every delivered message and forwards it to the test.
#[derive(Debug)]
struct Recorder {
    seen: Mutex<Vec<Value>>,
    tx: mpsc::Sender<Value>,
}

impl RemoteSink for Recorder {
    fn deliver(&self, line: &Bytes, _msg: &Message<'_>) {
        let v: Value = serde_json::from_slice(line).unwrap();
        self.seen.lock().push(v.clone());
        let _ = self.tx.try_send(v);
    }
}

fn client(
    url: &str,
    tweak: impl FnOnce(&mut RemoteConfig),
) -> (RemoteClient, Arc<Recorder>, mpsc::Receiver<Value>) {
    let (tx, rx) = mpsc::channel(64);
    let sink = Arc::new(Recorder {
        seen: Mutex::new(Vec::new()),
        tx,
    });
    let mut config = RemoteConfig::new(url);
    tweak(&mut config);
    let client = RemoteClient::new(config, sink.clone()).unwrap();
    (client, sink, rx)
}

async fn call(
    c: &RemoteClient,
    id: &str,
    method: &str,
    params: Value,
) -> Result<RemoteResponse, RemoteError> {
    let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let raw = json!(id).to_string();
    c.call(Outgoing {
        line: Bytes::from(line.to_string()),
        id: &raw,
        headers: Vec::new(),
        stateless: false,
    })
    .await
}

async fn initialize(c: &RemoteClient, capabilities: Value) {
    let answer = call(
        c,
        "init",
        "initialize",
        json!({"protocolVersion": "2025-11-25",
        "capabilities": capabilities, "clientInfo": {"name": "remote-test", "version": "1"}}),
    )
    .await
    .unwrap();
    assert!(!answer.is_error(), "{:?}", answer.line());
    assert!(c.has_session());
    c.set_protocol_version("2025-11-25");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    c.send(Bytes::from(initialized.to_string())).await.unwrap();
}

fn payload(r: &RemoteResponse) -> Value {
    serde_json::from_str(r.payload()).unwrap()
}

#[tokio::test]
async fn a_streamed_answer_arrives_after_the_messages_before_it() {
    let fx = FixtureHttp::start(&[]).await;
    let (c, sink, _rx) = client(&fx.url, |_| {});
    initialize(&c, json!({})).await;
    let answer = call(
        &c,
        "k1",
        "tools/call",
        json!({"name": "progress",
        "arguments": {"steps": 3}, "_meta": {"progressToken": "t"}}),
    )
    .await
    .unwrap();
    assert_eq!(payload(&answer)["content"][0]["text"], "done");
    // Every progress note was delivered, in order, before the call resolved.
    let seen = sink.seen.lock().clone();
    let steps: Vec<_> = seen
        .iter()
        .map(|m| m["params"]["progress"].clone())
        .collect();
    assert_eq!(steps, vec![json!(1), json!(2), json!(3)]);
    // A JSON answer (no notes) resolves the same way.
    let answer = call(
        &c,
        "k2",
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    )
    .await
    .unwrap();
    assert_eq!(payload(&answer)["structuredContent"]["text"], "x");
}

#[tokio::test]
async fn a_server_request_reaches_the_sink_and_its_answer_goes_back() {
    let fx = FixtureHttp::start(&[]).await;
    let (c, _sink, mut rx) = client(&fx.url, |_| {});
    initialize(&c, json!({"sampling": {}})).await;
    let pending = tokio::spawn({
        let c = c.clone();
        async move {
            call(
                &c,
                "s1",
                "tools/call",
                json!({"name": "test_sampling", "arguments": {"prompt": "p"}}),
            )
            .await
        }
    });
    let request = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"role": "assistant",
        "model": "m", "content": {"type": "text", "text": "from-the-client"}}});
    c.send(Bytes::from(answer.to_string())).await.unwrap();
    let result = pending.await.unwrap().unwrap();
    assert!(
        result.payload().contains("from-the-client"),
        "{}",
        result.payload()
    );
}

#[tokio::test]
async fn a_restarted_remote_is_session_lost_and_a_new_session_works() {
    let mut fx = FixtureHttp::start(&[]).await;
    let (c, _sink, _rx) = client(&fx.url, |_| {});
    initialize(&c, json!({})).await;
    let port = fx.port();
    assert!(fx.terminate().await.success());
    let _fx = FixtureHttp::start_at(port, &[]).await;
    let lost = call(&c, "k", "tools/list", json!({})).await;
    assert!(matches!(lost, Err(RemoteError::SessionLost)), "{lost:?}");
    assert!(!c.has_session(), "a lost session is forgotten");
    initialize(&c, json!({})).await;
    assert!(!call(&c, "k2", "tools/list", json!({}))
        .await
        .unwrap()
        .is_error());
}

#[tokio::test]
async fn modern_calls_are_stateless_and_keep_their_error_status() {
    let fx = FixtureHttp::start(&[]).await;
    let (c, _sink, _rx) = client(&fx.url, |_| {});
    initialize(&c, json!({})).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let h = |k: &'static str, v: &'static str| {
        (HeaderName::from_static(k), HeaderValue::from_static(v))
    };
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": meta}});
    let answer = c
        .call(Outgoing {
            line: Bytes::from(line.to_string()),
            id: "1",
            headers: vec![
                h("mcp-protocol-version", "2026-07-28"),
                h("mcp-method", "ping"),
            ],
            stateless: true,
        })
        .await
        .unwrap();
    // 404 here is "method not found", not a lost session: the request carried none.
    assert_eq!(answer.status(), 404);
    assert!(answer.is_error());
    assert!(c.has_session());
}

#[tokio::test]
async fn the_listen_stream_delivers_session_notifications() {
    let fx = FixtureHttp::start(&[]).await;
    let (c, _sink, mut rx) = client(&fx.url, |_| {});
    initialize(&c, json!({})).await;
    let mut listen = c.listen();
    assert!(listen.opened().await);
    call(
        &c,
        "t",
        "tools/call",
        json!({"name": "trigger", "arguments": {"kind": "tools_list_changed"}}),
    )
    .await
    .unwrap();
    let note = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(note["method"], "notifications/tools/list_changed");
}

/// A one-shot HTTP server: reads a request head, writes `head`, then `body` chunks until the
/// peer goes away (`repeat`) or once.
async fn canned(head: &'static str, chunk: &'static [u8], repeat: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        let mut buf = vec![0u8; 16 * 1024];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        loop {
            if sock.write_all(chunk).await.is_err() || !repeat {
                break;
            }
        }
        // Hold the connection open until the client drops it.
        let _ = sock.read(&mut buf).await;
    });
    url
}

#[tokio::test]
async fn an_html_answer_is_a_clear_error() {
    let url = canned(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 15\r\n\r\n",
        b"<html>hi</html>",
        false,
    )
    .await;
    let (c, _sink, _rx) = client(&url, |_| {});
    match call(&c, "k", "tools/list", json!({})).await {
        Err(RemoteError::NotJson {
            status: 200,
            content_type,
        }) => assert_eq!(content_type, "text/html"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_endless_event_is_cut_at_the_message_bound() {
    let url = canned(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ",
        &[b'x'; 8192],
        true,
    )
    .await;
    let (c, _sink, _rx) = client(&url, |cfg| cfg.max_message_bytes = 64 * 1024);
    let result = call(&c, "k", "tools/list", json!({})).await;
    assert!(
        matches!(result, Err(RemoteError::TooLarge { limit: 65536 })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_stream_that_never_answers_is_cut_at_the_stream_bound() {
    let url = canned(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        b": keep-alive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n",
        true,
    )
    .await;
    let (c, sink, _rx) = client(&url, |cfg| cfg.max_stream_bytes = 256 * 1024);
    let result = call(&c, "k", "tools/list", json!({})).await;
    assert!(
        matches!(result, Err(RemoteError::TooLarge { limit: 262144 })),
        "{result:?}"
    );
    assert!(
        !sink.seen.lock().is_empty(),
        "what came before the cut was delivered"
    );
}

#[tokio::test]
async fn a_silent_remote_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let (c, _sink, _rx) = client(&url, |cfg| cfg.call_timeout = Duration::from_millis(300));
    let result = call(&c, "k", "tools/list", json!({})).await;
    assert!(matches!(result, Err(RemoteError::Timeout)), "{result:?}");
    drop(listener);
}
