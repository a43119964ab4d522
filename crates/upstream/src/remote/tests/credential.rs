//! `forward_caller_token` against a loopback server that records every request's
//! `Authorization` headers: the caller's token replaces the static one only when configured,
//! a stateless handle never carries one caller's token into another's request, and a session
//! keeps its caller's token for what it sends on its own.

use std::sync::Arc;

use hyper::header::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::remote::{Mode, RemoteConfig, RemoteEndpoint, RemoteUpstream};
use crate::{Credential, InboundSink, Upstream};

#[derive(Debug)]
struct Quiet;
impl InboundSink for Quiet {
    fn deliver(&self, _: &bytes::Bytes, _: &switchboard_wire::Message<'_>, _: &Upstream) {}
}

type Seen = Arc<Mutex<Vec<Vec<String>>>>;

/// Answers every POST with `{"result":{}}` for its id (202 for a notification), one request
/// per connection; records each request's `Authorization` values, in arrival order.
async fn recorder() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let log = log.clone();
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
                        let len = content_length(head);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                let auth = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
                    .map(|(_, v)| v.trim().to_owned())
                    .collect();
                log.lock().push(auth);
                let reply = match serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("id").cloned())
                {
                    Some(id) => {
                        let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             mcp-session-id: s1\r\ncontent-length: {}\r\n\
                             connection: close\r\n\r\n{json}",
                            json.len()
                        )
                    }
                    None => "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\
                             connection: close\r\n\r\n"
                        .to_owned(),
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn upstream(url: &str, forward: bool, mode: Mode) -> Upstream {
    let mut config = RemoteConfig::new(url);
    config.headers = vec![(
        HeaderName::from_static("authorization"),
        HeaderValue::from_static("Bearer static"),
    )];
    config.forward_caller_token = forward;
    let endpoint = RemoteEndpoint::new(config).unwrap();
    Upstream::Remote(RemoteUpstream::new(&endpoint, mode, Arc::new(Quiet)))
}

fn line(key: &str, method: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":"{key}","method":"{method}","params":{{}}}}"#).into_bytes()
}

async fn call(up: &Upstream, key: &str, method: &str, who: Option<&Credential>) {
    let pending = up.call_as(key, line(key, method), who).await.unwrap();
    let answer = pending.await.unwrap();
    assert!(!answer.is_error(), "{answer:?}");
}

#[tokio::test]
async fn a_stateless_handle_sends_each_callers_token_with_its_own_request_only() {
    let (url, seen) = recorder().await;
    let up = upstream(&url, true, Mode::Stateless);
    let alice = Credential::bearer("alice-token").unwrap();
    let bob = Credential::bearer("bob-token").unwrap();
    call(&up, "k1", "tools/list", Some(&alice)).await;
    call(&up, "k2", "tools/list", None).await;
    call(&up, "k3", "tools/list", Some(&bob)).await;
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer alice-token".to_owned()],
            vec!["Bearer static".to_owned()],
            vec!["Bearer bob-token".to_owned()],
        ]
    );
}

#[tokio::test]
async fn without_the_option_a_callers_token_never_leaves() {
    let (url, seen) = recorder().await;
    for mode in [Mode::Stateless, Mode::Session] {
        let up = upstream(&url, false, mode);
        let alice = Credential::bearer("alice-token").unwrap();
        call(&up, "k1", "tools/list", Some(&alice)).await;
    }
    assert_eq!(
        *seen.lock(),
        vec![
            vec!["Bearer static".to_owned()],
            vec!["Bearer static".to_owned()]
        ]
    );
}

#[tokio::test]
async fn a_session_keeps_its_callers_token_for_what_it_sends_on_its_own() {
    let (url, seen) = recorder().await;
    let up = upstream(&url, true, Mode::Session);
    let alice = Credential::bearer("alice-token").unwrap();
    call(&up, "k1", "initialize", Some(&alice)).await;
    let note = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#;
    up.send_line(note.to_vec()).await.unwrap();
    let seen = seen.lock();
    assert_eq!(seen[0], vec!["Bearer alice-token".to_owned()]);
    assert_eq!(seen[1], vec!["Bearer alice-token".to_owned()]);
}
