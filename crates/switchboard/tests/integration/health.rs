//! Operating the gateway: backend health from MCP probes and traffic, the circuit breaker,
//! `/readyz`, `/status` and Prometheus `/metrics`, through the real binary.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};
use crate::fixture_http::FixtureHttp;
use crate::vmcp::{self, modern, stdio, Era};

/// A port that was free a moment ago, so a killed remote can come back on the same address.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `GET path` (with a bearer token), its status and body.
async fn get(gw: &TestGateway, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req = gw.http.get(format!("{}{path}", gw.base()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn status(gw: &TestGateway) -> Value {
    let (code, body) = get(gw, "/status", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// `name`'s entry in `/status`.
fn backend<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {status}"))
}

/// Polls `/status` until `ok` holds for `name`'s entry; fails after `within`.
async fn until_backend(
    gw: &TestGateway,
    name: &str,
    within: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let s = status(gw).await;
        if ok(backend(&s, name)) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not {what} within {within:?}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is(state: &'static str, breaker: &'static str) -> impl Fn(&Value) -> bool {
    move |b| b["state"] == state && b["breaker"]["state"] == breaker
}

/// A call of `tool` in `era` and how long it took to be answered.
async fn timed_call(gw: &TestGateway, era: Era, sid: &str, tool: &str) -> (Value, Duration) {
    let started = Instant::now();
    let params = json!({"name": tool, "arguments": {"text": "hi"}});
    let r = match era {
        Era::Legacy => {
            gw.post(Some(sid), &vmcp::request(json!(7), "tools/call", params))
                .await
        }
        Era::Modern => modern(gw, json!(7), "tools/call", params, &[]).await,
    };
    (r.json(), started.elapsed())
}

/// Kill the remote backend: `/status` shows it unhealthy within a few probe intervals, its
/// breaker opens, its calls fail at once naming it, the merged list loses its tools and
/// `/readyz` (every backend required) says not ready; the others keep serving. Revived, it
/// stays refused until the cool-down has passed (the breaker, not the backend, decides),
/// then the probe's trial closes the breaker and everything comes back.
#[tokio::test]
async fn a_killed_backend_goes_unhealthy_fails_fast_and_recovers_through_half_open() {
    let port = free_port();
    let gamma = FixtureHttp::start_at(port, &[]).await;
    let yaml = format!(
        "timeouts: {{request: 30s}}\n\
         health: {{probeInterval: 100ms, readyWhen: all, breaker: {{consecutiveFailures: 2, coolDown: 3s}}}}\n\
         backends:\n{}{}",
        stdio("alpha", ""),
        vmcp::remote("gamma", &gamma.url)
    );
    let served = vmcp::serve("health-kill", &yaml, None).await;
    let gw = &served.gw;
    let mut gamma = Some(gamma);
    let healthy = Duration::from_secs(10);
    until_backend(gw, "gamma", healthy, "healthy", is("healthy", "closed")).await;
    let s = until_backend(gw, "alpha", healthy, "healthy", is("healthy", "closed")).await;
    assert_eq!(backend(&s, "alpha")["transport"], "stdio");
    assert_eq!(backend(&s, "gamma")["transport"], "streamable-http");
    assert_eq!(get(gw, "/readyz", None).await.0, StatusCode::OK);
    let sid = gw.session().await;
    let before = vmcp::tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(before.iter().any(|t| t == "gamma_echo"), "{before:?}");

    gamma.take().unwrap().kill().await;
    let killed = Instant::now();
    let s = until_backend(gw, "gamma", healthy, "unhealthy", is("unhealthy", "open")).await;
    // Two failed probes 100 ms apart, not the 30 s request deadline.
    assert!(killed.elapsed() < Duration::from_secs(5), "{s}");
    let entry = backend(&s, "gamma");
    assert_eq!(entry["lastProbe"]["ok"], false, "{s}");
    assert_eq!(entry["lastError"]["message"], "remote unreachable", "{s}");
    assert!(
        !s.to_string().contains("127.0.0.1"),
        "no URL in /status: {s}"
    );
    assert_eq!(
        get(gw, "/readyz", None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    for era in [Era::Legacy, Era::Modern] {
        let (answer, took) = timed_call(gw, era, &sid, "gamma_echo").await;
        assert!(took < Duration::from_secs(1), "{era:?}: slow: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("backend \"gamma\" is unavailable (circuit open after"),
            "{era:?}: {answer}"
        );
        let after = vmcp::tool_names(gw, era, Some(&sid)).await;
        assert!(!after.iter().any(|t| t.starts_with("gamma_")), "{after:?}");
        assert!(after.iter().any(|t| t == "alpha_echo"), "{after:?}");
        let (alpha, _) = timed_call(gw, era, &sid, "alpha_echo").await;
        assert_eq!(tool_text(&alpha), "hi", "{alpha}");
    }

    // Back on the same address, well inside the cool-down: still refused, by the breaker.
    let _gamma = FixtureHttp::start_at(port, &[]).await;
    let (answer, _) = timed_call(gw, Era::Legacy, &sid, "gamma_echo").await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is unavailable (circuit open after"),
        "{answer}"
    );
    let s = until_backend(gw, "gamma", healthy, "recovered", is("healthy", "closed")).await;
    assert_eq!(backend(&s, "gamma")["breaker"]["consecutiveFailures"], 0);
    assert_eq!(get(gw, "/readyz", None).await.0, StatusCode::OK);
    let (answer, _) = timed_call(gw, Era::Legacy, &sid, "gamma_echo").await;
    assert_eq!(tool_text(&answer), "hi", "{answer}");
    assert_eq!(vmcp::tool_names(gw, Era::Legacy, Some(&sid)).await, before);
    assert!(
        gw.stderr.lock().contains("breaker=\"closed\""),
        "the breaker changes are logged"
    );
}

/// A remote that answers only POST (GET and DELETE get 405) and only Modern requests is
/// probed with `server/discover`, never with a GET: it stays healthy probe after probe.
#[tokio::test]
async fn a_post_only_remote_stays_healthy() {
    let (_remote, url) = vmcp::forward::whoami().await;
    let yaml = format!(
        "health: {{probeInterval: 50ms}}\nbackends:\n{}{}",
        stdio("alpha", ""),
        vmcp::remote("postonly", &url)
    );
    let served = vmcp::serve("health-post-only", &yaml, None).await;
    let gw = &served.gw;
    let s = until_backend(gw, "postonly", Duration::from_secs(10), "probed", |b| {
        b["lastProbe"]["ok"] == true
    })
    .await;
    assert_eq!(backend(&s, "postonly")["era"], "modern", "{s}");
    // Ten more probe intervals: not one failure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = status(gw).await;
    let entry = backend(&s, "postonly");
    assert_eq!(entry["state"], "healthy", "{s}");
    assert_eq!(entry["breaker"]["consecutiveFailures"], 0, "{s}");
    assert!(entry["lastError"].is_null(), "{s}");
    assert!(
        entry["lastProbe"]["secondsAgo"].as_f64().unwrap() < 0.4,
        "{s}"
    );
}

/// One scrape, parsed by a Prometheus text-format parser.
async fn scrape(gw: &TestGateway) -> Vec<prometheus_parse::Sample> {
    let (code, body) = get(gw, "/metrics", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).unwrap().samples
}

/// The value of the sample `metric` with exactly these label values (0 when absent).
fn value(samples: &[prometheus_parse::Sample], metric: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value as V;
    samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map_or(0.0, |s| match &s.value {
            V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
            V::Histogram(_) | V::Summary(_) => panic!("{metric} is not a number"),
        })
}

/// `/metrics` moves as requests flow: requests by method, era and outcome, backend calls by
/// backend, latency histograms, sessions by transport, breaker state, rate-limit denials.
#[tokio::test]
async fn metrics_move_as_requests_flow() {
    let gw = TestGateway::start(&["--probe-interval", "0.1", "--rate-limit", "4/h"]).await;
    let call = [("mcp_method_name", "tools/call"), ("outcome", "ok")];
    let legacy_ok = [call[0], call[1], ("mcp_era", "legacy")];
    let modern_ok = [call[0], call[1], ("mcp_era", "modern")];
    let backend_ok = [call[0], call[1], ("backend", "default")];
    let before = scrape(&gw).await;
    let sid = gw.session().await;
    for n in 0..3 {
        let r = gw
            .call_tool(Some(&sid), json!(n), "echo", json!({"text": "m"}))
            .await;
        assert_eq!(tool_text(&r.json()), "m");
    }
    let r = modern(
        &gw,
        json!(9),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "m"}}),
        &[],
    )
    .await;
    assert_eq!(tool_text(&r.json()), "m", "{}", r.text);
    // The fifth call of this hour is over the caller's limit.
    let limited = gw
        .call_tool(Some(&sid), json!(5), "echo", json!({"text": "m"}))
        .await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.text
    );

    let after = scrape(&gw).await;
    let moved = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    assert_eq!(moved("switchboard_requests_total", &legacy_ok), 3.0);
    assert_eq!(moved("switchboard_requests_total", &modern_ok), 1.0);
    let limited = [
        ("mcp_method_name", "tools/call"),
        ("outcome", "rate_limited"),
    ];
    assert_eq!(moved("switchboard_requests_total", &limited), 1.0);
    assert_eq!(
        moved("switchboard_denials_total", &[("reason", "rate_limit")]),
        1.0
    );
    assert_eq!(
        moved("switchboard_backend_requests_total", &backend_ok),
        4.0
    );
    let hist = "mcp_client_operation_duration_seconds_count";
    assert_eq!(moved(hist, &backend_ok), 4.0);
    let hist = "mcp_server_operation_duration_seconds_count";
    assert_eq!(moved(hist, &legacy_ok), 3.0);
    // The probe's pings are the gateway's own: not client requests, not routed calls.
    let pings = [("mcp_method_name", "ping")];
    assert_eq!(moved("switchboard_requests_total", &pings), 0.0);
    let sessions = [("network_transport", "streamable_http")];
    assert_eq!(value(&after, "switchboard_sessions", &sessions), 1.0);
    let closed = [("backend", "default"), ("state", "closed")];
    assert_eq!(
        value(&after, "switchboard_backend_breaker_state", &closed),
        1.0
    );
    let healthy = [("backend", "default"), ("state", "healthy")];
    assert_eq!(value(&after, "switchboard_backend_health", &healthy), 1.0);
    // No session id anywhere in the exposition.
    let (_, text) = get(&gw, "/metrics", None).await;
    assert!(!text.contains(&sid), "a session id in /metrics");
}

fn keys_file(dir: &vmcp::Dir) -> String {
    let path = dir.write("keys", "ops:ops-key-0123456789abcdef\n");
    path.to_string_lossy().into_owned()
}

/// `/status`, `/stats` and `/metrics` (on the main listener) are behind `/mcp`'s
/// authentication unless opened; `/readyz` and `/healthz` are not.
#[tokio::test]
async fn status_needs_the_mcp_credential_unless_opened() {
    let dir = vmcp::Dir::new("health-auth");
    let keys = keys_file(&dir);
    let gw = TestGateway::start(&["--api-keys-file", &keys]).await;
    for guarded in ["/status", "/stats", "/metrics"] {
        assert_eq!(
            get(&gw, guarded, None).await.0,
            StatusCode::UNAUTHORIZED,
            "{guarded}"
        );
        let (code, body) = get(&gw, guarded, Some("ops-key-0123456789abcdef")).await;
        assert_eq!(code, StatusCode::OK, "{guarded}: {body}");
        assert!(!body.contains("ops-key"), "{body}");
    }
    for open in ["/readyz", "/healthz"] {
        assert_ne!(
            get(&gw, open, None).await.0,
            StatusCode::UNAUTHORIZED,
            "{open}"
        );
    }
    let gw = TestGateway::start(&["--api-keys-file", &keys, "--status-open"]).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "it", "version": "0"}}});
    let opened = (gw.http.post(gw.url.as_str()))
        .bearer_auth("ops-key-0123456789abcdef")
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert!(opened.headers().contains_key("mcp-session-id"));
    let (code, body) = get(&gw, "/status", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let s: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(backend(&s, "default")["era"], "dual", "{s}");
    // Open to anyone: who uses the gateway is counted, never named.
    assert_eq!(s["sessions"]["byPrincipal"], json!([]), "{s}");
    assert_eq!(s["sessions"]["principalsNotListed"], 1, "{s}");
    assert!(!body.contains("\"ops\""), "{body}");
    // Opened to callers, not to other sites: a foreign Origin is refused as on `/mcp`.
    for path in ["/status", "/stats", "/metrics"] {
        let r = (gw.http.get(format!("{}{path}", gw.base())))
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path}");
    }
    let (code, body) = get(&gw, "/stats", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

/// `--metrics-listen`: `/metrics` is served there, and only there.
#[tokio::test]
async fn metrics_on_their_own_listener() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let gw = TestGateway::start(&["--metrics-listen", &addr]).await;
    assert_eq!(get(&gw, "/metrics", None).await.0, StatusCode::NOT_FOUND);
    let r = gw
        .http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert!(body.contains("switchboard_backend_health"), "{body}");
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    assert!(!prometheus_parse::Scrape::parse(lines)
        .unwrap()
        .samples
        .is_empty());
}
