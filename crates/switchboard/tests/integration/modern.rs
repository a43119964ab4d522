//! MCP 2026-07-28 on the same endpoint: per-request classification, stateless routing, the
//! era bridge, and real clients of both eras against backends of each era.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{stats, tool_text, Reply, TestGateway};

pub(crate) const V: &str = "2026-07-28";

pub(crate) fn envelope() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}})
}

/// A Modern request with the required headers.
pub(crate) async fn modern(
    gw: &TestGateway,
    id: Value,
    method: &str,
    mut params: Value,
    extra: &[(&str, &str)],
) -> Reply {
    params["_meta"] = envelope();
    let name = params
        .get("name")
        .or(params.get("uri"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
    let mut headers = vec![("mcp-protocol-version", V), ("mcp-method", method)];
    if let Some(n) = name.as_deref() {
        headers.push(("mcp-name", n));
    }
    headers.extend_from_slice(extra);
    gw.post_raw(None, body.to_string(), &headers).await
}

fn fixture(era: &str) -> Vec<String> {
    vec![
        env!("CARGO_BIN_EXE_switchboard").into(),
        "fixture".into(),
        "--era".into(),
        era.into(),
    ]
}

async fn gateway_for(era: &str) -> TestGateway {
    let backend = fixture(era);
    let refs: Vec<&str> = backend.iter().map(String::as_str).collect();
    TestGateway::start_with(&[], &refs).await
}

#[tokio::test]
async fn modern_requests_ignore_sessions_and_never_cross() {
    let gw = TestGateway::start(&[]).await;
    let victim = gw.session().await;
    // Same id, one carrying the victim's real session id; the slow one is answered last.
    let hijack = [("mcp-session-id", victim.as_str())];
    let slow = modern(
        &gw,
        json!(1),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"slow","delayMs":300}}),
        &hijack,
    );
    let fast = modern(
        &gw,
        json!(1),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"fast"}}),
        &[],
    );
    let (slow, fast) = tokio::join!(slow, fast);
    for (r, text) in [(&slow, "slow"), (&fast, "fast")] {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert!(
            r.headers.get("mcp-session-id").is_none(),
            "Modern answers never set a session"
        );
        let v = r.json();
        assert_eq!(v["id"], 1);
        assert_eq!(tool_text(&v), text);
        assert_eq!(v["result"]["resultType"], "complete");
    }
    // The victim's session is untouched and still works.
    let r = gw
        .call_tool(Some(&victim), json!(9), "echo", json!({"text":"mine"}))
        .await;
    assert_eq!(tool_text(&r.json()), "mine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ten_thousand_modern_requests_leaves_no_state() {
    let gw = Arc::new(TestGateway::start(&[]).await);
    let sid = gw.session().await;
    let before = stats(&gw).await;
    use futures::StreamExt;
    let ok = futures::stream::iter(0..10_000u32)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let r = modern(
                    &gw,
                    json!(i),
                    "tools/call",
                    json!({"name":"echo","arguments":{"text": i.to_string()}}),
                    &[],
                )
                .await;
                r.status == StatusCode::OK && tool_text(&r.json()) == i.to_string()
            }
        })
        .buffer_unordered(32)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    assert_eq!(ok, 10_000);
    let after = stats(&gw).await;
    assert_eq!(after, before, "tables exactly as before");
    assert_eq!(after["tableEntries"], 0);
    assert_eq!(after["sessions"], 1);
    let _ = sid;
}

#[tokio::test]
async fn legacy_and_modern_interleaved_never_cross() {
    let gw = TestGateway::start(&[]).await;
    let sid = gw.session().await;
    let calls = (0..50).map(|i| {
        let gw = &gw;
        let sid = sid.clone();
        async move {
            let text = format!("{}-{i}", if i % 2 == 0 { "legacy" } else { "modern" });
            let args = json!({"text": text, "delayMs": (i * 7) % 5});
            let r = if i % 2 == 0 {
                gw.call_tool(Some(&sid), json!(i), "echo", args).await
            } else {
                modern(
                    gw,
                    json!(i),
                    "tools/call",
                    json!({"name":"echo","arguments":args}),
                    &[],
                )
                .await
            };
            let v = r.json();
            assert_eq!(v["id"], i);
            assert_eq!(tool_text(&v), text);
            assert_eq!(v["result"].get("resultType").is_some(), i % 2 == 1, "{v}");
        }
    });
    futures::future::join_all(calls).await;
}

#[tokio::test]
async fn modern_protocol_rules() {
    let gw = TestGateway::start(&[]).await;
    for m in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ] {
        let r = modern(&gw, json!(m), m, json!({}), &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{m}: {}", r.text);
        assert_eq!(r.error_code(), -32601);
        assert_eq!(r.json()["id"], m);
    }
    // Header checks.
    let list =
        json!({"jsonrpc":"2.0","id":"h","method":"tools/list","params":{"_meta":envelope()}})
            .to_string();
    for hdr in [
        vec![("mcp-protocol-version", V)],
        vec![("mcp-protocol-version", V), ("mcp-method", "TOOLS/LIST")],
        vec![
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
        ],
        vec![("mcp-method", "tools/list")],
    ] {
        let r = gw.post_raw(None, list.clone(), &hdr).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{hdr:?}: {}", r.text);
        assert_eq!(r.error_code(), -32020, "{hdr:?}");
        assert_eq!(r.json()["id"], "h");
    }
    let r = modern(
        &gw,
        json!(1),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"x"}}),
        &[("mcp-name", "=?base64?ZWNobw==?=")],
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "sentinel-encoded Mcp-Name: {}",
        r.text
    );
    let r = modern(
        &gw,
        json!(1),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"x"}}),
        &[("mcp-name", "other")],
    )
    .await;
    assert_eq!(r.error_code(), -32020);
    // Unsupported version, envelope errors.
    let body = json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}});
    let r = gw
        .post_raw(
            None,
            body.to_string(),
            &[
                ("mcp-protocol-version", "2099-01-01"),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error_code(), -32022);
    assert_eq!(r.json()["error"]["data"]["requested"], "2099-01-01");
    let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":V}}});
    let r = gw
        .post_raw(
            None,
            body.to_string(),
            &[("mcp-protocol-version", V), ("mcp-method", "tools/list")],
        )
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (StatusCode::BAD_REQUEST, -32602)
    );
    // GET/DELETE → 405; a client-sent response → 400.
    for req in [gw.http.get(&gw.url), gw.http.delete(&gw.url)] {
        let r = req
            .header("mcp-protocol-version", V)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()["allow"], "POST");
    }
    let resp = json!({"jsonrpc":"2.0","id":1,"result":{"_meta":envelope()}});
    let r = gw
        .post_raw(None, resp.to_string(), &[("mcp-protocol-version", V)])
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_bridge_serves_modern_clients_from_a_legacy_backend() {
    let gw = gateway_for("legacy").await;
    assert_eq!(stats(&gw).await["backendEra"], "legacy");
    let d = modern(&gw, json!("d"), "server/discover", json!({}), &[])
        .await
        .json();
    let r = &d["result"];
    assert_eq!(r["resultType"], "complete");
    assert!(r["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!(V)));
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "switchboard-fixture"
    );
    assert!(r["capabilities"]["tools"].is_object() && r["capabilities"].get("tasks").is_none());
    assert!(r["ttlMs"].is_u64() && r["cacheScope"].is_string());

    let list = modern(&gw, json!(1), "tools/list", json!({}), &[])
        .await
        .json();
    assert_eq!(list["result"]["resultType"], "complete");
    assert_eq!(list["result"]["ttlMs"], 0);
    assert_eq!(list["result"]["cacheScope"], "private");
    let missing = modern(
        &gw,
        json!(2),
        "resources/read",
        json!({"uri":"test://nonexistent-resource-for-conformance-testing"}),
        &[],
    )
    .await;
    assert_eq!(
        missing.error_code(),
        -32602,
        "resource-not-found maps to the 2026 code"
    );

    // subscriptions/listen served by the gateway: ack first, then tagged list changes.
    let body = json!({"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{"_meta":envelope(),"notifications":{"toolsListChanged":true}}});
    let resp = gw
        .http
        .post(&gw.url)
        .header("accept", crate::common::BOTH)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ack = next_message(&mut events).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L1"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged":true})
    );
    // A prompts change (not asked for) then a tools change: only the latter arrives.
    modern(
        &gw,
        json!(3),
        "tools/call",
        json!({"name":"trigger","arguments":{"kind":"prompts_list_changed"}}),
        &[],
    )
    .await;
    modern(
        &gw,
        json!(4),
        "tools/call",
        json!({"name":"trigger","arguments":{"kind":"tools_list_changed"}}),
        &[],
    )
    .await;
    let n = next_message(&mut events).await;
    assert_eq!(n["method"], "notifications/tools/list_changed");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L1"
    );
}

/// The four client×backend era cells (and the dual-era backend), each with rmcp's client.
#[tokio::test]
async fn rmcp_clients_of_both_eras_reach_backends_of_each_era() {
    for backend in ["dual", "legacy", "modern"] {
        let gw = gateway_for(backend).await;
        crate::common::rmcp_both_eras(
            &gw.url,
            &format!("{backend} backend"),
            "text",
            str::to_owned,
        )
        .await;
    }
}

pub(crate) async fn next_message<S>(events: &mut std::pin::Pin<Box<S>>) -> Value
where
    S: futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + ?Sized,
{
    use futures::StreamExt;
    loop {
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
            .await
            .expect("no event within 10s")
            .expect("stream ended")
            .expect("sse error");
        if let Some(d) = e.data.filter(|d| !d.is_empty()) {
            return serde_json::from_str(&d).unwrap();
        }
    }
}

/// A backend that stops answering Modern requests is re-probed on its first era refusal; from
/// then on Modern clients are bridged onto its Legacy side instead of failing.
#[tokio::test]
async fn a_backend_refusing_modern_on_era_grounds_is_reprobed_and_bridged() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/shifty.py"
    );
    let gw = TestGateway::start_with(&[], &["python3", script]).await;
    assert_eq!(stats(&gw).await["backendEra"], "dual");
    let call = json!({"name":"who","arguments":{}});
    let r = modern(&gw, json!(1), "tools/call", call.clone(), &[]).await;
    assert_eq!(
        tool_text(&r.json()),
        "modern",
        "passed through while the backend speaks Modern"
    );

    let sid = gw.session().await;
    gw.call_tool(Some(&sid), json!(2), "downgrade", json!({}))
        .await;
    let refused = modern(&gw, json!(3), "tools/call", call.clone(), &[]).await;
    assert_eq!(
        refused.error_code(),
        -32022,
        "the refusal itself reaches the client"
    );
    // The re-probe runs in the background: bounded wait until the era is re-learned.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while stats(&gw).await["backendEra"] != "legacy" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "era never re-learned"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = modern(&gw, json!(4), "tools/call", call, &[]).await;
    let v = r.json();
    assert_eq!(tool_text(&v), "legacy", "bridged onto the Legacy side: {v}");
    assert_eq!(v["result"]["resultType"], "complete");
}

/// `Mcp-Param-*` headers mirror the arguments a tool's schema designates (`x-mcp-header`): the
/// gateway checks them, since a stdio backend never sees headers.
#[tokio::test]
async fn mcp_param_headers_must_mirror_designated_arguments() {
    let gw = TestGateway::start(&[]).await;
    let call = json!({"name":"test_custom_header","arguments":{"region":"us-west1"}});
    let r = modern(
        &gw,
        json!(1),
        "tools/call",
        call.clone(),
        &[("mcp-param-region", "us-west1")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = modern(
        &gw,
        json!(2),
        "tools/call",
        call.clone(),
        &[("mcp-param-region", "=?base64?dXMtd2VzdDE=?=")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "sentinel-encoded: {}", r.text);
    for bad in [&[("mcp-param-region", "eu-north1")][..], &[][..]] {
        let r = modern(&gw, json!(3), "tools/call", call.clone(), bad).await;
        assert_eq!(
            (r.status, r.error_code()),
            (StatusCode::BAD_REQUEST, -32020),
            "{bad:?}"
        );
        assert_eq!(r.json()["id"], 3);
    }
    // Tools without designations need no headers.
    let r = modern(
        &gw,
        json!(4),
        "tools/call",
        json!({"name":"echo","arguments":{"text":"x"}}),
        &[],
    )
    .await;
    assert_eq!(tool_text(&r.json()), "x");
}
