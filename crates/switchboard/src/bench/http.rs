//! Driving a Streamable HTTP endpoint: Legacy sessions or Modern stateless requests.

use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Client, StatusCode};

use switchboard_wire::{Message, MessageKind};

use super::conn::Lanes;
use super::payload::{error_code, Era};

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Sessions opened (or closed) at once during setup and teardown: enough to make 10,000
/// sessions take seconds, few enough not to look like a connection flood.
const SETUP_PARALLELISM: usize = 64;

#[derive(Debug)]
pub(crate) struct HttpTarget {
    client: Client,
    url: String,
    /// Headers every POST carries (Accept, Content-Type, version, Modern's Mcp-Method/Name).
    headers: HeaderMap,
    /// Legacy session ids; requests are spread over them round-robin by request number.
    sessions: Vec<HeaderValue>,
    /// The measured path: one connection per worker (see [`Lanes`]).
    lanes: Lanes,
    /// `headers` as a list, for the lanes.
    post_headers: Vec<(HeaderName, HeaderValue)>,
}

impl HttpTarget {
    /// Builds the client and, for Legacy, opens `sessions` sessions (initialize + initialized).
    pub(crate) async fn connect(
        url: &str,
        era: Era,
        tool: &str,
        sessions: usize,
        concurrency: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let client = Client::builder()
            // One idle connection per worker: every request reuses a warm keep-alive
            // connection, and the pool never grows past the bounded worker count.
            .pool_max_idle_per_host(concurrency.max(SETUP_PARALLELISM))
            .tcp_nodelay(true)
            .no_proxy()
            // No client-level timeout: the driver already bounds every request with one timer,
            // and a second timer per request is measurable CPU on a small machine.
            .build()
            .context("building the HTTP client")?;
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(PROTOCOL_VERSION, HeaderValue::from_static(era.version()));
        if era == Era::Modern {
            headers.insert(MCP_METHOD, HeaderValue::from_static("tools/call"));
            headers.insert(
                MCP_NAME,
                HeaderValue::from_str(tool).context("--tool is not a valid Mcp-Name value")?,
            );
        }
        let post_headers = headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut target = HttpTarget {
            client,
            url: url.to_owned(),
            headers,
            sessions: Vec::new(),
            lanes: Lanes::new(url, concurrency)?,
            post_headers,
        };
        if era == Era::Legacy {
            target.sessions = target.open_sessions(sessions.max(1), timeout).await?;
        }
        Ok(target)
    }

    pub(crate) fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// A GET for the listen stream of session number `session` (Legacy only).
    pub(crate) fn listen(&self, session: usize) -> Option<reqwest::RequestBuilder> {
        let sid = self.sessions.get(session)?.clone();
        let mut headers = self.headers.clone();
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.remove(CONTENT_TYPE);
        Some(
            self.client
                .get(&self.url)
                .headers(headers)
                .header(SESSION_ID, sid),
        )
    }

    async fn open_sessions(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<HeaderValue>> {
        let mut opened = Vec::with_capacity(n);
        let mut results = futures::stream::iter(0..n)
            .map(|i| async move {
                tokio::time::timeout(timeout, self.open_session(i))
                    .await
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("opening a session timed out")))
            })
            .buffer_unordered(SETUP_PARALLELISM);
        while let Some(r) = results.next().await {
            opened.push(r?);
        }
        Ok(opened)
    }

    async fn open_session(&self, i: usize) -> anyhow::Result<HeaderValue> {
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":"init-{i}","method":"initialize","params":{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"switchboard-bench","version":"{}"}}}}}}"#,
            Era::Legacy.version(),
            env!("CARGO_PKG_VERSION")
        );
        let mut headers = self.headers.clone();
        // The version header is for requests after initialize.
        headers.remove(PROTOCOL_VERSION);
        let resp = self
            .client
            .post(&self.url)
            .headers(headers)
            .body(init)
            .send()
            .await
            .context("initialize")?;
        let status = resp.status();
        let sid = resp.headers().get(SESSION_ID).cloned();
        let body = resp.bytes().await.context("initialize")?;
        if status != StatusCode::OK {
            bail!(
                "initialize answered HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let sid = sid.context("initialize answer carried no Mcp-Session-Id")?;
        let resp = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .header(SESSION_ID, sid.clone())
            .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .send()
            .await
            .context("notifications/initialized")?;
        if !resp.status().is_success() {
            bail!("notifications/initialized answered HTTP {}", resp.status());
        }
        Ok(sid)
    }

    /// Ends every session (DELETE), best effort: a server may not support it (405).
    pub(crate) async fn close_sessions(&self, timeout: Duration) {
        futures::stream::iter(self.sessions.iter().cloned())
            .map(|sid| {
                let delete = self
                    .client
                    .delete(&self.url)
                    .headers(self.headers.clone())
                    .header(SESSION_ID, sid)
                    .send();
                tokio::time::timeout(timeout, delete)
            })
            .buffer_unordered(SETUP_PARALLELISM)
            .for_each(|_| async {})
            .await;
    }

    /// POSTs request number `seq` on worker `lane`'s connection and returns the one JSON-RPC
    /// response message, or the kind of failure.
    pub(crate) async fn call(&self, lane: usize, seq: u64, body: Vec<u8>) -> Result<Bytes, String> {
        let session = (!self.sessions.is_empty())
            .then(|| &self.sessions[(seq % self.sessions.len() as u64) as usize]);
        let extra = session.map(|sid| (SESSION_ID, sid.clone()));
        let (resp, body) = self
            .lanes
            .post(lane, &self.post_headers, extra, body)
            .await?;
        let status = resp.status();
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let message = if sse {
            sse_response(&body).ok_or_else(|| "sse_without_response".to_owned())?
        } else {
            body
        };
        if !status.is_success() {
            // Keep the JSON-RPC code too: "HTTP 400" alone does not say which check failed.
            let code = Message::parse(&message)
                .ok()
                .and_then(|m| m.error.map(|e| error_code(e.get())));
            return Err(match code {
                Some(code) => format!("http_{} jsonrpc_{code}", status.as_u16()),
                None => format!("http_{}", status.as_u16()),
            });
        }
        Ok(message)
    }
}

/// The first JSON-RPC response among the `message` events of an SSE body; notifications that
/// precede it (progress, logging) are skipped.
pub(crate) fn sse_response(body: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let text = text.replace("\r\n", "\n");
    for block in text.split("\n\n") {
        let mut event = "message";
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = e.trim();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if event != "message" || data.is_empty() {
            continue;
        }
        let payload = data.join("\n");
        let is_response =
            Message::parse(payload.as_bytes()).is_ok_and(|m| m.kind == MessageKind::Response);
        if is_response {
            return Some(Bytes::from(payload));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_picks_the_response_after_notifications() {
        let body = b": keep-alive\r\n\r\nid: 1\r\ndata: \r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\r\n\r\n";
        assert_eq!(
            sse_response(body).unwrap(),
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#)
        );
        assert!(
            sse_response(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n")
                .is_none()
        );
        assert!(sse_response(
            b"event: other\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
        )
        .is_none());
    }
}
