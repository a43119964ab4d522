//! A backend's questions to a client pass the guardrails on every path, not only a session's
//! own backend's requests: a Legacy backend's elicitation under MRTR (a Modern call on a
//! process of its own), and a Modern backend's `input_required` relayed to a Legacy client.
//! Redacted, the client is asked the redacted question; refused, the client is asked nothing
//! and the asker gets the guardrail's error as its one answer.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Dir, AWS, REDACTING, REJECTING};
use crate::common::{tool_text, TestGateway};
use crate::per_session::{next, open_call};

const REDACTED: &str = "[REDACTED:aws_access_key]";

fn script(name: &str) -> String {
    format!(
        "{}/tests/integration/backends/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A secrets rule covering only other tools: no answer of the tools here is checked, so only
/// the checks on the way (which name no tool) stand between the key and the client.
fn elsewhere(action: &str) -> String {
    format!("guardrails:\n  - name: secrets\n    tools: [other_*]\n    on: [response]\n    check: {{secrets: builtin, action: {action}}}\n")
}

/// A Modern call of `leaky.py`'s `noisy` in per-session mode (MRTR): the backend's
/// elicitation becomes the call's `input_required`, redacted; refused, the backend gets the
/// guardrail's error and the call ends with what it made of it.
#[tokio::test]
async fn an_mrtr_backends_question_is_checked() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("asks-mrtr-{action}"));
        let file = dir.write("guards.yaml", &elsewhere(action));
        let leaky = script("leaky.py");
        let args = ["--isolation", "per-session", "--guardrails", &file];
        let gw = TestGateway::start_with(&args, &["python3", &leaky]).await;
        let mut meta = crate::modern::envelope();
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
        let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
            "params":{"name":"noisy","arguments":{"ask":"wait"},"_meta":meta}});
        let headers = [
            ("mcp-protocol-version", crate::modern::V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "noisy"),
        ];
        let reply = gw.post_raw(None, body.to_string(), &headers).await;
        assert!(!reply.text.contains(AWS), "{}", reply.text);
        let v = reply.json();
        if action == "redact" {
            assert_eq!(v["result"]["resultType"], "input_required", "{v}");
            let asked: Vec<&Value> = v["result"]["inputRequests"]
                .as_object()
                .map(|m| m.values().collect())
                .unwrap_or_default();
            assert_eq!(asked.len(), 1, "{v}");
            assert_eq!(asked[0]["method"], "elicitation/create", "{v}");
            let message = format!("Confirm key {REDACTED}");
            assert_eq!(asked[0]["params"]["message"], message, "{v}");
        } else {
            let text = tool_text(&v);
            assert!(text.starts_with("answered "), "{v}");
            let got: Value = serde_json::from_str(&text["answered ".len()..]).unwrap();
            assert_eq!(got["error"]["code"], -32603, "{v}");
            assert_eq!(got["error"]["data"]["guardrail"], "secrets", "{v}");
        }
    }
}

/// A Legacy session declaring elicitation.
async fn legacy_session(gw: &TestGateway) -> String {
    crate::relay::legacy_session(gw, json!({"elicitation": {}})).await
}

/// A Legacy client's call of `tagger.py`'s `ask` (a Modern backend's `input_required`
/// relayed as a request on the client's session): asked the redacted question, then answered;
/// refused, the call's answer is the guardrail's error and no question comes first.
#[tokio::test]
async fn a_relayed_question_is_checked() {
    for (rules, redacted) in [(REDACTING, true), (REJECTING, false)] {
        let dir = Dir::new(&format!("asks-relay-{redacted}"));
        let file = dir.write("guards.yaml", rules);
        let tagger = script("tagger.py");
        let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &tagger]).await;
        let sid = legacy_session(&gw).await;
        let call = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask","arguments":{}}});
        let mut stream = open_call(&gw, &sid, call).await;
        let first = next(&mut stream).await;
        assert!(!first.to_string().contains(AWS), "{first}");
        if !redacted {
            assert_eq!(first["id"], 5, "no question first: {first}");
            assert_eq!(first["error"]["data"]["guardrail"], "secrets", "{first}");
            continue;
        }
        assert_eq!(first["method"], "elicitation/create", "{first}");
        let message = format!("Confirm key {REDACTED}");
        assert_eq!(first["params"]["message"], message, "{first}");
        let body =
            json!({"jsonrpc":"2.0","id":first["id"],"result":{"action":"accept","content":{}}});
        let r = gw.post(Some(&sid), &body).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        let done = next(&mut stream).await;
        assert_eq!(done["id"], 5, "{done}");
        assert!(tool_text(&done).starts_with("answered "), "{done}");
    }
}

/// A Modern client's call of `tagger.py`'s `ask` (a Modern backend's `input_required` passed
/// on, its state sealed): the question is redacted, or refused with the guardrail's error,
/// though no guardrail covers the tool.
#[tokio::test]
async fn a_modern_backends_input_required_is_checked() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("asks-modern-{action}"));
        let file = dir.write("guards.yaml", &elsewhere(action));
        let tagger = script("tagger.py");
        let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &tagger]).await;
        let mut meta = crate::modern::envelope();
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
        let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
            "params":{"name":"ask","arguments":{},"_meta":meta}});
        let headers = [
            ("mcp-protocol-version", crate::modern::V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "ask"),
        ];
        let reply = gw.post_raw(None, body.to_string(), &headers).await;
        assert!(!reply.text.contains(AWS), "{}", reply.text);
        let v = reply.json();
        if action == "redact" {
            assert_eq!(v["result"]["resultType"], "input_required", "{v}");
            let asked = &v["result"]["inputRequests"]["q"];
            let message = format!("Confirm key {REDACTED}");
            assert_eq!(asked["params"]["message"], message, "{v}");
        } else {
            assert_eq!(v["error"]["data"]["guardrail"], "secrets", "{v}");
        }
    }
}

/// How `tagger.py`'s `ask` may spell its `input_required` so that parsers read its
/// `resultType` differently: in another case (Go's `encoding/json` matches keys so), with a
/// long s (U+017F, which Go folds to `s`), or twice (parsers disagree on which copy wins).
const LOOSE_TYPES: [(&str, bool); 3] = [
    ("ResultType", false),
    ("re\u{17f}ultType", false),
    ("resultType", true),
];

/// The internal error a result whose `resultType` reads two ways becomes.
fn is_ambiguity_error(v: &Value) -> bool {
    v["error"]["code"] == -32603
        && v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("resultType"))
}

/// A Modern client's call of `tagger.py`'s `ask` whose `input_required` spells `resultType`
/// loosely (or twice): the gateway cannot tell whether it asks for input, so the client gets
/// an internal error, never the backend's unchecked questions a loose parser would read.
#[tokio::test]
async fn a_loosely_typed_input_required_never_reaches_a_modern_client() {
    let dir = Dir::new("asks-modern-loose");
    let file = dir.write("guards.yaml", &elsewhere("redact"));
    let tagger = script("tagger.py");
    let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &tagger]).await;
    for (key, twice) in LOOSE_TYPES {
        let mut meta = crate::modern::envelope();
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"elicitation": {}});
        let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask",
            "arguments":{"resultTypeKey":key,"twice":twice},"_meta":meta}});
        let headers = [
            ("mcp-protocol-version", crate::modern::V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "ask"),
        ];
        let reply = gw.post_raw(None, body.to_string(), &headers).await;
        assert!(!reply.text.contains(AWS), "{key}: {}", reply.text);
        let v = reply.json();
        assert!(is_ambiguity_error(&v), "{key} (twice: {twice}): {v}");
        assert_eq!(v["id"], 3, "{v}");
    }
}

/// The same answer to a Legacy client's call (relayed rounds): not taken for a final result
/// and passed on with its questions, but the call's internal error; nothing is asked first.
#[tokio::test]
async fn a_loosely_typed_input_required_never_reaches_a_legacy_client() {
    let dir = Dir::new("asks-relay-loose");
    let file = dir.write("guards.yaml", &elsewhere("redact"));
    let tagger = script("tagger.py");
    let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &tagger]).await;
    let sid = legacy_session(&gw).await;
    for (key, twice) in LOOSE_TYPES {
        let call = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask",
            "arguments":{"resultTypeKey":key,"twice":twice}}});
        let mut stream = open_call(&gw, &sid, call).await;
        let first = next(&mut stream).await;
        assert!(!first.to_string().contains(AWS), "{key}: {first}");
        assert_eq!(first["id"], 5, "no question first: {first}");
        assert!(
            is_ambiguity_error(&first),
            "{key} (twice: {twice}): {first}"
        );
    }
}

/// A Legacy client's task on a Modern backend (the fixture, Modern only): the gateway polls
/// the task in `tasks/result` and asks the client the task's question itself. The question
/// (here naming the planted key) is checked on the way: redacted, the client is asked the
/// redacted question; refused, the client is asked nothing and `tasks/result` is the
/// guardrail's error.
#[tokio::test]
async fn a_bridged_tasks_question_is_checked() {
    use crate::fixture_tasks::{create, request, session};
    let sb = env!("CARGO_BIN_EXE_switchboard");
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("asks-task-{action}"));
        let file = dir.write("guards.yaml", &elsewhere(action));
        let args = ["--guardrails", file.as_str()];
        let gw = TestGateway::start_with(&args, &[sb, "fixture", "--era", "modern"]).await;
        let (sid, _) = session(&gw, json!({"elicitation": {}})).await;
        let file_name = format!("{AWS}.txt");
        let task = create(&gw, &sid, "confirm_delete", json!({"filename": file_name})).await;
        let poll = request("tasks/result", json!({"taskId": task["taskId"]}));
        let mut waiting = open_call(&gw, &sid, poll).await;
        let first = next(&mut waiting).await;
        assert!(!first.to_string().contains(AWS), "{action}: {first}");
        if action == "reject" {
            assert_eq!(first["id"], "q", "{first}");
            assert!(first["error"]["message"].is_string(), "{first}");
            continue;
        }
        assert_eq!(first["method"], "elicitation/create", "{first}");
        let message = first["params"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(REDACTED), "{first}");
        let answer = json!({"jsonrpc": "2.0", "id": first["id"],
            "result": {"action": "decline"}});
        let status = gw.post(Some(&sid), &answer).await.status;
        assert_eq!(status, StatusCode::ACCEPTED);
        let done = next(&mut waiting).await;
        assert_eq!(done["id"], "q", "{done}");
    }
}
