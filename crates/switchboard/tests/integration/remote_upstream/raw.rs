//! A hand-written remote MCP server on a raw socket (tokio `TcpListener`, HTTP/1.1 by hand,
//! one request per connection) that misbehaves in the way a test picks. It behaves like a
//! Legacy-only server with required sessions for everything else, so whatever the gateway
//! sends on its own (an era probe, a tool walk) gets ordinary answers and the fault reaches
//! only the client's traffic. It records every request it receives.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The client name whose `initialize` [`Fault::HtmlToClientInitialize`] answers with HTML.
pub(crate) const HOSTILE_CLIENT: &str = "hostile-client";
/// Size of [`Fault::HugeAnswerToCalls`]'s answer: over the 16 MiB default bound on one remote
/// message (the remote client's default, equal to the stdio line bound).
pub(crate) const HUGE: usize = 17 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// None: a small, correct Legacy server.
    Polite,
    /// An HTML page (HTTP 200, `text/html`) for the `initialize` of [`HOSTILE_CLIENT`].
    HtmlToClientInitialize,
    /// Every `tools/call`: an SSE stream of keep-alive comments that never answers.
    EndlessStreamForCalls,
    /// Every `tools/call`: a JSON answer of [`HUGE`] bytes.
    HugeAnswerToCalls,
    /// Every request: `401` with a plain-text body quoting the `Authorization` it got.
    EchoAuthIn401,
    /// Every `tools/call`: the same `401` (the gateway's own traffic is answered).
    EchoAuthIn401ToCalls,
    /// Every request: `401` with a JSON-RPC error whose message quotes the `Authorization`.
    EchoAuthInJsonRpcError,
}

/// One request as received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    /// Header names lowercased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Value,
}

impl Seen {
    /// The value of the header `name` (lowercase), if it came.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        let found = self.headers.iter().find(|(k, _)| k == name);
        found.map(|(_, v)| v.clone())
    }
}

#[derive(Debug)]
pub(crate) struct RawRemote {
    pub(crate) url: String,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    /// Bumped each time an endless stream's connection is closed by the gateway.
    pub(crate) endless_closed: tokio::sync::watch::Receiver<u32>,
    accept: JoinHandle<()>,
}

impl Drop for RawRemote {
    fn drop(&mut self) {
        // The accept task owns every connection task (its JoinSet): all end with it.
        self.accept.abort();
    }
}

#[derive(Debug, Clone)]
struct Shared {
    fault: Fault,
    seen: Arc<Mutex<Vec<Seen>>>,
    endless_closed: Arc<tokio::sync::watch::Sender<u32>>,
}

impl RawRemote {
    pub(crate) async fn start(fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let (tx, endless_closed) = tokio::sync::watch::channel(0);
        let shared = Shared {
            fault,
            seen: Arc::new(Mutex::new(Vec::new())),
            endless_closed: Arc::new(tx),
        };
        let seen = Arc::clone(&shared.seen);
        let accept = tokio::spawn(serve(listener, shared));
        RawRemote {
            url,
            seen,
            endless_closed,
            accept,
        }
    }

    /// The JSON-RPC methods received so far, in order (notifications and requests).
    pub(crate) fn methods(&self) -> Vec<String> {
        let seen = self.seen.lock();
        seen.iter()
            .filter_map(|s| s.body["method"].as_str().map(str::to_owned))
            .collect()
    }
}

async fn serve(listener: TcpListener, shared: Shared) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((sock, _)) = accepted {
                    conns.spawn(connection(sock, shared.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Reads one request: method, lowercased headers, body (by `content-length`).
async fn read_request(sock: &mut TcpStream) -> Option<(String, Vec<(String, String)>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let n = sock.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length.min(1 << 20) {
        let n = sock.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, headers, body))
}

async fn write_json(sock: &mut TcpStream, status: &str, extra: &str, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body.as_bytes()).await;
}

async fn write_empty(sock: &mut TcpStream, status: &str) {
    let head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = sock.write_all(head.as_bytes()).await;
}

async fn connection(mut sock: TcpStream, shared: Shared) {
    let Some((method, headers, body)) = read_request(&mut sock).await else {
        return;
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let seen = Seen {
        method: method.clone(),
        headers,
        body: body.clone(),
    };
    let has_session = seen.header("mcp-session-id").is_some();
    let auth = seen.header("authorization").unwrap_or_default();
    shared.seen.lock().push(seen);
    let call = body["method"] == "tools/call";
    match shared.fault {
        Fault::EchoAuthIn401 => return echo_auth(&mut sock, &auth).await,
        Fault::EchoAuthIn401ToCalls if call => return echo_auth(&mut sock, &auth).await,
        Fault::EchoAuthInJsonRpcError => {
            let err = json!({"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32001,
                "message": format!("denied auth={auth}")}});
            return write_json(&mut sock, "401 Unauthorized", "", &err).await;
        }
        _ => {}
    }
    match method.as_str() {
        // No listen stream on this server.
        "GET" => return write_empty(&mut sock, "405 Method Not Allowed").await,
        "DELETE" => return write_empty(&mut sock, "200 OK").await,
        _ => {}
    }
    let (Some(id), Some(rpc)) = (body.get("id"), body["method"].as_str()) else {
        // A notification, or an answer to a request this server never sends.
        return write_empty(&mut sock, "202 Accepted").await;
    };
    match rpc {
        "initialize" => initialize(&mut sock, &shared, id, &body).await,
        _ if !has_session => {
            let err = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000,
                "message": "Bad Request: Mcp-Session-Id header is required"}});
            write_json(&mut sock, "400 Bad Request", "", &err).await;
        }
        "tools/list" => {
            let tools = json!({"tools": [{"name": "work", "description": "never ends well",
                "inputSchema": {"type": "object"}}]});
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": tools});
            write_json(&mut sock, "200 OK", "", &answer).await;
        }
        "tools/call" => match shared.fault {
            Fault::EndlessStreamForCalls => endless(&mut sock, &shared).await,
            Fault::HugeAnswerToCalls => huge(&mut sock, id).await,
            _ => {
                let result = json!({"content": [{"type": "text", "text": "ok"}]});
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                write_json(&mut sock, "200 OK", "", &answer).await;
            }
        },
        _ => {
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {}});
            write_json(&mut sock, "200 OK", "", &answer).await;
        }
    }
}

async fn initialize(sock: &mut TcpStream, shared: &Shared, id: &Value, body: &Value) {
    let client = body["params"]["clientInfo"]["name"].as_str();
    if shared.fault == Fault::HtmlToClientInitialize && client == Some(HOSTILE_CLIENT) {
        let page = "<!doctype html><html><body><h1>Please sign in</h1></body></html>";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            page.len()
        );
        let _ = sock.write_all(head.as_bytes()).await;
        let _ = sock.write_all(page.as_bytes()).await;
        return;
    }
    let version = body["params"]["protocolVersion"]
        .as_str()
        .unwrap_or("2025-11-25");
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": version, "capabilities": {"tools": {}},
        "serverInfo": {"name": "raw-remote", "version": "0"}}});
    let session = format!("mcp-session-id: raw-{}\r\n", std::process::id());
    write_json(sock, "200 OK", &session, &answer).await;
}

/// `401` quoting `auth` (the `Authorization` header received) in a plain-text body.
async fn echo_auth(sock: &mut TcpStream, auth: &str) {
    let page = format!("denied auth={auth}");
    let head = format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        page.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(page.as_bytes()).await;
}

/// Keep-alive comments every 100 ms until the peer goes away (then the close is counted).
async fn endless(sock: &mut TcpStream, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if sock.write_all(head.as_bytes()).await.is_ok() {
        while sock.write_all(b": still working\n\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    shared.endless_closed.send_modify(|n| *n += 1);
}

/// A well-formed answer to `id` whose one text block makes it [`HUGE`] bytes long.
async fn huge(sock: &mut TcpStream, id: &Value) {
    let prefix =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    let suffix = r#""}]}}"#;
    let filler = HUGE - prefix.len() - suffix.len();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {HUGE}\r\nconnection: close\r\n\r\n"
    );
    let chunk = vec![b'x'; 64 * 1024];
    if sock.write_all(head.as_bytes()).await.is_err()
        || sock.write_all(prefix.as_bytes()).await.is_err()
    {
        return;
    }
    let mut left = filler;
    while left > 0 {
        let n = left.min(chunk.len());
        if sock.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        left -= n;
    }
    let _ = sock.write_all(suffix.as_bytes()).await;
}
