//! Every channel that carries a backend's text to a client passes the guardrails, not only
//! answers: in per-session mode log messages, `resources/updated`, a backend's own
//! notifications, its requests to the client (elicitation), progress notes whole (`_meta`, a
//! non-string `message`); under MRTR log messages; and the answers of `tasks/get`,
//! `tasks/list` and `completion/complete`.

use serde_json::{json, Value};

use super::{answer, call, texts, Dir, AWS, REDACTING, REJECTING};
use crate::common::TestGateway;

const REDACTED: &str = "[REDACTED:aws_access_key]";

fn script(name: &str) -> String {
    format!(
        "{}/tests/integration/backends/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `run --isolation per-session --guardrails FILE` in front of `leaky.py`.
async fn per_session(dir: &Dir, rules: &str) -> TestGateway {
    let file = dir.write("guards.yaml", rules);
    let leaky = script("leaky.py");
    let args = ["--isolation", "per-session", "--guardrails", &file];
    TestGateway::start_with(&args, &["python3", &leaky]).await
}

fn find<'a>(m: &'a [Value], method: &str) -> Vec<&'a Value> {
    m.iter().filter(|v| v["method"] == method).collect()
}

#[tokio::test]
async fn a_session_backends_every_channel_is_redacted() {
    let dir = Dir::new("channels-redact");
    let gw = per_session(&dir, REDACTING).await;
    let s = gw.session().await;
    let (reply, m) = call(&gw, Some(&s), "noisy", "{}", true).await;
    let note = format!("key {REDACTED}");
    let logs = find(&m, "notifications/message");
    assert_eq!(logs.len(), 1, "{}", reply.text);
    assert_eq!(logs[0]["params"]["data"]["note"], note);
    let updated = find(&m, "notifications/resources/updated");
    assert_eq!(updated.len(), 1, "{}", reply.text);
    assert_eq!(updated[0]["params"]["uri"], format!("file:///{REDACTED}"));
    let custom = find(&m, "notifications/leaky/custom");
    assert_eq!(custom.len(), 1, "{}", reply.text);
    assert_eq!(custom[0]["params"]["note"], note);
    let progress = find(&m, "notifications/progress");
    assert_eq!(progress.len(), 2, "{}", reply.text);
    assert_eq!(progress[0]["params"]["message"]["note"], note);
    assert_eq!(progress[1]["params"]["_meta"]["note"], REDACTED);
    assert_eq!(progress[1]["params"]["progressToken"], "p1");
    let asked = find(&m, "elicitation/create");
    assert_eq!(asked.len(), 1, "{}", reply.text);
    assert_eq!(
        asked[0]["params"]["message"],
        format!("Confirm key {REDACTED}")
    );
    // The answer (the backend's request to the client has an id too).
    let done = m.iter().find(|v| v["id"] == 7 && v.get("method").is_none());
    assert_eq!(texts(&done.expect("the answer")["result"]), ["done"]);
    assert!(!reply.text.contains(AWS), "{}", reply.text);
}

/// Under `reject` nothing but the answer arrives: the answer, after them on the same
/// stream, is the proof the others were not merely late.
#[tokio::test]
async fn a_session_backends_every_channel_is_refused() {
    let dir = Dir::new("channels-reject");
    let gw = per_session(&dir, REJECTING).await;
    let s = gw.session().await;
    let (reply, m) = call(&gw, Some(&s), "noisy", "{}", true).await;
    assert_eq!(m.len(), 1, "only the answer: {}", reply.text);
    assert_eq!(texts(&answer(&m)["result"]), ["done"]);
    assert!(!reply.text.contains(AWS), "{}", reply.text);
}

/// A Modern call in per-session mode runs on a process of its own (MRTR): its log messages,
/// asked for with `_meta` logLevel, are checked too.
#[tokio::test]
async fn an_mrtr_calls_log_messages_are_checked() {
    for (rules, redacted) in [(REDACTING, true), (REJECTING, false)] {
        let dir = Dir::new(&format!("channels-mrtr-{redacted}"));
        let gw = per_session(&dir, rules).await;
        let mut meta = crate::modern::envelope();
        meta["io.modelcontextprotocol/logLevel"] = json!("info");
        let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call",
            "params":{"name":"noisy","arguments":{"ask":false},"_meta":meta}});
        let headers = [
            ("mcp-protocol-version", crate::modern::V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "noisy"),
        ];
        let reply = gw.post_raw(None, body.to_string(), &headers).await;
        let m = reply.messages();
        let logs = find(&m, "notifications/message");
        if redacted {
            assert_eq!(logs.len(), 1, "{}", reply.text);
            assert_eq!(logs[0]["params"]["data"]["note"], format!("key {REDACTED}"));
        } else {
            assert!(logs.is_empty(), "{}", reply.text);
        }
        assert_eq!(texts(&answer(&m)["result"]), ["done"], "{}", reply.text);
        assert!(!reply.text.contains(AWS), "{}", reply.text);
    }
}

/// A guardrail that covers only other tools still checks `tasks/get` and `tasks/list`
/// (which name no tool: every rule applies): a task's `statusMessage` is redacted or the
/// answer refused.
#[tokio::test]
async fn a_tasks_status_message_is_checked() {
    for action in ["redact", "reject"] {
        let dir = Dir::new(&format!("channels-tasks-{action}"));
        let rules = format!(
            "guardrails:\n  - name: secrets\n    tools: [other_*]\n    on: [response]\n    check: {{secrets: builtin, action: {action}}}\n"
        );
        let file = dir.write("guards.yaml", &rules);
        let taskrec = script("taskrec.py");
        let gw =
            TestGateway::start_with(&["--guardrails", &file], &["python3", &taskrec, AWS]).await;
        let s = gw.session().await;
        let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "name": format!("work_{AWS}"), "arguments": {}, "task": {"ttl": 60000}}});
        let created = gw.post(Some(&s), &create).await.json();
        let task = created["result"]["task"]["taskId"].as_str();
        let task = task.unwrap_or_else(|| panic!("{created}")).to_owned();
        let get = json!({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId": task}});
        let list = json!({"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}});
        for (req, at) in [
            (get, "/result/statusMessage"),
            (list, "/result/tasks/0/statusMessage"),
        ] {
            let reply = gw.post(Some(&s), &req).await;
            let v = reply.json();
            assert!(!reply.text.contains(AWS), "{}", reply.text);
            if action == "redact" {
                assert_eq!(v.pointer(at), Some(&json!(REDACTED)), "{v}");
            } else {
                assert_eq!(v["error"]["code"], -32603, "{v}");
                assert_eq!(v["error"]["message"], "Refused by guardrail \"secrets\"");
            }
        }
    }
}

#[tokio::test]
async fn a_completion_is_checked() {
    for (rules, redacted) in [(REDACTING, true), (REJECTING, false)] {
        let dir = Dir::new(&format!("channels-completion-{redacted}"));
        let file = dir.write("guards.yaml", rules);
        let leaky = script("leaky.py");
        let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &leaky]).await;
        let s = gw.session().await;
        let req = json!({"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{
            "ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": ""}}});
        let reply = gw.post(Some(&s), &req).await;
        let v = reply.json();
        assert!(!reply.text.contains(AWS), "{}", reply.text);
        if redacted {
            assert_eq!(
                v["result"]["completion"]["values"][0],
                format!("key {REDACTED}"),
                "{v}"
            );
        } else {
            assert_eq!(
                v["error"]["message"], "Refused by guardrail \"secrets\"",
                "{v}"
            );
        }
    }
}
