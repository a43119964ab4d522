use std::sync::Arc;

use super::{Guardrails, Target};

fn rules(specs: serde_json::Value) -> Vec<Arc<switchboard_guard::Rule>> {
    let specs: Vec<switchboard_guard::RuleSpec> = serde_json::from_value(specs).unwrap();
    switchboard_guard::compile(&specs).unwrap()
}

/// A request whose backend is unknown (a task's result) gets every rule: a backend's
/// own and one limited to some tools too, not only the gateway's.
#[test]
fn an_unresolved_target_gets_every_rule() {
    let check = serde_json::json!({"secrets": "builtin", "action": "reject"});
    let mut guards = Guardrails::new(rules(serde_json::json!([
        {"name": "gw", "on": ["response"], "check": check, "tools": ["github_*"]}
    ])));
    guards.set_backend(
        "b",
        rules(serde_json::json!([{"name": "own", "on": ["response"], "check": check}])),
    );
    let target = |backend| Target {
        backend,
        original: None,
        exposed: None,
        method: "tasks/result",
    };
    assert!(guards.scope(target("other")).is_none());
    let scope = guards.scope(target("")).expect("every rule applies");
    let names: Vec<&str> = scope.rules.rules().iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["gw", "own"]);
}

/// A rule naming a tool covers it by the backend's own name too: another backend's
/// colliding tool renames it (`files_read_file`), and the rule went on covering nothing
/// (review MEDIUM: a third-party backend could switch a guardrail off so).
#[test]
fn a_renamed_tool_is_covered_by_its_own_name() {
    let check = serde_json::json!({"secrets": "builtin", "action": "reject"});
    for tools in [["files/read_file"], ["read_*"]] {
        let guards = Guardrails::new(rules(serde_json::json!([
            {"name": "dlp", "check": check, "tools": tools}
        ])));
        let target = |exposed| Target {
            backend: "files",
            original: Some("read_file"),
            exposed: Some(exposed),
            method: "tools/call",
        };
        assert!(guards.scope(target("read_file")).is_some(), "{tools:?}");
        assert!(
            guards.scope(target("files_read_file")).is_some(),
            "{tools:?}"
        );
        let other = Target {
            backend: "files",
            original: Some("write_file"),
            exposed: Some("write_file"),
            method: "tools/call",
        };
        assert!(guards.scope(other).is_none(), "{tools:?}");
    }
}

/// A prompt's override and a tool's of the same name keep their own rules, each for its
/// own request: before, both went into one map by name, so the prompt's replaced the
/// tool's (and a tool's `off` removed a rule from the prompt's `prompts/get`; review LOW).
#[test]
fn a_prompt_and_a_tool_of_one_name_keep_their_own_rules() {
    let check = serde_json::json!({"secrets": "builtin", "action": "reject"});
    let mut guards = Guardrails::new(Vec::new());
    let tool = rules(serde_json::json!([{"name": "pii", "check": check}]));
    let prompt = rules(serde_json::json!([{"name": "injection", "check": check}]));
    guards.set_tool("b", "export", tool);
    guards.set_prompt("b", "export", prompt);
    let names = |method| {
        let target = Target {
            backend: "b",
            original: Some("export"),
            exposed: Some("export"),
            method,
        };
        let scope = guards.scope(target).expect("rules apply");
        let names: Vec<String> = scope
            .rules
            .rules()
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        names
    };
    assert_eq!(names("tools/call"), ["pii"]);
    assert_eq!(names("prompts/get"), ["injection"]);
}

/// A name in an audit line carries no secret the guardrail kept from the client.
#[test]
fn an_audited_name_shows_no_secret() {
    let uri = "s3://bucket/object?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE/20261206";
    let shown = super::audit_name(uri);
    assert!(!shown.contains("AKIAIOSFODNN7EXAMPLE"), "{shown}");
    assert!(shown.contains("[REDACTED:aws_access_key]"), "{shown}");
    assert_eq!(super::audit_name("get_weather"), "get_weather");
}

/// An answer the response rules cannot read (one holding serde_json's RawValue key, which
/// `Message::parse` refuses) is refused by them, not passed unchecked (review HIGH: an
/// OpenAPI answer built in-process held the key, and its email went out unredacted).
#[tokio::test]
async fn an_answer_the_rules_cannot_read_is_refused_not_passed() {
    let check = serde_json::json!({"secrets": "builtin", "action": "redact"});
    let guards = Guardrails::new(rules(serde_json::json!([
        {"name": "dlp", "on": ["response"], "check": check}
    ])));
    let target = Target {
        backend: "api",
        original: Some("get"),
        exposed: Some("get"),
        method: "tools/call",
    };
    let scope = guards.scope(target).expect("the rule applies");
    let body = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"AKIAIOSFODNN7EXAMPLE"}],"m":{"$serde_json::private::RawValue":"1"}}}"#;
    let caller = crate::Principal::anonymous();
    let out = scope
        .response(crate::Answer::ok(body.to_vec()), &caller, "legacy")
        .await;
    let text = String::from_utf8(out.body).unwrap();
    assert!(!text.contains("AKIA"), "{text}");
    assert!(text.contains("\"id\":7") && text.contains("dlp"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"]["isError"], true, "{text}");
}

/// A definition the rules rewrote is read back as written: one holding serde_json's RawValue
/// key (no backend list can carry it today; `Message::parse` refuses it) kept the original,
/// secret and all, when the rewrite did not read back (review LOW).
#[test]
fn a_rewritten_definition_is_never_replaced_by_the_original() {
    let check = serde_json::json!({"secrets": "builtin", "action": "redact"});
    let guards = Guardrails::new(rules(serde_json::json!([
        {"name": "dlp", "on": ["tool_definitions"], "check": check}
    ])));
    let item = br#"{"name":"t","description":"AKIAIOSFODNN7EXAMPLE","m":{"$serde_json::private::RawValue":"x"}}"#;
    let item = switchboard_wire::plain::parse(item).unwrap();
    let out = guards.definitions("api", crate::catalog::Kind::Tools, vec![item]);
    let text = serde_json::to_string(&out).unwrap();
    assert!(!text.contains("AKIA"), "{text}");
    assert_eq!(out.len(), 1, "{text}");
    assert_eq!(out[0]["name"], "t", "{text}");
}
