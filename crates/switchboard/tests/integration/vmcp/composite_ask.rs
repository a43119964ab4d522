//! A Legacy caller with no open GET listen stream is asked a composite's elicitation step on
//! the call's own response stream (answered as SSE), as the Legacy-client relay asks.

use reqwest::StatusCode;
use serde_json::json;

use super::{request, stdio, Dir, SB};
use crate::common::{TestGateway, BOTH};

const ASK_NAME: &str = r#"
  - name: ask_name
    description: Asks for a name (composite)
    inputSchema: {type: object}
    steps:
      - id: confirm
        type: elicitation
        message: "Your name?"
        requestedSchema: {type: object, properties: {name: {type: string}}, required: [name]}
    output:
      greeting: "Hello {{ steps.confirm.output.name }}"
"#;

#[tokio::test]
async fn a_legacy_caller_without_a_listen_stream_is_asked_on_the_calls_stream() {
    let dir = Dir::new("composite-ask-stream");
    let yaml = format!("backends:\n{}compositeTools:{ASK_NAME}", stdio("alpha", ""));
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let init = request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "no-listen", "version": "0"}}),
    );
    let r = gw.post(None, &init).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        gw.post(Some(&sid), &done).await.status,
        StatusCode::ACCEPTED
    );

    // No GET stream is ever opened. The call is answered as a stream carrying the question.
    let call = request(
        json!(7),
        "tools/call",
        json!({"name": "ask_name", "arguments": {}}),
    );
    let resp = gw
        .http
        .post(&gw.url)
        .header("accept", BOTH)
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let mut events = Box::pin(sse_stream::SseStream::from_bytes_stream(
        resp.bytes_stream(),
    ));
    let ask = crate::modern::next_message(&mut events).await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Your name?", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(
        gw.post(Some(&sid), &answer).await.status,
        StatusCode::ACCEPTED
    );
    let result = crate::modern::next_message(&mut events).await;
    assert_eq!(result["id"], 7, "{result}");
    assert_eq!(
        result["result"]["structuredContent"]["greeting"], "Hello Ada",
        "{result}"
    );
}

/// A composite that asks for input, hidden from the caller by the policy, is answered as a
/// missing tool, in the same delivery (it was answered as a stream, by name alone, and a
/// missing tool as JSON: found by review).
#[tokio::test]
async fn a_hidden_asking_composite_is_answered_as_a_missing_tool() {
    let dir = Dir::new("composite-ask-hidden");
    let policy = dir.write(
        "policy.cedar",
        "permit(principal, action, resource);\n\
         forbid(principal, action == Action::\"call_tool\", resource == Tool::\"ask_name\");\n",
    );
    let yaml = format!(
        "policy: {{file: {}}}\nbackends:\n{}compositeTools:{ASK_NAME}",
        policy.display(),
        stdio("alpha", "")
    );
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    let init = request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "hidden", "version": "0"}}),
    );
    let r = gw.post(None, &init).await;
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let call = |name: &str| {
        request(
            json!(7),
            "tools/call",
            json!({"name": name, "arguments": {}}),
        )
    };
    let hidden = gw.post(Some(&sid), &call("ask_name")).await;
    let missing = gw.post(Some(&sid), &call("no_such_tool")).await;
    assert_eq!(hidden.error_code(), -32602, "{}", hidden.text);
    assert_eq!(hidden.content_type(), missing.content_type());
    assert_eq!(
        (hidden.status, hidden.text.replace("ask_name", "NAME")),
        (missing.status, missing.text.replace("no_such_tool", "NAME"))
    );
}
