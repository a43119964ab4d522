//! Raw HTTP to any `/mcp` URL (a replica or the proxy), and the replicas themselves.

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::redis::Redis;
use crate::common::{Reply, TestGateway, BOTH};

/// A client of one URL. Its HTTP client keeps no idle connection, so every request opens a
/// new one: through the proxy, consecutive requests go to alternating replicas.
pub struct Endpoint {
    pub url: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer …` when set.
    token: Option<String>,
}

impl Endpoint {
    pub fn new(url: &str) -> Self {
        Endpoint {
            url: url.to_owned(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            token: None,
        }
    }

    pub fn of(gw: &TestGateway) -> Self {
        Self::new(&gw.url)
    }

    /// The same URL, as the holder of `token`.
    pub fn with_key(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    fn request(&self, method: reqwest::Method, session: Option<&str>) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, &self.url).header(ACCEPT, BOTH);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        req
    }

    pub async fn post(&self, session: Option<&str>, body: &Value) -> Reply {
        let resp = self
            .request(reqwest::Method::POST, session)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        read(resp).await
    }

    pub async fn initialize(&self) -> Reply {
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":"replicas","version":"0"}}});
        self.post(None, &init).await
    }

    /// Opens a Legacy session and completes the handshake.
    pub async fn session(&self) -> String {
        let r = self.initialize().await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
        self.initialized(&sid).await;
        sid
    }

    pub async fn initialized(&self, sid: &str) {
        let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        let r = self.post(Some(sid), &done).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }

    /// `tools/call echo {text}` with JSON-RPC id `id`.
    pub async fn echo(&self, sid: &str, id: Value, text: &str) -> Reply {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":"echo","arguments":{"text":text}}});
        self.post(Some(sid), &body).await
    }

    /// `DELETE /mcp` for the session: its status.
    pub async fn delete(&self, sid: &str) -> StatusCode {
        let r = self.request(reqwest::Method::DELETE, Some(sid));
        r.send().await.unwrap().status()
    }
}

async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    Reply {
        status,
        headers,
        text,
    }
}

/// A `switchboard run` (built-in fixture) sharing sessions through `redis`, plus `extra`.
pub async fn replica(redis: &Redis, extra: &[&str]) -> TestGateway {
    let url = redis.url();
    let mut args = vec!["--session-store", url.as_str()];
    args.extend_from_slice(extra);
    TestGateway::start(&args).await
}

/// Tool calls this replica counted (`switchboard_requests_total{mcp_method_name="tools/call"}`
/// summed over every other label).
pub async fn tool_calls(gw: &TestGateway) -> f64 {
    counter(
        gw,
        "switchboard_requests_total",
        ("mcp_method_name", "tools/call"),
    )
    .await
}

/// The sum of `metric`'s samples whose label `label.0` is `label.1`, over every other label.
pub async fn counter(gw: &TestGateway, metric: &str, label: (&str, &str)) -> f64 {
    counter_as(gw, None, metric, label).await
}

/// The same, read as the holder of `key` (a gateway with authentication).
pub async fn counter_as(
    gw: &TestGateway,
    key: Option<&str>,
    metric: &str,
    label: (&str, &str),
) -> f64 {
    use prometheus_parse::Value as V;
    let mut req = gw.http.get(format!("{}/metrics", gw.base()));
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    let samples = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
        .unwrap()
        .samples;
    samples
        .iter()
        .filter(|s| s.metric == metric && s.labels.get(label.0) == Some(label.1))
        .map(|s| match &s.value {
            V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
            V::Histogram(_) | V::Summary(_) => panic!("{metric} is a number"),
        })
        .sum()
}

/// `kill -KILL` the gateway (no shutdown path runs) and wait until it is gone: its process a
/// zombie or reaped, and its port refusing connections. The port is the one that matters: a
/// killed multithreaded process shows its main thread as a zombie while other threads are
/// still exiting, and until the last one has, its listening socket still completes handshakes
/// (then resets them), so a balancer would not yet see it dead.
pub async fn kill_9(gw: &TestGateway) {
    use std::time::Duration;
    let pid = gw.pid().to_string();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    let addr = super::proxy::addr_of(&gw.url);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let refused = matches!(
            tokio::net::TcpStream::connect(addr).await,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if refused && !crate::common::process_running(&pid) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "pid {pid} survived");
        // Nothing to wait on but the kernel tearing the process down.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The JSON body without its `id` (two 404s compared "modulo id").
pub fn without_id(r: &Reply) -> Value {
    let mut v: Value = serde_json::from_str(&r.text).unwrap_or_else(|e| panic!("{e}: {}", r.text));
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
    }
    v
}
