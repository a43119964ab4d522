//! Plan validation, templates and the annotation floor.

use serde_json::{json, Map, Value};

use super::annotations::{derive, floor, Hints, StepTool};
use super::model::CompositeSpec;
use super::plan::{compile_all, Body};
use super::template;

fn spec(steps: Value) -> CompositeSpec {
    serde_json::from_value(json!({ "name": "wf", "steps": steps })).unwrap()
}

fn error_of(steps: Value) -> String {
    compile_all(&[spec(steps)]).unwrap_err().to_string()
}

#[test]
fn unknown_dependency_is_refused_with_its_path() {
    let e = error_of(json!([
        {"id": "a", "type": "tool", "tool": "echo"},
        {"id": "b", "type": "tool", "tool": "echo", "dependsOn": ["a", "nope"]},
    ]));
    assert_eq!(
        e,
        "compositeTools[0].steps[1].dependsOn[1]: no step is named `nope`"
    );
}

#[test]
fn a_cycle_is_refused_naming_a_step_on_it() {
    let e = error_of(json!([
        {"id": "root", "type": "tool", "tool": "echo"},
        {"id": "a", "type": "tool", "tool": "echo", "dependsOn": ["root", "c"]},
        {"id": "b", "type": "tool", "tool": "echo", "dependsOn": ["a"]},
        {"id": "c", "type": "tool", "tool": "echo", "dependsOn": ["b"]},
        {"id": "after", "type": "tool", "tool": "echo", "dependsOn": ["c"]},
    ]));
    assert_eq!(
        e,
        "compositeTools[0].steps[1].dependsOn: step `a` is on a dependency cycle"
    );
    let e = error_of(json!([{"id": "a", "type": "tool", "tool": "echo", "dependsOn": ["a"]}]));
    assert!(e.ends_with("a step cannot depend on itself"), "{e}");
}

#[test]
fn duplicate_ids_bad_templates_and_bounds_are_refused() {
    let e = error_of(json!([
        {"id": "a", "type": "tool", "tool": "echo"},
        {"id": "a", "type": "tool", "tool": "echo"},
    ]));
    assert!(
        e.starts_with("compositeTools[0].steps[1].id: `a` is also steps[0]"),
        "{e}"
    );
    let e = error_of(json!([{"id": "a", "type": "tool", "tool": "echo",
        "arguments": {"text": "{{ params.x + }}"}}]));
    assert!(
        e.starts_with("compositeTools[0].steps[0].arguments: "),
        "{e}"
    );
    let e = error_of(json!([{"id": "a", "type": "tool", "tool": "echo", "condition": "{% if %}"}]));
    assert!(
        e.starts_with("compositeTools[0].steps[0].condition: "),
        "{e}"
    );
    let e = error_of(json!([{"id": "a", "type": "tool", "tool": "echo",
        "onError": {"action": "retry", "maxRetries": 11}}]));
    assert!(
        e.starts_with("compositeTools[0].steps[0].onError.maxRetries"),
        "{e}"
    );
    let e = error_of(json!([{"id": "a", "type": "elicitation"}]));
    assert!(e.starts_with("compositeTools[0].steps[0].message"), "{e}");
    let two = [
        spec(json!([{"id": "a", "type": "tool", "tool": "x"}])),
        spec(json!([{"id": "a", "type": "tool", "tool": "x"}])),
    ];
    let e = compile_all(&two).unwrap_err().to_string();
    assert!(e.starts_with("compositeTools[1].name"), "{e}");
}

#[test]
fn a_step_calling_a_composite_or_an_own_tool_is_refused_with_its_path() {
    let e = error_of(json!([{"id": "a", "type": "tool", "tool": "wf"}]));
    assert!(
        e.starts_with("compositeTools[0].steps[0].tool: `wf` is a composite"),
        "{e}"
    );
    let two = [
        spec(json!([{"id": "a", "type": "tool", "tool": "x"}])),
        serde_json::from_value(json!({ "name": "other", "steps": [
            {"id": "a", "type": "tool", "tool": "x"},
            {"id": "b", "type": "forEach", "items": "{{ [1] }}",
             "step": {"id": "in", "type": "tool", "tool": "wf"}},
        ]}))
        .unwrap(),
    ];
    let e = compile_all(&two).unwrap_err().to_string();
    assert!(
        e.starts_with("compositeTools[1].steps[1].step.tool: `wf` is a composite"),
        "{e}"
    );
    for own in ["call_tool", "find_tools"] {
        let e = error_of(json!([{"id": "a", "type": "tool", "tool": own}]));
        assert!(e.starts_with("compositeTools[0].steps[0].tool"), "{e}");
        assert!(e.contains("the gateway's own tool"), "{e}");
    }
}

#[test]
fn a_valid_plan_keeps_its_dependencies_as_indices() {
    let plans = compile_all(&[spec(json!([
        {"id": "a", "type": "tool", "tool": "echo"},
        {"id": "b", "type": "tool", "tool": "backend.echo", "dependsOn": ["a"]},
        {"id": "each", "type": "forEach", "items": "{{ steps.a.output.list }}", "dependsOn": ["a"],
         "step": {"id": "one", "type": "tool", "tool": "echo", "arguments": {"text": "{{ item }}"}}},
    ]))])
    .unwrap();
    let plan = &plans[0];
    assert_eq!(plan.steps[1].deps, vec![0]);
    assert!(matches!(
        plan.steps[2].body,
        Body::ForEach {
            max_iterations: 100,
            ..
        }
    ));
    assert_eq!(
        plan.tools(),
        vec![("a", "echo"), ("b", "backend.echo"), ("each", "echo")]
    );
}

#[test]
fn templates_keep_json_types_and_render_strings() {
    let env = template::environment();
    let ctx = template::context(&json!({
        "params": {"n": 2},
        "steps": {"a": {"output": {"list": [1, 2], "name": "x"}, "status": "completed"}},
    }));
    let args = json!({
        "whole": "{{ steps.a.output }}",
        "text": "n={{ params.n }} name={{ steps.a.output.name }}",
        "literal": "plain",
        "n": 5,
    });
    let out = template::eval_value(&env, &args, &ctx).unwrap();
    assert_eq!(out["whole"], json!({"list": [1, 2], "name": "x"}));
    assert_eq!(out["text"], json!("n=2 name=x"));
    assert_eq!(out["literal"], json!("plain"));
    assert!(template::truthy(&env, "steps.a.status == 'completed'", &ctx).unwrap());
    assert!(template::eval_value(&env, &json!("{{ steps.missing.output }}"), &ctx).is_err());
    // No loader: a template cannot read anything.
    assert!(template::eval_value(&env, &json!("{% include '/etc/passwd' %}"), &ctx).is_err());
}

fn hints(read_only: Option<bool>, destructive: Option<bool>, open: Option<bool>) -> Hints {
    let mut m = Map::new();
    for (k, v) in [
        ("readOnlyHint", read_only),
        ("destructiveHint", destructive),
        ("openWorldHint", open),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), json!(v));
        }
    }
    Hints::of(Some(&m))
}

#[test]
fn the_floor_is_read_only_only_if_every_step_is() {
    let ro = hints(Some(true), None, Some(false));
    let plain = Hints::of(None);
    let steps = [
        StepTool {
            step: "a",
            tool: "read",
            hints: ro,
        },
        StepTool {
            step: "b",
            tool: "read2",
            hints: ro,
        },
    ];
    assert_eq!(
        floor(&steps),
        Hints {
            read_only: true,
            destructive: false,
            open_world: false
        }
    );
    let steps = [
        StepTool {
            step: "a",
            tool: "read",
            hints: ro,
        },
        StepTool {
            step: "b",
            tool: "write",
            hints: plain,
        },
    ];
    // A tool without annotations takes the spec defaults: not read-only, destructive, open.
    assert_eq!(
        floor(&steps),
        Hints {
            read_only: false,
            destructive: true,
            open_world: true
        }
    );
}

#[test]
fn a_non_destructive_closed_world_writer_keeps_the_floor_safe() {
    let ro = hints(Some(true), None, Some(false));
    let safe_write = hints(Some(false), Some(false), Some(false));
    let steps = [
        StepTool {
            step: "a",
            tool: "read",
            hints: ro,
        },
        StepTool {
            step: "b",
            tool: "w",
            hints: safe_write,
        },
    ];
    assert_eq!(
        floor(&steps),
        Hints {
            read_only: false,
            destructive: false,
            open_world: false
        }
    );
}

#[test]
fn a_safer_claim_than_the_steps_is_refused_naming_the_step() {
    let ro = hints(Some(true), None, Some(false));
    let steps = [
        StepTool {
            step: "a",
            tool: "read",
            hints: ro,
        },
        StepTool {
            step: "b",
            tool: "write",
            hints: Hints::of(None),
        },
    ];
    let claim: Map<String, Value> = serde_json::from_value(json!({"readOnlyHint": true})).unwrap();
    let e = derive("wf", Some(&claim), &steps).unwrap_err();
    assert_eq!(e.step, "b");
    assert_eq!(e.to_string(), "composite tool `wf` claims readOnlyHint: true but its step `b` calls `write`, which is not");
    let claim: Map<String, Value> =
        serde_json::from_value(json!({"openWorldHint": false})).unwrap();
    assert!(derive("wf", Some(&claim), &steps).is_err());
    // A more cautious claim is kept; what it leaves out comes from the floor.
    let claim: Map<String, Value> =
        serde_json::from_value(json!({"title": "T", "destructiveHint": true})).unwrap();
    let listed = derive("wf", Some(&claim), &steps[..1]).unwrap();
    assert_eq!(
        Value::Object(listed),
        json!({"title": "T", "destructiveHint": true, "readOnlyHint": true, "openWorldHint": false})
    );
}

/// A step's output is what the tool wrote, read as any client reads it: serde_json's own
/// `Value` took a text behind `$serde_json::private::RawValue` for JSON to parse again (a
/// fetched page could nest that until the gateway's stack overflowed: review HIGH).
#[test]
fn a_steps_output_is_read_as_written() {
    let text = r#"{"$serde_json::private::RawValue":"{\"a\":1}"}"#;
    let answer = json!({"jsonrpc": "2.0", "id": 1,
        "result": {"content": [{"type": "text", "text": text}]}});
    let out = super::engine::tool_outcome(answer.to_string().as_bytes()).unwrap();
    // Kept as the text it is: read as an object with that key, it would go on in answers
    // that no reader of the gateway's reads as written.
    assert_eq!(out, json!(text));
    // Nested again and again, still one string inside one object.
    let mut deep = String::from("0");
    for _ in 0..12 {
        deep = json!({ "$serde_json::private::RawValue": format!("[{deep}]") }).to_string();
    }
    let answer = json!({"jsonrpc": "2.0", "id": 1,
        "result": {"content": [{"type": "text", "text": deep}]}});
    let out = super::engine::tool_outcome(answer.to_string().as_bytes()).unwrap();
    assert_eq!(out, json!(deep));
    // Text with no such key is still read as JSON.
    let answer = json!({"jsonrpc": "2.0", "id": 1,
        "result": {"content": [{"type": "text", "text": "{\"a\":[1]}"}]}});
    let out = super::engine::tool_outcome(answer.to_string().as_bytes()).unwrap();
    assert_eq!(out, json!({"a": [1]}));
}
