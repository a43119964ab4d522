//! A session's requests wait (bounded) for its listen stream: a remote may send what a call
//! makes it ask the client (an elicitation) on the GET stream alone, and drop it when that
//! stream is not open yet, as the TypeScript SDK's server does (the conformance suite's
//! `elicitation-sep1034-client-defaults`).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::remote::{Mode, RemoteConfig, RemoteEndpoint, RemoteUpstream};
use crate::{InboundSink, Upstream};

/// Records the methods of what the remote sent on its own.
#[derive(Debug, Default)]
struct Asked(Mutex<Vec<String>>);
impl InboundSink for Asked {
    fn deliver(&self, _: &bytes::Bytes, msg: &switchboard_wire::Message<'_>, _: &Upstream) {
        self.0
            .lock()
            .push(msg.method.unwrap_or_default().to_owned());
    }
}

/// A Legacy remote whose GET stream is accepted only after `delay`; a `tools/call` makes it
/// ask the client for input on that stream, if it is open (else the question is dropped).
async fn slow_listen_remote(delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stream: Arc<Mutex<Option<mpsc::UnboundedSender<String>>>> = Arc::default();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let stream = stream.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .filter_map(|l| l.split_once(':'))
                            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                            .and_then(|(_, v)| v.trim().parse().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                if head.starts_with("GET") {
                    tokio::time::sleep(delay).await;
                    let (tx, mut rx) = mpsc::unbounded_channel();
                    let open = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
                    if sock.write_all(open.as_bytes()).await.is_err() {
                        return;
                    }
                    *stream.lock() = Some(tx);
                    while let Some(event) = rx.recv().await {
                        if sock.write_all(event.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
                let request: Value = serde_json::from_str(&body).unwrap_or_default();
                let id = request["id"].clone();
                let result = match request["method"].as_str().unwrap_or_default() {
                    "initialize" => json!({"protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}),
                    "tools/call" => {
                        let ask = json!({"jsonrpc": "2.0", "id": "srv-1",
                            "method": "elicitation/create", "params": {"message": "ok?",
                            "requestedSchema": {"type": "object", "properties": {}}}});
                        if let Some(tx) = stream.lock().as_ref() {
                            let _ = tx.send(format!("data: {ask}\n\n"));
                        }
                        json!({"content": []})
                    }
                    _ => json!({}),
                };
                let reply = if id.is_null() {
                    "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else {
                    let json = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         mcp-session-id: s1\r\ncontent-length: {}\r\n\r\n{json}",
                        json.len()
                    )
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    url
}

fn request(key: &str, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": key, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_call_right_after_initialized_waits_for_the_listen_stream() {
    let url = slow_listen_remote(Duration::from_millis(300)).await;
    let endpoint = RemoteEndpoint::new(RemoteConfig::new(&url)).unwrap();
    let asked = Arc::new(Asked::default());
    let up = Upstream::Remote(RemoteUpstream::new(&endpoint, Mode::Session, asked.clone()));
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"}});
    let pending = up
        .call_as("k1", request("k1", "initialize", init), None)
        .await;
    assert!(!pending.unwrap().await.unwrap().is_error());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    up.send_line(initialized.to_string().into_bytes())
        .await
        .unwrap();
    let call = request("k2", "tools/call", json!({"name": "ask", "arguments": {}}));
    let answer = up.call_as("k2", call, None).await.unwrap().await.unwrap();
    assert!(!answer.is_error(), "{}", answer.payload());
    // The question went out on the listen stream after the call reached the remote.
    for _ in 0..100 {
        if !asked.0.lock().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*asked.0.lock(), ["elicitation/create"]);
}
