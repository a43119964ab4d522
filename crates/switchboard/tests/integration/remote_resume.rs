//! A Streamable HTTP response stream cut before its answer: resumed with `Last-Event-ID` when
//! the remote gave event ids, failed (never silence) when it did not. Scripted remotes on raw
//! sockets, one canned response per connection, recording what the client sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchboard_upstream::remote::{Outgoing, RemoteClient, RemoteConfig, RemoteError, RemoteSink};
use switchboard_wire::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Default)]
struct Seen(Mutex<Vec<Value>>);

impl RemoteSink for Seen {
    fn deliver(&self, line: &Bytes, _msg: &Message<'_>) {
        self.0.lock().push(serde_json::from_slice(line).unwrap());
    }
}

/// Serves `responses` in order, one per connection (each closed after its response); returns
/// the URL and the request heads received.
async fn scripted(responses: Vec<&'static str>) -> (String, Arc<Mutex<Vec<String>>>) {
    let (url, heads, _) = scripted_timed(responses).await;
    (url, heads)
}

/// When each connection was taken and when its response was cut.
type Times = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// [`scripted`], also noting when each connection was accepted and when it was closed.
async fn scripted_timed(responses: Vec<&'static str>) -> (String, Arc<Mutex<Vec<String>>>, Times) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let times: Times = Arc::default();
    let seen = heads.clone();
    let timed = times.clone();
    tokio::spawn(async move {
        for response in responses {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let accepted = Instant::now();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            seen.lock()
                .push(String::from_utf8_lossy(&got).to_ascii_lowercase());
            let _ = sock.write_all(response.as_bytes()).await;
            // Dropped here: the stream ends mid-response, as when a connection is cut.
            drop(sock);
            timed.lock().push((accepted, Instant::now()));
        }
    });
    (url, heads, times)
}

const CUT_AFTER_E1: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\nconnection: close\r\n\r\nid: e1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n";
const REPLAY_ANSWER: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\nid: e2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"k1\",\"result\":{\"resumed\":true}}\n\n";
/// A priming event (an id and `retry`, no data: nothing to dispatch), then the cut.
const PRIMED_WITH_RETRY: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\nconnection: close\r\n\r\nid: p1\nretry: 600\n\n";
const CUT_WITHOUT_IDS: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\nconnection: close\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n";

async fn call(url: &str, sink: Arc<Seen>) -> Result<Value, RemoteError> {
    let mut config = RemoteConfig::new(url);
    config.call_timeout = Duration::from_secs(10);
    let client = RemoteClient::new(config, sink).unwrap();
    let line = json!({"jsonrpc":"2.0","id":"k1","method":"tools/call","params":{"name":"slow"}});
    let answer = client
        .call(Outgoing {
            line: Bytes::from(line.to_string()),
            id: r#""k1""#,
            headers: Vec::new(),
            stateless: false,
        })
        .await?;
    Ok(serde_json::from_str(answer.payload()).unwrap())
}

#[tokio::test]
async fn a_cut_response_stream_is_resumed_after_its_last_event() {
    let (url, heads) = scripted(vec![CUT_AFTER_E1, REPLAY_ANSWER]).await;
    let sink = Arc::new(Seen::default());
    let answer = call(&url, sink.clone())
        .await
        .expect("answered after resuming");
    assert_eq!(answer, json!({"resumed": true}));
    let heads = heads.lock().clone();
    assert_eq!(heads.len(), 2, "one POST, one resuming GET: {heads:?}");
    assert!(heads[1].starts_with("get "), "{}", heads[1]);
    assert!(heads[1].contains("last-event-id: e1"), "{}", heads[1]);
    assert!(heads[1].contains("mcp-session-id: s1"), "{}", heads[1]);
    let seen = sink.0.lock().clone();
    assert_eq!(
        seen.len(),
        1,
        "the event before the cut was delivered once: {seen:?}"
    );
}

#[tokio::test]
async fn a_cut_stream_without_event_ids_fails_the_call() {
    let (url, heads) = scripted(vec![CUT_WITHOUT_IDS, REPLAY_ANSWER]).await;
    let result = call(&url, Arc::new(Seen::default())).await;
    assert!(matches!(result, Err(RemoteError::NoAnswer)), "{result:?}");
    assert_eq!(heads.lock().len(), 1, "nothing to resume from, so no GET");
}

/// SEP-1699 (the conformance suite's `sse-retry`): a cut stream is resumed no sooner than the
/// `retry` the remote gave, from the id of a priming event that carried no data.
#[tokio::test]
async fn a_cut_stream_is_resumed_after_the_retry_the_remote_asked_for() {
    let (url, heads, times) = scripted_timed(vec![PRIMED_WITH_RETRY, REPLAY_ANSWER]).await;
    let answer = call(&url, Arc::new(Seen::default()))
        .await
        .expect("answered after resuming");
    assert_eq!(answer, json!({"resumed": true}));
    let heads = heads.lock().clone();
    assert_eq!(heads.len(), 2, "one POST, one resuming GET: {heads:?}");
    assert!(heads[1].starts_with("get "), "{}", heads[1]);
    assert!(heads[1].contains("last-event-id: p1"), "{}", heads[1]);
    let times = times.lock().clone();
    let waited = times[1].0.duration_since(times[0].1);
    assert!(
        waited >= Duration::from_millis(550),
        "reconnected {waited:?} after the cut; the remote asked for 600 ms"
    );
}
