//! How `run --url` learns a remote's era, judged by what the remote receives (the conformance
//! suite's client scenarios `request-metadata` and `http-standard-headers`): a `-32022` to
//! `server/discover` that lists the gateway's Modern version is retried with it; a refusal of
//! the Legacy probe with `-32020` is Modern evidence; every POST carries `Mcp-Method`.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::TestGateway;

/// One POST as the remote saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// `MCP-Protocol-Version`, `Mcp-Method`.
    version_header: Option<String>,
    method_header: Option<String>,
    meta_version: Option<String>,
}

/// A stateless Modern remote that refuses the first request with `-32022` (naming
/// 2026-07-28), as the suite's `request-metadata` mock does, and refuses any request without
/// the Modern headers and `_meta` with `-32020` (the Legacy `initialize` included);
/// `supported` is what its `server/discover` lists.
async fn modern_remote(supported: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (log, supported) = (log.clone(), supported.clone());
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
                        let len = header(head, "content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_owned(), body.to_owned());
                        }
                    }
                };
                if !head.starts_with("POST") {
                    let _ = sock
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    return;
                }
                let request: Value = serde_json::from_str(&body).unwrap_or_default();
                let meta = &request["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"];
                let got = Seen {
                    method: request["method"].as_str().unwrap_or_default().to_owned(),
                    version_header: header(&head, "mcp-protocol-version"),
                    method_header: header(&head, "mcp-method"),
                    meta_version: meta.as_str().map(str::to_owned),
                };
                let first = {
                    let mut log = log.lock();
                    log.push(got.clone());
                    log.len() == 1
                };
                let id = request["id"].clone();
                let (status, answer) = if id.is_null() {
                    ("202 Accepted", None)
                } else if got.version_header.is_none() || got.meta_version.is_none() {
                    let error =
                        json!({"code": -32020, "message": "Missing MCP-Protocol-Version header"});
                    (
                        "400 Bad Request",
                        Some(json!({"jsonrpc": "2.0", "id": id, "error": error})),
                    )
                } else if first {
                    let error = json!({"code": -32022, "message": "Unsupported protocol version",
                        "data": {"supported": ["2026-07-28"], "requested": got.version_header}});
                    (
                        "400 Bad Request",
                        Some(json!({"jsonrpc": "2.0", "id": id, "error": error})),
                    )
                } else {
                    let result = match got.method.as_str() {
                        "server/discover" => json!({"supportedVersions": supported,
                            "capabilities": {"tools": {}},
                            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "m", "version": "1"}}}),
                        "tools/list" => json!({"tools": [], "ttlMs": 0, "cacheScope": "private"}),
                        "initialize" => json!({"protocolVersion": "2025-11-25",
                            "capabilities": {"tools": {}}, "serverInfo": {"name": "m", "version": "1"}}),
                        _ => json!({}),
                    };
                    let mut result = result;
                    result["resultType"] = json!("complete");
                    (
                        "200 OK",
                        Some(json!({"jsonrpc": "2.0", "id": id, "result": result})),
                    )
                };
                let body = answer.map(|a| a.to_string()).unwrap_or_default();
                let kind = if body.is_empty() {
                    ""
                } else {
                    "content-type: application/json\r\n"
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\n{kind}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_owned())
}

async fn modern_tools_list(gw: &TestGateway) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let extra = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    gw.post_raw(None, body.to_string(), &extra).await.json()
}

#[tokio::test]
async fn a_modern_remote_gets_the_corrective_retry_and_the_standard_headers_on_every_post() {
    let (url, seen) = modern_remote(json!(["2026-07-28"])).await;
    // Without the retry the remote looked Legacy, and its refusal of the `initialize` that
    // followed stopped the gateway from starting.
    let gw = TestGateway::start(&["--url", &url]).await;
    let answer = modern_tools_list(&gw).await;
    assert_eq!(answer["result"]["tools"], json!([]), "{answer}");
    let seen = seen.lock().clone();
    let discovers = seen
        .iter()
        .filter(|s| s.method == "server/discover")
        .count();
    assert!(discovers >= 2, "the -32022 was retried: {seen:?}");
    let modern: Vec<_> = seen.iter().filter(|s| s.meta_version.is_some()).collect();
    assert!(
        modern.iter().skip(1).any(|s| s.method == "tools/list"),
        "{seen:?}"
    );
    for s in modern {
        assert_eq!(s.version_header.as_deref(), Some("2026-07-28"), "{s:?}");
        assert_eq!(s.meta_version, s.version_header, "{s:?}");
    }
    // Every POST names its method, the Legacy probe's `initialize` included.
    for s in &seen {
        assert_eq!(s.method_header.as_deref(), Some(s.method.as_str()), "{s:?}");
    }
}

/// A 2026-07-28 client sends a server that speaks it nothing else: the gateway connects to a
/// Modern remote without a Legacy `initialize` of its own, so until a Legacy client arrives
/// every request the remote gets carries `MCP-Protocol-Version` and `_meta` (the suite's
/// `request-metadata`). The first Legacy client has it asked once whether it speaks Legacy;
/// this remote refuses, so that client, and the next, are served through the gateway's relay
/// on the remote's Modern side, and it is not asked again.
#[tokio::test]
async fn a_modern_remote_is_sent_nothing_legacy_until_a_legacy_client_arrives() {
    let (url, seen) = modern_remote(json!(["2026-07-28"])).await;
    let gw = TestGateway::start(&["--url", &url]).await;
    let answer = modern_tools_list(&gw).await;
    assert_eq!(answer["result"]["tools"], json!([]), "{answer}");
    let before = seen.lock().clone();
    for s in &before {
        assert!(
            s.version_header.is_some() && s.meta_version.is_some(),
            "nothing without the Modern headers and _meta before a Legacy client: {before:?}"
        );
    }

    for _ in 0..2 {
        let session = gw.session().await;
        let listed = gw
            .post(
                Some(&session),
                &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            )
            .await
            .json();
        assert_eq!(listed["result"]["tools"], json!([]), "{listed}");
    }
    let after = seen.lock().clone();
    let legacy: Vec<_> = after[before.len()..]
        .iter()
        .filter(|s| s.meta_version.is_none())
        .collect();
    assert_eq!(
        legacy.len(),
        1,
        "asked once, by the first Legacy client: {after:?}"
    );
    assert_eq!(legacy[0].method, "initialize");
}
