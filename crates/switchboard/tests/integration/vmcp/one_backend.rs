//! `serve` of one plain backend honours every setting it is given: a policy naming a tool's
//! `backend` or `original` name, and tool search, put it through the aggregating core instead
//! of being silently dropped by the transparent proxy.

use reqwest::StatusCode;
use serde_json::json;

use super::{request, serve, stdio, tool_names, Dir, Era};

/// Everything, except the fixture's own `pid`, judged by the catalog's attributes.
const BY_ORIGIN: &str = r#"
permit(principal, action, resource);
forbid(principal, action == Action::"call_tool", resource)
  when { resource has original && resource.original == "pid" && resource.backend == "solo" };
"#;

#[tokio::test]
async fn a_policy_on_the_origin_of_one_plain_backend_is_enforced() {
    let dir = Dir::new("one-backend-origin");
    let policy = dir.write("policy.cedar", BY_ORIGIN);
    let yaml = format!(
        "policy: {{file: {}}}\nbackends:\n{}",
        policy.display(),
        stdio("solo", "")
    );
    let served = serve("one-backend-origin", &yaml, None).await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let names = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(names.iter().any(|n| n == "echo"), "bare names: {names:?}");
    assert!(!names.iter().any(|n| n == "pid"), "{names:?}");
    let call = |name: &str| {
        request(
            json!(1),
            "tools/call",
            json!({"name": name, "arguments": {}}),
        )
    };
    let hidden = gw.post(Some(&sid), &call("pid")).await;
    let missing = gw.post(Some(&sid), &call("nosuch")).await;
    assert_eq!(hidden.status, StatusCode::OK, "{}", hidden.text);
    assert_eq!(hidden.error_code(), -32602, "never run: {}", hidden.text);
    assert_eq!(
        hidden.text.replace("pid", "NAME"),
        missing.text.replace("nosuch", "NAME")
    );
    let echo = request(
        json!(2),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(
        crate::common::tool_text(&gw.post(Some(&sid), &echo).await.json()),
        "hi"
    );
}

#[tokio::test]
async fn tool_search_on_one_plain_backend_is_honoured() {
    let yaml = format!(
        "aggregation: {{toolSearch: on}}\nbackends:\n{}",
        stdio("solo", "")
    );
    let served = serve("one-backend-search", &yaml, None).await;
    let gw = &served.gw;
    for era in [Era::Legacy, Era::Modern] {
        let sid = match era {
            Era::Legacy => Some(gw.session().await),
            Era::Modern => None,
        };
        let names = tool_names(gw, era, sid.as_deref()).await;
        assert_eq!(names, ["find_tools", "call_tool"], "{era:?}");
    }
}

/// Everything except one tool, one prompt and one resource: a deny-list, so a missing name is
/// *permitted* and reaches whatever answers missing names.
const DENY_LIST: &str = r#"
permit(principal, action, resource);
forbid(principal, action == Action::"call_tool", resource == Tool::"add");
forbid(principal, action == Action::"get_prompt", resource == Prompt::"PROMPT");
forbid(principal, action == Action::"read_resource", resource == Resource::"test://static-text");
"#;

/// `run --policy` with a deny-list: a hidden tool, prompt or resource is answered exactly as a
/// missing one, although the missing one is permitted (the transparent proxy let the backend
/// answer it in its own words, so the two differed).
#[tokio::test]
async fn run_with_a_deny_list_answers_hidden_items_as_missing_ones() {
    let dir = Dir::new("run-deny-list");
    let prompt = "test_simple_prompt";
    let policy = dir.write("policy.cedar", &DENY_LIST.replace("PROMPT", prompt));
    let gw = crate::common::TestGateway::start(&["--policy", policy.to_str().unwrap()]).await;
    let sid = gw.session().await;
    let pairs = [
        ("tools/call", "name", "add", "no_such_tool"),
        ("prompts/get", "name", prompt, "no_such_prompt"),
        (
            "resources/read",
            "uri",
            "test://static-text",
            "test://no-such-thing",
        ),
    ];
    for (method, key, hidden, missing) in pairs {
        let ask = |name: &str| request(json!(1), method, json!({ key: name, "arguments": {} }));
        let h = gw.post(Some(&sid), &ask(hidden)).await;
        let m = gw.post(Some(&sid), &ask(missing)).await;
        assert_eq!(h.status, StatusCode::OK, "{method}: {}", h.text);
        assert!(
            h.json().get("error").is_some(),
            "{method}: never served: {}",
            h.text
        );
        assert_eq!(
            h.text.replace(hidden, "NAME"),
            m.text.replace(missing, "NAME"),
            "{method}"
        );
    }
}

/// A Modern listen naming a resource the policy hides is acknowledged exactly as one naming a
/// resource nobody serves: the URI left out, HTTP 200 (it was a 403, telling the caller the
/// resource exists). A visible resource it may not subscribe to is still refused with 403.
#[tokio::test]
async fn a_listen_on_a_hidden_resource_is_acknowledged_as_on_a_missing_one() {
    let dir = Dir::new("listen-hidden");
    let policy = dir.write(
        "policy.cedar",
        "permit(principal, action, resource);\n\
         forbid(principal, action in [Action::\"read_resource\", Action::\"subscribe\"], resource == Resource::\"test://static-text\");\n\
         forbid(principal, action == Action::\"subscribe\", resource == Resource::\"test://static-binary\");\n",
    );
    let yaml = format!(
        "policy: {{file: {}}}\nbackends:\n{}",
        policy.display(),
        stdio("solo", "")
    );
    let served = serve("listen-hidden", &yaml, None).await;
    let gw = &served.gw;
    let listen = |extra: &'static str| {
        super::modern_listen(
            gw,
            json!({"resourceSubscriptions": ["test://watched-resource", extra]}),
        )
    };
    let mut acks = Vec::new();
    for extra in ["test://static-text", "test://no-such-thing"] {
        let resp = listen(extra).await;
        assert_eq!(resp.status(), StatusCode::OK, "{extra}");
        let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
            resp.bytes_stream(),
        ));
        let ack = crate::modern::next_message(&mut events).await;
        acks.push(ack);
    }
    assert_eq!(
        acks[0], acks[1],
        "hidden and missing are acknowledged alike"
    );
    assert_eq!(
        acks[0]["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched-resource"])
    );
    // Visible (readable) but not subscribable: refused, as before.
    let refused = listen("test://static-binary").await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
}
