//! SEP-2243 as a client: a Modern `tools/list` answer's tools whose `x-mcp-header`
//! designations are invalid are dropped from the list the gateway passes on, and a call of one
//! is refused without reaching the remote (the conformance suite's `http-invalid-tool-headers`).

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::remote::{Mode, RemoteConfig, RemoteEndpoint, RemoteUpstream};
use crate::{InboundSink, Upstream};

#[derive(Debug)]
struct Quiet;
impl InboundSink for Quiet {
    fn deliver(&self, _: &bytes::Bytes, _: &switchboard_wire::Message<'_>, _: &Upstream) {}
}

/// A Modern remote: `tools/list` answers `tools`, anything else `{}`; records each request
/// as (method, `params.name`, its `mcp-param-*` headers).
async fn remote(tools: Value) -> (String, Arc<Mutex<Vec<(String, String, Vec<String>)>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<_>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (log, tools) = (log.clone(), tools.clone());
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
                            break (head.to_ascii_lowercase(), body.to_owned());
                        }
                    }
                };
                let request: Value = serde_json::from_str(&body).unwrap_or_default();
                let method = request["method"].as_str().unwrap_or_default().to_owned();
                let name = request["params"]["name"].as_str().unwrap_or_default();
                let params = head
                    .lines()
                    .filter(|l| l.starts_with("mcp-param-"))
                    .map(str::to_owned)
                    .collect();
                log.lock().push((method.clone(), name.to_owned(), params));
                let result = match method.as_str() {
                    "tools/list" => json!({"resultType": "complete", "tools": tools}),
                    _ => json!({"resultType": "complete", "content": []}),
                };
                let json = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
                let json = json.to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{json}",
                    json.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn modern(key: &str, method: &str, params: Value) -> Vec<u8> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": key, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

async fn ask(up: &Upstream, key: &str, method: &str, params: Value) -> crate::BackendResponse {
    let pending = up.call_as(key, modern(key, method, params), None).await;
    pending.unwrap().await.unwrap()
}

#[tokio::test]
async fn tools_with_invalid_designations_are_dropped_and_never_called() {
    let schema = |props: Value| json!({"type": "object", "properties": props});
    let tools = json!([
        {"name": "valid_tool", "inputSchema": schema(json!({
            "region": {"type": "string", "x-mcp-header": "Region"}}))},
        {"name": "plain_tool", "inputSchema": schema(json!({"q": {"type": "string"}}))},
        {"name": "invalid_space", "inputSchema": schema(json!({
            "v": {"type": "string", "x-mcp-header": "My Region"}}))},
        {"name": "invalid_number", "inputSchema": schema(json!({
            "v": {"type": "number", "x-mcp-header": "Score"}}))},
        {"name": "invalid_duplicate", "inputSchema": schema(json!({
            "a": {"type": "string", "x-mcp-header": "MyField"},
            "b": {"type": "string", "x-mcp-header": "myfield"}}))},
    ]);
    let (url, seen) = remote(tools).await;
    let endpoint = RemoteEndpoint::new(RemoteConfig::new(&url)).unwrap();
    let up = Upstream::Remote(RemoteUpstream::new(
        &endpoint,
        Mode::Stateless,
        Arc::new(Quiet),
    ));

    let list = ask(&up, "k1", "tools/list", json!({})).await;
    let list: Value = serde_json::from_str(list.payload()).unwrap();
    let names: Vec<_> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["valid_tool", "plain_tool"], "{list}");
    assert_eq!(
        list["resultType"], "complete",
        "the rest of the result is kept"
    );

    let called = ask(
        &up,
        "k2",
        "tools/call",
        json!({"name": "valid_tool", "arguments": {"region": "us-west1"}}),
    )
    .await;
    assert!(!called.is_error(), "{}", called.payload());
    for (i, tool) in ["invalid_space", "invalid_number", "invalid_duplicate"]
        .into_iter()
        .enumerate()
    {
        let refused = ask(
            &up,
            &format!("r{i}"),
            "tools/call",
            json!({"name": tool, "arguments": {"v": "x"}}),
        )
        .await;
        assert!(refused.is_error(), "{tool}: {}", refused.payload());
        let error: Value = serde_json::from_str(refused.payload()).unwrap();
        assert_eq!(error["code"], -32602, "{error}");
        assert!(error["message"].as_str().unwrap().contains(tool), "{error}");
    }
    let seen = seen.lock().clone();
    let calls: Vec<_> = seen.iter().filter(|s| s.0 == "tools/call").collect();
    assert_eq!(
        calls.len(),
        1,
        "only the valid tool reached the remote: {seen:?}"
    );
    assert_eq!(calls[0].1, "valid_tool");
    assert_eq!(calls[0].2, ["mcp-param-region: us-west1"], "{seen:?}");
}
