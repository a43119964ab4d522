//! A task's result is checked by exactly the guardrails of the tool whose call created it:
//! a rule for other tools leaves it alone, a rule for its tool redacts it.

use serde_json::json;

use super::{Dir, AWS};
use crate::common::{tool_text, TestGateway};

/// `tasks/result` of a task `taskrec.py` (whose tool is `work_<key>` and whose result names
/// the key) creates, under a secrets rule for `tools`: the result's text.
async fn task_result(tools: &str) -> String {
    let dir = Dir::new(&format!("tasks-{}", tools.replace('*', "")));
    let rules = format!(
        "guardrails:\n  - name: secrets\n    tools: [\"{tools}\"]\n    on: [response]\n    check: {{secrets: builtin, action: redact}}\n"
    );
    let file = dir.write("guards.yaml", &rules);
    let taskrec = format!(
        "{}/tests/integration/backends/taskrec.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let gw = TestGateway::start_with(&["--guardrails", &file], &["python3", &taskrec, AWS]).await;
    let s = gw.session().await;
    let create = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "name": format!("work_{AWS}"), "arguments": {}, "task": {"ttl": 60000}}});
    let created = gw.post(Some(&s), &create).await.json();
    let task = created["result"]["task"]["taskId"].as_str();
    let task = task.unwrap_or_else(|| panic!("{created}")).to_owned();
    let get = json!({"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId": task}});
    let v = gw.post(Some(&s), &get).await.json();
    tool_text(&v).to_owned()
}

#[tokio::test]
async fn a_rule_for_other_tools_leaves_a_tasks_result_alone() {
    let text = task_result("other_*").await;
    assert!(text.ends_with(&format!(" at {AWS}")), "{text}");
}

#[tokio::test]
async fn a_rule_for_the_tasks_tool_redacts_its_result() {
    let text = task_result("work_*").await;
    assert!(text.ends_with(" at [REDACTED:aws_access_key]"), "{text}");
}
