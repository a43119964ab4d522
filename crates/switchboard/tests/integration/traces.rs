//! Traces: `--otlp-endpoint` exports a span per client request and per backend call to an
//! OTLP/HTTP receiver written here (it parses the JSON bodies the exporter posts to
//! `/v1/traces`). A client's `traceparent` in `_meta` is the parent of the request's span,
//! the backend call's span is its child, and the backend receives the backend call's own
//! `traceparent` (`backends/meta.py` answers with the `_meta` it got).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::common::{tool_text, TestGateway};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP receiver on a free loopback port: every span posted to it, in order.
pub(crate) struct Receiver {
    pub(crate) url: String,
    spans: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Receiver {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, spans) = mpsc::channel(1024);
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, tx.clone()));
            }
        });
        Receiver {
            url,
            spans,
            seen: Vec::new(),
        }
    }

    /// Every span received so far, the ones not looked at yet included (for leak checks).
    pub(crate) fn all(&mut self) -> Vec<Value> {
        while let Ok(span) = self.spans.try_recv() {
            self.seen.push(span);
        }
        self.seen.clone()
    }

    /// The first span received so far or within 20 s that `want` accepts.
    async fn span(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        if let Some(s) = self.seen.iter().find(|s| want(s)) {
            return s.clone();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let next = tokio::time::timeout_at(deadline, self.spans.recv()).await;
            let span = next
                .unwrap_or_else(|_| panic!("no {what} span within 20 s; got {:#?}", self.seen))
                .expect("receiver running");
            self.seen.push(span.clone());
            if want(&span) {
                return span;
            }
        }
    }
}

/// One keep-alive connection of the exporter: each POST's spans go to `tx`, answered 200.
async fn serve(conn: tokio::net::TcpStream, tx: mpsc::Sender<Value>) {
    let (read, mut write) = conn.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    let mut span = span.clone();
                    span["resource"] = rs["resource"].clone();
                    let _ = tx.send(span).await;
                }
            }
        }
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if write.write_all(ok.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn kind(span: &Value) -> String {
    match &span["kind"] {
        Value::Number(n) => ["", "INTERNAL", "SERVER", "CLIENT"]
            .get(n.as_u64().unwrap_or(0) as usize)
            .copied()
            .unwrap_or("")
            .to_owned(),
        Value::String(s) => s.trim_start_matches("SPAN_KIND_").to_owned(),
        _ => String::new(),
    }
}

fn str_of<'a>(span: &'a Value, key: &str) -> &'a str {
    span[key].as_str().unwrap_or_default()
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

async fn traced_gateway(receiver: &Receiver) -> TestGateway {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/meta.py"
    );
    let args = [
        "--otlp-endpoint",
        receiver.url.as_str(),
        "--otlp-service-name",
        "sb-it",
    ];
    TestGateway::start_with(&args, &["python3", script]).await
}

/// The `_meta` the backend received for one `meta` call with `meta`.
async fn call_meta(gw: &TestGateway, sid: &str, id: u64, meta: Value) -> Value {
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"meta","arguments":{},"_meta":meta}});
    let reply = gw.post(Some(sid), &body).await;
    serde_json::from_str(tool_text(&reply.json())).unwrap()
}

#[tokio::test]
async fn a_clients_traceparent_continues_through_the_gateway_into_the_backend() {
    let mut receiver = Receiver::start().await;
    let gw = traced_gateway(&receiver).await;
    let sid = gw.session().await;
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let got = call_meta(&gw, &sid, 1, json!({"traceparent": traceparent})).await;
    // The backend continues the same trace, under a span of the gateway's (not the client's).
    let at_backend = got["traceparent"]
        .as_str()
        .expect("traceparent at the backend");
    let parts: Vec<&str> = at_backend.split('-').collect();
    assert_eq!(parts.len(), 4, "{at_backend}");
    assert_eq!(parts[1], TRACE, "{at_backend}");
    assert_ne!(parts[2], CLIENT_SPAN, "{at_backend}");
    // The request's span: a server span, child of the client's.
    let server = receiver
        .span("server", |s| {
            str_of(s, "traceId") == TRACE && kind(s) == "SERVER"
        })
        .await;
    assert_eq!(str_of(&server, "parentSpanId"), CLIENT_SPAN, "{server:#}");
    assert_eq!(str_of(&server, "name"), "tools/call meta", "{server:#}");
    assert_eq!(attribute(&server, "mcp.method.name"), Some("tools/call"));
    assert_eq!(attribute(&server, "gen_ai.tool.name"), Some("meta"));
    let service = server["resource"]["attributes"].as_array().unwrap();
    assert!(
        service
            .iter()
            .any(|a| a["key"] == "service.name" && a["value"]["stringValue"] == "sb-it"),
        "{service:?}"
    );
    // The backend call's span: a client span, child of the request's, and the one whose id
    // the backend was handed.
    let server_id = str_of(&server, "spanId").to_owned();
    let client = receiver
        .span("client", |s| {
            str_of(s, "traceId") == TRACE && kind(s) == "CLIENT"
        })
        .await;
    assert_eq!(str_of(&client, "parentSpanId"), server_id, "{client:#}");
    assert_eq!(str_of(&client, "spanId"), parts[2], "{client:#}");
    assert_eq!(attribute(&client, "switchboard.backend"), Some("default"));
}

#[tokio::test]
async fn a_request_without_trace_context_starts_a_trace_and_bad_context_is_ignored() {
    let mut receiver = Receiver::start().await;
    let gw = traced_gateway(&receiver).await;
    let sid = gw.session().await;
    for (id, meta) in [
        (1, json!({})),
        (2, json!({"traceparent": "00-nothex-zz-01"})),
    ] {
        let got = call_meta(&gw, &sid, id, meta).await;
        let at_backend = got["traceparent"]
            .as_str()
            .expect("a fresh trace at the backend");
        let trace = at_backend.split('-').nth(1).unwrap().to_owned();
        assert_eq!(trace.len(), 32, "{at_backend}");
        let server = receiver
            .span("root server", |s| {
                str_of(s, "traceId") == trace && kind(s) == "SERVER"
            })
            .await;
        // A root: no parent (a malformed traceparent is not one).
        assert_eq!(str_of(&server, "parentSpanId"), "", "{server:#}");
    }
}

#[tokio::test]
async fn a_modern_request_is_traced_the_same_way() {
    let mut receiver = Receiver::start().await;
    let gw = TestGateway::start(&["--otlp-endpoint", receiver.url.as_str()]).await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let mut meta = crate::modern::envelope();
    meta["traceparent"] = json!(format!("00-{trace}-b7ad6b7169203331-01"));
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"echo","arguments":{"text":"hi"},"_meta":meta}});
    let headers = [
        ("mcp-protocol-version", crate::modern::V),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let reply = gw.post_raw(None, body.to_string(), &headers).await;
    assert_eq!(tool_text(&reply.json()), "hi", "{}", reply.text);
    let server = receiver
        .span("server", |s| {
            str_of(s, "traceId") == trace && kind(s) == "SERVER"
        })
        .await;
    assert_eq!(str_of(&server, "parentSpanId"), "b7ad6b7169203331");
    assert_eq!(attribute(&server, "switchboard.era"), Some("modern"));
    let server_id = str_of(&server, "spanId").to_owned();
    let client = receiver
        .span("client", |s| {
            str_of(s, "traceId") == trace && kind(s) == "CLIENT"
        })
        .await;
    assert_eq!(str_of(&client, "parentSpanId"), server_id, "{client:#}");
}

#[tokio::test]
async fn only_a_propagated_printable_tracestate_reaches_the_backend_and_client_text_is_clipped() {
    let mut receiver = Receiver::start().await;
    let gw = traced_gateway(&receiver).await;
    let sid = gw.session().await;
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    // A valid tracestate continues; one with control characters, or not a string, does not.
    let cases = [
        (json!("vendor=abc"), Some("vendor=abc")),
        (json!("a=x\r\ny"), None),
        (json!({"o": 1}), None),
    ];
    for (i, (state, expected)) in cases.into_iter().enumerate() {
        let meta = json!({"traceparent": traceparent, "tracestate": state});
        let got = call_meta(&gw, &sid, i as u64 + 1, meta).await;
        assert_eq!(got["tracestate"].as_str(), expected, "{state}: {got}");
        assert!(got["traceparent"].as_str().is_some(), "{got}");
    }
    // A huge request id is exported clipped.
    let id = "i".repeat(100_000);
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"meta","arguments":{},"_meta":{"traceparent": traceparent}}});
    let reply = gw.post(Some(&sid), &body).await;
    assert_eq!(reply.json()["id"], json!(id));
    let server = receiver
        .span("long-id server", |s| {
            str_of(s, "traceId") == TRACE
                && attribute(s, "jsonrpc.request.id").is_some_and(|v| v.starts_with("\"iii"))
        })
        .await;
    let exported = attribute(&server, "jsonrpc.request.id").unwrap();
    assert!(exported.len() <= 256, "{} bytes", exported.len());
}

/// Credentials in the exporter's own URL (user info, a query key) and in a caller's resource
/// URI reach neither the logs nor the spans (review: the endpoint was logged as given, and a
/// `resources/read` URI was a span's name and attribute as sent).
#[tokio::test]
async fn credentials_in_the_endpoint_or_a_resource_uri_reach_no_log_or_span() {
    const SECRETS: [&str; 4] = ["OTLPSECRET-9", "QKEY-9", "RESSECRET-9", "TOKVALUE-9"];
    let mut receiver = Receiver::start().await;
    let endpoint = receiver
        .url
        .replacen("http://", "http://otuser:OTLPSECRET-9@", 1);
    let endpoint = format!("{endpoint}/v1/traces?key=QKEY-9");
    let mut gw = TestGateway::start(&["--otlp-endpoint", &endpoint]).await;
    let sid = gw.session().await;
    let uri = "https://alice:RESSECRET-9@db.example/x?token=TOKVALUE-9";
    let body = json!({"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":uri}});
    let reply = gw.post(Some(&sid), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let read = receiver
        .span("resources/read", |s| {
            str_of(s, "name").starts_with("resources/read") && kind(s) == "SERVER"
        })
        .await;
    let shown = "https://…@db.example/x?…";
    assert_eq!(str_of(&read, "name"), format!("resources/read {shown}"));
    assert_eq!(attribute(&read, "mcp.resource.uri"), Some(shown));
    let mut evidence = crate::leaks::Evidence::collect(&mut gw, None, None).await;
    let spans = serde_json::to_string(&receiver.all()).unwrap();
    evidence.add("spans", spans);
    assert!(
        evidence.of("stderr (logs)").contains("exporting traces"),
        "the endpoint's log line is searched"
    );
    evidence.assert_free_of(&SECRETS);
}
