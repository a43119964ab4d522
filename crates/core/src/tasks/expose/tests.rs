use super::*;
use serde_json::{json, Value};

#[test]
fn task_ids_are_swapped_where_they_sit_and_nowhere_else() {
    let legacy = r#"{"task":{"taskId":"t-1","status":"working"},"n":123456789012345678901}"#;
    let out = renamed(legacy, "t-1", "sbt-x").unwrap();
    assert!(out.contains(r#""n":123456789012345678901"#), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["task"]["taskId"], "sbt-x");
    let modern = json!({"resultType":"task","taskId":"t-1","note":"t-1"}).to_string();
    let v: Value = serde_json::from_str(&renamed(&modern, "t-1", "h").unwrap()).unwrap();
    assert_eq!(
        (v["taskId"].as_str(), v["note"].as_str()),
        (Some("h"), Some("t-1"))
    );
    let related = json!({"content":[],"_meta":{META_RELATED_TASK:{"taskId":"t-1"}}});
    let out = renamed(&related.to_string(), "t-1", "h").unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["_meta"][META_RELATED_TASK]["taskId"], "h");
    assert_eq!(renamed(r#"{"taskId":"other"}"#, "t-1", "h"), None);
    assert_eq!(renamed("[1]", "t-1", "h"), None);
}

/// A loose parser (Go's, Java's) reads a key in another case or spelling as the key: the
/// backend's id is swapped there too, so no client reads it under a spelling it takes for
/// a task id.
#[test]
fn task_ids_are_swapped_under_every_spelling_of_their_place() {
    for (object, place) in [
        (
            json!({"_meta": {META_RELATED_TASK: {"TaskId": "t-1"}}}),
            vec!["_meta", META_RELATED_TASK, "TaskId"],
        ),
        (
            json!({"_Meta": {META_RELATED_TASK: {"taskId": "t-1"}}}),
            vec!["_Meta", META_RELATED_TASK, "taskId"],
        ),
        (
            json!({"_meta": {"IO.modelcontextprotocol/related-task": {"taskId": "t-1"}}}),
            vec!["_meta", "IO.modelcontextprotocol/related-task", "taskId"],
        ),
        (
            json!({"task": {"task\u{131}d": "t-1"}}),
            vec!["task", "task\u{131}d"],
        ),
        (json!({"TASKID": "t-1"}), vec!["TASKID"]),
    ] {
        let out = renamed(&object.to_string(), "t-1", "h").expect("renamed");
        let v: Value = serde_json::from_str(&out).unwrap();
        let at = place.iter().fold(&v, |v, k| &v[*k]);
        assert_eq!(at, "h", "{object}");
    }
    let other = json!({"_meta": {META_RELATED_TASK: {"TaskId": "other"}}});
    assert_eq!(renamed(&other.to_string(), "t-1", "h"), None);
}

/// A task's state naming some other id of the backend's where a parser may read it is
/// refused; one naming the handle once passes, as does any `tasks/result`.
#[test]
fn a_tasks_state_names_one_task_or_is_refused() {
    let answer = |result: &str| Answer {
        body: format!(r#"{{"jsonrpc":"2.0","id":3,"result":{result}}}"#).into_bytes(),
        error_code: None,
    };
    for loose in [
        r#"{"taskId":"h","TaskId":"t2","status":"working"}"#,
        r#"{"taskId":"t2","taskId":"h","status":"working"}"#,
        r#"{"taskId\u0000":"t2","taskId":"h","status":"working"}"#,
        r#"{"taskId":"t2","status":"working"}"#,
        r#"{"taskId":"h","task":{"taskId":"t2"}}"#,
        r#"{"taskId":"h","_META":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}"#,
        r#"{"taskId":"h","result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}}}}"#,
        r#"{"taskId":"h","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2","taskId":"h"}}}"#,
        r#"{"taskId":"h","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t2"}},"_meta":{}}"#,
    ] {
        let out = one_task_named("tasks/get", "h", answer(loose));
        assert!(out.error_code.is_some(), "{loose}");
        assert!(String::from_utf8_lossy(&out.body).contains(r#""id":3"#));
    }
    let fine = r#"{"taskId":"h","status":"working"}"#;
    let inlined = r#"{"taskId":"h","status":"completed","result":{"content":[],
        "_meta":{"io.modelcontextprotocol/related-task":{"taskId":"h"}}}}"#;
    assert!(one_task_named("tasks/get", "h", answer(inlined))
        .error_code
        .is_none());
    assert!(one_task_named("tasks/cancel", "h", answer(fine))
        .error_code
        .is_none());
    let result = r#"{"content":[],"TaskId":"t2"}"#;
    assert!(one_task_named("tasks/result", "h", answer(result))
        .error_code
        .is_none());
}

/// An answer that created a task and names another of the backend's (in the related-task
/// tag, under a loose spelling, or behind a repeated key) is refused before a handle is
/// recorded: that second id would reach the client as it is.
#[test]
fn a_created_task_is_the_only_one_its_answer_names() {
    let answer = |result: &str| Answer {
        body: format!(r#"{{"jsonrpc":"2.0","id":4,"result":{result}}}"#).into_bytes(),
        error_code: None,
    };
    let ask = TaskAsk {
        asked: true,
        owner: None,
    };
    for other in [
        r#"{"task":{"taskId":"t-1"},"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-2"}}}"#,
        r#"{"resultType":"task","taskId":"t-1","_meta":{"io.modelcontextprotocol/related-task":{"TASKID":"t-2"}}}"#,
        r#"{"task":{"taskId":"t-1"},"_Meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-2"}}}"#,
        r#"{"task":{"taskId":"t-1"},"content":[{"a":1,"a":2}]}"#,
    ] {
        let mut recorded = false;
        let out = finished(Holder::Shared, ("tools/call", &ask), answer(other), |_| {
            recorded = true;
            Some("h".into())
        });
        assert!(out.error_code.is_some(), "{other}");
        assert!(!recorded, "{other}");
    }
    let alone = r#"{"task":{"taskId":"t-1","status":"working"},
        "_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-1"}}}"#;
    let out = finished(Holder::Shared, ("tools/call", &ask), answer(alone), |_| {
        Some("h".into())
    });
    assert!(out.error_code.is_none());
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(v["result"]["task"]["taskId"], "h");
    assert_eq!(v["result"]["_meta"][META_RELATED_TASK]["taskId"], "h");
}

/// A message passed on as it is (a listen's notification, a progress note) names a task
/// under any spelling a parser reads (where `task_of`, reading exact keys, saw none), and
/// a progress note is rid of it, every other member kept.
#[test]
fn task_ids_in_passed_on_messages_are_found_in_any_spelling_and_taken_out() {
    let raw = |v: &str| RawValue::from_string(v.to_owned()).unwrap();
    let tag = r#"{"io.modelcontextprotocol/related-task":{"taskId":"t-9"}}"#;
    for named in [
        r#"{"TaskId":"t-9","uri":"u"}"#.to_owned(),
        format!(r#"{{"_META":{tag},"progress":1}}"#),
        r#"{"_meta":{"io.modelcontextprotocol/Related-Task":{"taskId":"t-9"}}}"#.to_owned(),
        r#"{"task":{"TASKID":"t-9"}}"#.to_owned(),
    ] {
        assert!(
            super::super::task_of(Some(&raw(&named))).is_none(),
            "{named}"
        );
        assert!(names_a_task(&raw(&named)), "{named}");
    }
    let none = r#"{"uri":"u","text":"a task named t-9"}"#;
    assert!(!names_a_task(&raw(none)));
    assert!(matches!(untagged(&raw(none)), Untagged::Untouched));
    for (note, kept) in [
        (
            r#"{"progressToken":"p","progress":1,"_meta":{"a":1,"io.modelcontextprotocol/related-task":{"taskId":"t-9"}},"TaskId":"t-9"}"#.to_owned(),
            json!({"progressToken":"p","progress":1,"_meta":{"a":1}}),
        ),
        (
            format!(r#"{{"progressToken":"p","_Meta":{tag},"Task":{{"taskId":"t-9"}}}}"#),
            json!({"progressToken":"p"}),
        ),
    ] {
        let Untagged::Stripped(out) = untagged(&raw(&note)) else {
            panic!("{note}");
        };
        let v: Value = serde_json::from_str(out.get()).unwrap();
        assert_eq!(v, kept, "{note}");
    }
    // Every copy of a repeated key is stripped, or the note is not passed on; keys
    // repeated elsewhere (a payload's own) change nothing.
    let twice = r#"{"progress":1,"_meta":{"a":1,"a":2},"taskId":"t-9","taskId":"t-8"}"#;
    let Untagged::Stripped(out) = untagged(&raw(twice)) else {
        panic!("{twice}");
    };
    assert!(!out.get().contains("t-"), "{}", out.get());
    let meta_twice = format!(r#"{{"progress":1,"_meta":{tag},"_meta":{{}}}}"#);
    let Untagged::Stripped(out) = untagged(&raw(&meta_twice)) else {
        panic!("{meta_twice}");
    };
    assert_eq!(out.get(), r#"{"progress":1,"_meta":{}}"#);
    // A place a note does not have, still named after stripping: not passed on.
    let inlined = format!(r#"{{"progress":1,"Result":{{"_meta":{tag}}}}}"#);
    assert!(names_a_task(&raw(&inlined)));
    assert!(matches!(untagged(&raw(&inlined)), Untagged::Unreadable));
    // A level whose keys cannot be read (a lone surrogate: a backend's JSON may hold one,
    // and clients' parsers read past it) may name anything: the member holding it is taken
    // out whole, or the note is not passed on.
    for (hidden, kept) in [
        (
            r#"{"progressToken":"p","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-9","\udc00":1}}}"#,
            Some(r#"{"progressToken":"p","_meta":{}}"#),
        ),
        (
            r#"{"progressToken":"p","task":{"taskId":"t-9","\ud800":0}}"#,
            Some(r#"{"progressToken":"p"}"#),
        ),
        (
            r#"{"progressToken":"p","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t-9"}},"\ud800":0}"#,
            None,
        ),
    ] {
        assert!(names_a_task(&raw(hidden)), "{hidden}");
        match (untagged(&raw(hidden)), kept) {
            (Untagged::Stripped(out), Some(kept)) => assert_eq!(out.get(), kept),
            (Untagged::Unreadable, None) => {}
            _ => panic!("{hidden}"),
        }
    }
    // A listen's notification with a payload repeating keys of its own names no task.
    let own = r#"{"uri":"u","data":{"Content-Type":1,"content-type":2,"task":"x"}}"#;
    assert!(!names_a_task(&raw(own)));
}

#[test]
fn escaped_ids_are_compared_decoded() {
    let escaped = r#"{"task":{"taskId":"t\u002d1","status":"working"}}"#;
    let v: Value = serde_json::from_str(&renamed(escaped, "t-1", "h").unwrap()).unwrap();
    assert_eq!(v["task"]["taskId"], "h");
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{"taskId":"a\"b"}}"#;
    let out = String::from_utf8(renamed_answer(body, "a\"b", "h").unwrap()).unwrap();
    assert!(out.contains(r#""taskId":"h""#), "{out}");
}

#[test]
fn task_support_is_stripped_from_every_tool_and_nothing_else() {
    let body = br#"{"jsonrpc":"2.0","id":18446744073709551617,"result":{"tools":[
        {"name":"a","execution":{"taskSupport":"optional","x":1},"n":123456789012345678901},
        {"name":"b","execution":{"TaskSupport":"required"},"execution":{"taskSupport":"required"}},
        {"name":"c"}],"nextCursor":"k"}}"#;
    let out = String::from_utf8(without_task_support(body).unwrap()).unwrap();
    assert!(!out.to_ascii_lowercase().contains("tasksupport"), "{out}");
    assert!(out.contains("18446744073709551617"), "{out}");
    assert!(out.contains("123456789012345678901"), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let tools = v["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3, "{out}");
    assert_eq!(tools[0]["execution"], json!({"x": 1}), "{out}");
    assert_eq!(v["result"]["nextCursor"], "k", "{out}");
    let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#;
    assert_eq!(without_task_support(error), None);
    let mut parsed = vec![json!({"name":"a","execution":{"taskSupport":"optional","x":1}})];
    strip_task_support(&mut parsed);
    assert_eq!(parsed[0]["execution"], json!({"x": 1}));
}

#[test]
fn answers_keep_their_id() {
    let body = br#"{"jsonrpc":"2.0","id":18446744073709551617,"result":{"taskId":"t"}}"#;
    let out = renamed_answer(body, "t", "h").unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("18446744073709551617"), "{text}");
    assert!(text.contains(r#""taskId":"h""#), "{text}");
    let created = br#"{"jsonrpc":"2.0","id":"q","result":{"task":{"taskId":"t9"}}}"#;
    assert_eq!(created_in(created), Created::Task("t9".to_owned()));
    assert_eq!(
        created_in(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        Created::Nothing
    );
}

/// A task named in a way parsers may read differently is ambiguous, whatever the
/// spelling gives away: another case, twice, both shapes, a folding character.
#[test]
fn a_task_named_ambiguously_is_found_as_such() {
    for body in [
        br#"{"jsonrpc":"2.0","id":1,"result":{"task":{"TaskID":"b-7"}}}"#.as_slice(),
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","TASKID":"b"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"A","task":{"taskId":"B"}}}"#,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"task\",\"ta\u{17f}kId\":\"b\"}}".as_bytes(),
        // U+212A (Kelvin sign) folds to `k`: no ASCII `k` in the answer at all.
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"TAS\u{212a}\":{\"TAS\u{212a}ID\":\"b\"}}}".as_bytes(),
    ] {
        let text = String::from_utf8_lossy(body);
        assert_eq!(created_in(body), Created::Ambiguous, "{text}");
    }
}

/// A task id under a key spelled with escapes is still a created task (a client's parser
/// reads `taskId`), so it is renamed or refused, never passed on as the backend's own.
#[test]
fn an_escaped_task_id_key_is_found() {
    let flat = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","task\u0049d":"t7"}}"#;
    assert_eq!(created_in(flat), Created::Task("t7".to_owned()));
    let nested = br#"{"jsonrpc":"2.0","id":1,"result":{"task":{"\u0074askId":"t8"}}}"#;
    assert_eq!(created_in(nested), Created::Task("t8".to_owned()));
}
