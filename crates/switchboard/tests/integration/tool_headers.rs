//! The `Mcp-Param-*` designation cache (`core::tool_headers`) against a backend that counts its
//! `tools/list` walks (`backends/toolsy.py`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};
use crate::modern::modern;

/// The gateway in front of `toolsy.py FAIL_FIRST LIST_DELAY_MS`.
async fn toolsy(fail_first: u32, list_delay_ms: u32) -> TestGateway {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/toolsy.py"
    );
    let (fail, delay) = (fail_first.to_string(), list_delay_ms.to_string());
    TestGateway::start_with(&[], &["python3", script, &fail, &delay]).await
}

/// A Modern `tools/call regional` for `us-west1` carrying `header` as `Mcp-Param-Region`.
async fn regional(gw: &TestGateway, id: u64, header: &str) -> crate::common::Reply {
    let call = json!({"name":"regional","arguments":{"region":"us-west1"}});
    modern(
        gw,
        json!(id),
        "tools/call",
        call,
        &[("mcp-param-region", header)],
    )
    .await
}

/// How many `tools/list` the backend has answered (asked over Legacy, which checks no
/// headers and so learns nothing itself).
async fn walks(gw: &TestGateway, session: &str) -> u64 {
    stats(gw, session).await["toolsList"].as_u64().unwrap()
}

/// The backend's counts (`toolsy.py`'s `stats` tool).
async fn stats(gw: &TestGateway, session: &str) -> Value {
    let r = gw
        .call_tool(Some(session), json!("s"), "stats", json!({}))
        .await;
    serde_json::from_str(tool_text(&r.json())).unwrap()
}

/// A walk that fails is not kept: once the backend answers, the designations are learned and
/// enforced (before, the empty table of the failed walk stayed until a tools list_changed).
#[tokio::test]
async fn a_failed_walk_is_retried_and_then_enforced() {
    let gw = toolsy(1, 0).await;
    // The backend cannot list its tools yet: the call goes unchecked (fail open), as the
    // designations are unknowable.
    let r = regional(&gw, 1, "eu-north1").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(tool_text(&r.json()), "ok");
    // A failed walk is remembered for a second: bounded wait for the retry to enforce them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = regional(&gw, 2, "eu-north1").await;
        if r.status == StatusCode::BAD_REQUEST {
            assert_eq!(r.error_code(), -32020, "{}", r.text);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "designations never re-learned: {}",
            r.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = regional(&gw, 3, "us-west1").await;
    assert_eq!(tool_text(&r.json()), "ok");
    let session = gw.session().await;
    assert_eq!(walks(&gw, &session).await, 2, "one failed walk, one kept");
}

/// Concurrent cold callers share one walk. The backend answers `tools/list` after 300 ms so
/// the callers overlap the walk; the count is exact whatever the overlap.
#[tokio::test]
async fn concurrent_cold_callers_cause_one_walk() {
    const CALLERS: u64 = 8;
    let gw = toolsy(0, 300).await;
    let replies =
        futures::future::join_all((0..CALLERS).map(|i| regional(&gw, i, "us-west1"))).await;
    for r in &replies {
        assert_eq!(tool_text(&r.json()), "ok", "{}", r.text);
    }
    let refused = regional(&gw, CALLERS, "eu-north1").await;
    assert_eq!(refused.error_code(), -32020, "{}", refused.text);
    let session = gw.session().await;
    assert_eq!(walks(&gw, &session).await, 1);
}

/// A tool the policy hides is answered as a missing one even when its `Mcp-Param-*` headers
/// do not match its arguments: checking them first answered 400 `-32020`, which told the
/// caller the tool exists and which of its arguments are mirrored (found by review).
#[tokio::test]
async fn a_hidden_tools_param_headers_are_not_checked_before_it_is_refused() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/toolsy.py"
    );
    let dir = crate::vmcp::Dir::new("hidden-param-headers");
    let policy = dir.write(
        "policy.cedar",
        "permit(principal, action, resource);\n\
         forbid(principal, action == Action::\"call_tool\", resource == Tool::\"regional\");\n",
    );
    let policy = policy.to_str().unwrap();
    let gw = TestGateway::start_with(&["--policy", policy], &["python3", script, "0", "0"]).await;
    let hidden = regional(&gw, 1, "eu-north1").await;
    let call = json!({"name":"no_such_tool","arguments":{"region":"us-west1"}});
    let missing = modern(
        &gw,
        json!(1),
        "tools/call",
        call,
        &[("mcp-param-region", "eu-north1")],
    )
    .await;
    assert_eq!(hidden.status, StatusCode::OK, "{}", hidden.text);
    assert_eq!(hidden.error_code(), -32602, "{}", hidden.text);
    assert_eq!(
        hidden.text.replace("regional", "NAME"),
        missing.text.replace("no_such_tool", "NAME")
    );
}

/// A designated argument spelled another way (`Region` for `region`) is refused before the
/// backend sees it: a backend matching keys loosely (Go's `encoding/json`) would run it as
/// `region` though no `Mcp-Param-Region` mirrors it. Before, the call needed no header and
/// reached the backend. The sentinel (`stats`, after the refusals) proves only the exact call
/// ran.
#[tokio::test]
async fn a_designated_argument_spelled_another_way_never_reaches_the_backend() {
    let gw = toolsy(0, 0).await;
    let r = regional(&gw, 1, "us-west1").await;
    assert_eq!(tool_text(&r.json()), "ok", "{}", r.text);
    for (id, spelled) in [(2, "Region"), (3, "REGION"), (4, "reg\u{131}on")] {
        let call = json!({"name":"regional","arguments":{spelled:"eu-north1"}});
        let r = modern(&gw, json!(id), "tools/call", call, &[]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{spelled}: {}", r.text);
        assert_eq!(r.error_code(), -32602, "{spelled}: {}", r.text);
        assert_eq!(r.json()["id"], json!(id), "{}", r.text);
    }
    // Arguments a value parser cannot read (an integer past a double) would read as absent
    // and need no header: refused too.
    let mut params = json!({"name":"regional","arguments":{"Region":"eu","pad":"PAD"}});
    params["_meta"] = crate::modern::envelope();
    let body = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":params});
    let body = body
        .to_string()
        .replace("\"PAD\"", &format!("1{}", "0".repeat(400)));
    let headers = [
        ("mcp-protocol-version", crate::modern::V),
        ("mcp-method", "tools/call"),
        ("mcp-name", "regional"),
    ];
    let r = gw.post_raw(None, body, &headers).await;
    assert_eq!(r.error_code(), -32602, "{}", r.text);
    let session = gw.session().await;
    assert_eq!(stats(&gw, &session).await["regional"], json!(1));
}
