//! What a client answers a backend's question with is checked on its way to the backend as
//! a request is: the `inputResponses` of a Modern retry (an elicitation's typed text, a
//! sampled completion) under `on: [request]` rules.

use reqwest::StatusCode;
use serde_json::json;

use super::{Dir, AWS};
use crate::common::tool_text;
use crate::mrtr::{bridge, call, elicitation, input_required};

/// One `secrets` guardrail with `action`, on requests only: no response check can hide
/// what reached a backend.
fn on_requests(action: &str) -> String {
    format!("guardrails:\n  - name: secrets\n    on: [request]\n    check: {{secrets: builtin, action: {action}}}\n")
}
/// A user types an AWS key into the elicitation a Legacy backend asked through the MRTR
/// bridge: redacted, the backend is answered the redacted text (and greets that); refused,
/// the retry gets the guardrail's `-32602` and the backend is answered nothing. Before, the
/// request rules checked a call's `arguments` only, and the key reached the backend (review
/// MEDIUM).
#[tokio::test]
async fn an_answer_to_a_backends_question_is_checked_as_a_request() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("answers-{action}"));
        // On requests only: no response check can hide what reached the backend.
        let rules = on_requests(action);
        let file = dir.write("guards.yaml", &rules);
        let gw = bridge(&["--guardrails", &file]).await;
        let tool = "test_input_required_result_elicitation";
        let first = call(&gw, None, tool, json!({}), elicitation(), json!({})).await;
        let state = input_required(&first)["requestState"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer = json!({"user_name": {"action": "accept", "content": {"name": AWS}}});
        let extra = json!({"inputResponses": answer, "requestState": state});
        let r = call(&gw, None, tool, json!({}), elicitation(), extra).await;
        assert!(!r.text.contains(AWS), "{action}: {}", r.text);
        let v = r.json();
        if action == "redact" {
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            assert_eq!(tool_text(&v), "Hello, [REDACTED:aws_access_key]!", "{v}");
        } else {
            // Modern invalid params: HTTP 400, as a refused call's arguments.
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
            assert_eq!(v["error"]["code"], -32602, "{v}");
            assert_eq!(v["error"]["data"]["guardrail"], "secrets", "{v}");
        }
    }
}

/// The same for a Legacy session's client answering its own backend process's elicitation
/// (the answer POSTed as a JSON-RPC response): redacted, the backend gets the redacted
/// answer; refused, it gets the guardrail's `-32603` error instead. Before, the client's
/// answer was sent to the backend as it came (review MEDIUM).
#[tokio::test]
async fn a_legacy_clients_answer_is_checked_as_a_request() {
    use crate::per_session::{client_session, elicit, next, open_call};
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("legacy-answers-{action}"));
        let rules = on_requests(action);
        let file = dir.write("guards.yaml", &rules);
        let gw = crate::common::TestGateway::start(&[
            "--isolation",
            "per-session",
            "--guardrails",
            &file,
        ])
        .await;
        let sid = client_session(&gw).await;
        let mut stream = open_call(&gw, &sid, elicit()).await;
        let question = next(&mut stream).await;
        assert_eq!(question["method"], "elicitation/create", "{question}");
        let answer = json!({"jsonrpc":"2.0","id":question["id"],
            "result":{"action":"accept","content":{"who":AWS}}});
        let r = gw.post(Some(&sid), &answer).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        let done = next(&mut stream).await;
        let text = tool_text(&done);
        assert!(!text.contains(AWS), "{action}: {done}");
        let report: serde_json::Value = serde_json::from_str(text).unwrap();
        if action == "redact" {
            let who = &report["answer"]["result"]["content"]["who"];
            assert_eq!(who, "[REDACTED:aws_access_key]", "{report}");
        } else {
            let error = &report["answer"]["error"];
            assert_eq!(error["code"], -32603, "{report}");
            assert_eq!(error["data"]["guardrail"], "secrets", "{report}");
        }
    }
}

/// A Legacy client answering a Modern backend's question (the gateway asks it, then retries
/// the call with the answer): the retry carries the redacted answer, or the call is refused
/// with the guardrail's error and no retry is sent. Before, the gateway built the retry
/// from the client's answer unchecked (review of 0ec9545: this path answers the gateway's own
/// question, which the check in the session sink never sees).
#[tokio::test]
async fn a_legacy_clients_answer_relayed_to_a_modern_backend_is_checked() {
    use crate::per_session::{next, open_call};
    use crate::relay::{legacy_session, modern_backend};
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("relay-answers-{action}"));
        let rules = on_requests(action);
        let file = dir.write("guards.yaml", &rules);
        let gw = modern_backend(&["--guardrails", &file]).await;
        let sid = legacy_session(&gw, json!({"elicitation": {}})).await;
        let call = json!({"jsonrpc":"2.0","id":5,"method":"tools/call",
            "params":{"name":"test_input_required_result_elicitation","arguments":{}}});
        let mut stream = open_call(&gw, &sid, call).await;
        let q = next(&mut stream).await;
        assert_eq!(q["method"], "elicitation/create", "{q}");
        let answer = json!({"jsonrpc":"2.0","id":q["id"],
            "result":{"action":"accept","content":{"name":AWS}}});
        let r = gw.post(Some(&sid), &answer).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        let done = next(&mut stream).await;
        assert!(!done.to_string().contains(AWS), "{action}: {done}");
        if action == "redact" {
            assert_eq!(
                tool_text(&done),
                "Hello, [REDACTED:aws_access_key]!",
                "{done}"
            );
        } else {
            assert_eq!(done["error"]["code"], -32603, "{done}");
            assert_eq!(done["error"]["data"]["guardrail"], "secrets", "{done}");
        }
    }
}

/// A Legacy client's answer sent as an error carries its `data` to the backend only as the
/// request rules allow: refused, the backend gets the guardrail's error instead.
#[tokio::test]
async fn a_legacy_clients_error_answer_is_checked_too() {
    use crate::per_session::{client_session, elicit, next, open_call};
    let dir = Dir::new("error-answers");
    let rules = on_requests("reject");
    let file = dir.write("guards.yaml", &rules);
    let gw =
        crate::common::TestGateway::start(&["--isolation", "per-session", "--guardrails", &file])
            .await;
    let sid = client_session(&gw).await;
    let mut stream = open_call(&gw, &sid, elicit()).await;
    let question = next(&mut stream).await;
    let answer = json!({"jsonrpc":"2.0","id":question["id"],
        "error":{"code":-1,"message":"declined","data":{"note":AWS}}});
    let r = gw.post(Some(&sid), &answer).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let done = next(&mut stream).await;
    let report: serde_json::Value = serde_json::from_str(tool_text(&done)).unwrap();
    assert!(!report.to_string().contains(AWS), "{report}");
    assert_eq!(
        report["answer"]["error"]["data"]["guardrail"], "secrets",
        "{report}"
    );
}

/// A Modern client's `tasks/update` answering a task's question (a Legacy backend's, asked
/// through the gateway): refused by the request rules, the backend never gets the answer
/// and the task still waits for one. Before, `tasks/update` was not a method the
/// guardrails checked (review of 0ec9545).
#[tokio::test]
async fn a_modern_tasks_update_answer_is_checked() {
    use crate::vmcp::{modern, modern_declaring};
    let dir = Dir::new("update-answers");
    let rules = on_requests("reject");
    let file = dir.write("guards.yaml", &rules);
    let sb = env!("CARGO_BIN_EXE_switchboard");
    let gw = crate::common::TestGateway::start_with(
        &["--guardrails", &file],
        &[sb, "fixture", "--era", "legacy"],
    )
    .await;
    let call = json!({"name": "confirm_delete", "arguments": {"filename": "x.txt"}});
    let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let created = modern_declaring(&gw, (json!(1), "tools/call"), call, caps, &[]).await;
    let created = created.json();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let asking = until_asked(&gw, &task).await;
    let key = asking["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap();
    let answer = json!({"taskId": task,
        "inputResponses": {key: {"action": "accept", "content": {"confirm": true, "note": AWS}}}});
    let updated = modern(&gw, json!(2), "tasks/update", answer, &[]).await;
    assert!(!updated.text.contains(AWS), "{}", updated.text);
    let v = updated.json();
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["guardrail"], "secrets", "{v}");
    let still = modern(&gw, json!(3), "tasks/get", json!({"taskId": task}), &[]).await;
    assert_eq!(
        still.json()["result"]["status"],
        "input_required",
        "{}",
        still.text
    );
}

/// `tasks/get` until the task asks for input (10 s at most).
async fn until_asked(gw: &crate::common::TestGateway, task: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = crate::vmcp::modern(gw, json!("g"), "tasks/get", json!({"taskId": task}), &[]);
        let got = r.await.json()["result"].clone();
        if got["status"] == "input_required" {
            return got;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got}");
        // Polling a task's status: there is nothing to wait on but the next answer.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The answers a Modern `prompts/get` retry carries are checked as a `tools/call`'s are
/// (the MRTR bridge answers them for `prompts/get` and `resources/read` too): redacted, the
/// prompt is built from the redacted text; refused, the retry gets the guardrail's error.
/// Before, only `tools/call` and `tasks/update` had their `inputResponses` checked (review
/// HIGH).
#[tokio::test]
async fn a_prompts_get_retry_s_answers_are_checked() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("prompt-answers-{action}"));
        let rules = on_requests(action);
        let file = dir.write("guards.yaml", &rules);
        let gw = bridge(&["--guardrails", &file]).await;
        let prompt = "test_input_required_result_prompt";
        let get = |extra: serde_json::Value| {
            let mut params = json!({"name": prompt, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": crate::modern::V,
                "io.modelcontextprotocol/clientCapabilities": elicitation()}});
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                params[k] = v;
            }
            let body = json!({"jsonrpc":"2.0","id":9,"method":"prompts/get","params":params});
            let headers = [
                ("mcp-protocol-version", crate::modern::V),
                ("mcp-method", "prompts/get"),
                ("mcp-name", prompt),
            ];
            let gw = &gw;
            async move { gw.post_raw(None, body.to_string(), &headers).await }
        };
        let first = get(json!({})).await;
        let state = input_required(&first)["requestState"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer = json!({"user_context": {"action": "accept", "content": {"context": AWS}}});
        let r = get(json!({"inputResponses": answer, "requestState": state})).await;
        assert!(!r.text.contains(AWS), "{action}: {}", r.text);
        let v = r.json();
        if action == "redact" {
            let text = &v["result"]["messages"][0]["content"]["text"];
            assert_eq!(text, "Use this context: [REDACTED:aws_access_key]", "{v}");
        } else {
            assert_eq!(v["error"]["code"], -32602, "{v}");
            assert_eq!(v["error"]["data"]["guardrail"], "secrets", "{v}");
        }
    }
}

/// A Legacy session's task on a Modern backend: the task's question is asked on the session
/// during `tasks/result`, and the client's answer goes on to the backend in a `tasks/update`
/// only as the request rules allow. Refused, the `tasks/result` is the guardrail's error and
/// no `tasks/update` carries the key.
#[tokio::test]
async fn a_legacy_clients_answer_to_a_modern_task_is_checked() {
    use crate::fixture_tasks::{create, request, session};
    use crate::per_session::{next, open_call};
    let dir = Dir::new("legacy-task-answers");
    let rules = on_requests("reject");
    let file = dir.write("guards.yaml", &rules);
    let gw = crate::relay::modern_backend(&["--guardrails", &file]).await;
    let (sid, _) = session(&gw, json!({"elicitation": {}})).await;
    let task = create(&gw, &sid, "confirm_delete", json!({"filename": "y.txt"})).await;
    let result = request("tasks/result", json!({"taskId": task["taskId"]}));
    let mut waiting = open_call(&gw, &sid, result).await;
    let question = next(&mut waiting).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true, "note": AWS}}});
    let r = gw.post(Some(&sid), &reply).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let done = next(&mut waiting).await;
    assert!(!done.to_string().contains(AWS), "{done}");
    assert_eq!(done["error"]["code"], -32603, "{done}");
    assert_eq!(done["error"]["data"]["guardrail"], "secrets", "{done}");
}

/// A secret in an answer's key is not passed on, nor renamed (a renamed key answers no
/// question): the retry is refused under either action (review: each answer's value was
/// checked, its key not at all).
#[tokio::test]
async fn a_secret_in_an_answers_key_is_refused() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("answer-keys-{action}"));
        let file = dir.write("guards.yaml", &on_requests(action));
        let gw = bridge(&["--guardrails", &file]).await;
        let tool = "test_input_required_result_elicitation";
        let first = call(&gw, None, tool, json!({}), elicitation(), json!({})).await;
        let state = input_required(&first)["requestState"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer = json!({"user_name": {"action": "accept", "content": {"name": "Ada"}},
            AWS: {"action": "decline"}});
        let extra = json!({"inputResponses": answer, "requestState": state});
        let r = call(&gw, None, tool, json!({}), elicitation(), extra).await;
        assert!(!r.text.contains(AWS), "{action}: {}", r.text);
        let v = r.json();
        assert_eq!(v["error"]["code"], -32602, "{action}: {v}");
        assert_eq!(v["error"]["data"]["guardrail"], "secrets", "{v}");
    }
}
