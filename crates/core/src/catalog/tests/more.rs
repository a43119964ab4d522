//! Unit tests of paging, cursors, resources and templates, capabilities, instructions and
//! parameter rewriting.

use std::collections::BTreeSet;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use proptest::prelude::{prop_assert, proptest};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::merge::{id, run, tools, triples};
use crate::catalog::*;

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Backends a, b, c with 3, 0 and 7 tools.
fn uneven() -> Merged {
    let (a, c) = (names("a", 3), names("c", 7));
    let refs = |v: &[String]| tools(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let input = vec![
        ("a", BackendRules::default(), refs(&a)),
        ("b", BackendRules::default(), Vec::new()),
        ("c", BackendRules::default(), refs(&c)),
    ];
    run(Kind::Tools, &Strategy::default(), &input).unwrap()
}

/// Every page from the first, following `next` to the end.
fn walk(m: &Merged, size: usize) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let p = page(m, cursor.as_deref(), size).unwrap();
        pages.push(p.entries.iter().map(|e| e.exposed.to_string()).collect());
        let items: Value = serde_json::from_str(p.items_json().get()).unwrap();
        assert_eq!(items.as_array().unwrap().len(), p.entries.len());
        match p.next {
            Some(next) => {
                assert!(next.len() <= MAX_CURSOR);
                cursor = Some(next);
            }
            None => return pages,
        }
        assert!(pages.len() <= m.entries().len() + 1, "paging must end");
    }
}

#[test]
fn paging_across_uneven_backends_yields_every_item_exactly_once() {
    let m = uneven();
    let pages = walk(&m, 4);
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
    let flat: Vec<String> = pages.concat();
    let mut expected = names("a", 3);
    expected.extend(names("c", 7));
    assert_eq!(flat, expected, "configured order, each once");
    for size in [1, 3, 9, 10, 11, 1000] {
        assert_eq!(walk(&m, size).concat(), expected, "page size {size}");
    }
    assert_eq!(walk(&m, 0).len(), 10, "a page size of 0 counts as 1");
    let empty = run(Kind::Tools, &Strategy::default(), &[]).unwrap();
    let p = page(&empty, None, 4).unwrap();
    assert!(p.entries.is_empty() && p.next.is_none());
    assert_eq!(p.items_json().get(), "[]");
}

#[test]
fn bad_cursors_are_refused() {
    let m = uneven();
    let next = page(&m, None, 4).unwrap().next.unwrap();
    assert_eq!(page(&m, Some(&next), 4).unwrap().entries.len(), 4);
    for garbage in ["", "!!!", "not a cursor", "AAAA", &next[1..], "ü"] {
        assert_eq!(
            page(&m, Some(garbage), 4).unwrap_err(),
            BadCursor::Malformed,
            "{garbage:?}"
        );
    }
    assert_eq!(
        page(&m, Some(&"A".repeat(257)), 4).unwrap_err(),
        BadCursor::TooLong
    );
    // Another list's cursor: another kind with the same names, and this list after a change.
    let same_names = {
        let a = names("a", 3);
        let c = names("c", 7);
        let input = vec![
            (
                "a",
                BackendRules::default(),
                tools(&a.iter().map(String::as_str).collect::<Vec<_>>()),
            ),
            (
                "c",
                BackendRules::default(),
                tools(&c.iter().map(String::as_str).collect::<Vec<_>>()),
            ),
        ];
        run(Kind::Prompts, &Strategy::default(), &input).unwrap()
    };
    assert_eq!(
        page(&same_names, Some(&next), 4).unwrap_err(),
        BadCursor::OtherList
    );
    let changed = run(
        Kind::Tools,
        &Strategy::default(),
        &[(
            "a",
            BackendRules::default(),
            tools(&["a0", "a1", "a2", "new", "x", "y"]),
        )],
    )
    .unwrap();
    assert_eq!(
        page(&changed, Some(&next), 4).unwrap_err(),
        BadCursor::OtherList
    );
    // The right list, an offset we never issue.
    let mut bytes = URL_SAFE_NO_PAD.decode(&next).unwrap();
    bytes[9..].copy_from_slice(&10u32.to_be_bytes());
    let at_end = URL_SAFE_NO_PAD.encode(&bytes);
    assert_eq!(page(&m, Some(&at_end), 4).unwrap_err(), BadCursor::PastEnd);
    bytes[9..].copy_from_slice(&u32::MAX.to_be_bytes());
    let far = URL_SAFE_NO_PAD.encode(&bytes);
    assert_eq!(page(&m, Some(&far), 4).unwrap_err(), BadCursor::PastEnd);
    bytes[9..].copy_from_slice(&9u32.to_be_bytes());
    let last = URL_SAFE_NO_PAD.encode(&bytes);
    let p = page(&m, Some(&last), 4).unwrap();
    assert_eq!(p.entries.len(), 1);
    assert!(p.next.is_none());
    bytes[0] = 2;
    let other_version = URL_SAFE_NO_PAD.encode(&bytes);
    assert_eq!(
        page(&m, Some(&other_version), 4).unwrap_err(),
        BadCursor::Malformed
    );
}

proptest! {
    #[test]
    fn paging_never_panics(cursor in "\\PC{0,300}", size in 0usize..20) {
        let m = uneven();
        if let Ok(p) = page(&m, Some(&cursor), size) {
            prop_assert!(p.entries.len() <= size.max(1));
        }
    }

    #[test]
    fn decoded_garbage_never_panics(bytes in proptest::collection::vec(0u8..=255, 0..40)) {
        let m = uneven();
        let cursor = URL_SAFE_NO_PAD.encode(&bytes);
        let _ = page(&m, Some(&cursor), 4);
    }
}

fn resources(uris: &[&str]) -> Vec<Value> {
    uris.iter()
        .map(|u| json!({"uri": u, "name": format!("n {u}"), "mimeType": "text/plain"}))
        .collect()
}

fn templates(list: &[&str]) -> Vec<Value> {
    list.iter()
        .map(|t| json!({"uriTemplate": t, "name": t}))
        .collect()
}

#[test]
fn resources_keep_their_uris_and_duplicates_go_to_the_first_backend() {
    let input = vec![
        (
            "a",
            BackendRules::default(),
            resources(&["ui://widget/1", "file:///a.txt"]),
        ),
        (
            "b",
            BackendRules::default(),
            resources(&["ui://widget/1", "my+scheme://x/y?z=1"]),
        ),
    ];
    let m = run(Kind::Resources, &strategy_prefix(), &input).unwrap();
    assert_eq!(
        triples(&m)
            .into_iter()
            .map(|(b, _, e)| (b, e))
            .collect::<Vec<_>>(),
        [
            ("a".to_owned(), "ui://widget/1".to_owned()),
            ("a".to_owned(), "file:///a.txt".to_owned()),
            ("b".to_owned(), "my+scheme://x/y?z=1".to_owned()),
        ],
        "never renamed, even under `prefix`"
    );
    assert_eq!(m.renamed().count(), 0);
    assert_eq!(
        m.warnings(),
        ["resource URI `ui://widget/1` duplicated by `b`; `a` serves it"]
    );
    assert_eq!(m.route_uri("ui://widget/1"), Some(&id("a")));
    assert_eq!(m.route_uri("my+scheme://x/y?z=1"), Some(&id("b")));
    assert_eq!(m.route_uri("ui://widget/2"), None);
    let item: Value = serde_json::from_str(m.entries()[2].item.get()).unwrap();
    assert_eq!(item["uri"], "my+scheme://x/y?z=1");
}

fn strategy_prefix() -> Strategy {
    Strategy {
        conflict: Conflict::Prefix,
        ..Strategy::default()
    }
}

#[test]
fn uris_route_to_the_exact_resource_then_the_first_matching_template() {
    let res = vec![
        ("a", BackendRules::default(), Vec::new()),
        (
            "b",
            BackendRules::default(),
            resources(&["file:///logs/today"]),
        ),
    ];
    let tpl = vec![
        (
            "a",
            BackendRules::default(),
            templates(&["file:///logs/{name}", "db://{table}/{id}"]),
        ),
        (
            "b",
            BackendRules::default(),
            templates(&["file:///{+path}", "db://{table}/{id}"]),
        ),
    ];
    let res = run(Kind::Resources, &Strategy::default(), &res).unwrap();
    let tpl = run(Kind::ResourceTemplates, &Strategy::default(), &tpl).unwrap();
    assert_eq!(tpl.entries().len(), 3, "the duplicate template is dropped");
    assert_eq!(tpl.warnings().len(), 1);
    assert_eq!(
        route_uri(&res, &tpl, "file:///logs/today"),
        Some(&id("b")),
        "exact first"
    );
    assert_eq!(
        route_uri(&res, &tpl, "file:///logs/yesterday"),
        Some(&id("a"))
    );
    assert_eq!(
        route_uri(&res, &tpl, "file:///logs/2026/01"),
        Some(&id("b")),
        "{{+path}}"
    );
    assert_eq!(route_uri(&res, &tpl, "db://users/7"), Some(&id("a")));
    assert_eq!(route_uri(&res, &tpl, "http://elsewhere/"), None);
    assert_eq!(
        tpl.lookup("db://{table}/{id}"),
        Some((&id("a"), "db://{table}/{id}"))
    );
    let tools_list = uneven();
    assert_eq!(tools_list.route_uri("a0"), None, "tools are not URIs");
}

#[test]
fn capabilities_merge_by_family_and_flag() {
    let a = json!({"tools": {"listChanged": true}, "logging": {}, "experimental": {"x": {}}});
    let b =
        json!({"tools": {}, "resources": {"subscribe": true}, "prompts": {"listChanged": false}});
    let c = json!({"completions": {}, "resources": {"listChanged": true}, "tasks": {"list": {}}});
    let merged = merge_capabilities(&[(id("a"), &a), (id("b"), &b), (id("c"), &c)]);
    assert_eq!(
        merged,
        json!({
            "tools": {"listChanged": true},
            "prompts": {},
            "resources": {"subscribe": true, "listChanged": true},
            "logging": {},
            "completions": {},
        })
    );
    let only_b = merge_capabilities(&[(id("b"), &b)]);
    assert!(only_b.get("logging").is_none() && only_b.get("completions").is_none());
    assert_eq!(merge_capabilities(&[]), json!({}));
    let odd = json!({"tools": true, "prompts": {"listChanged": "yes"}});
    assert_eq!(
        merge_capabilities(&[(id("a"), &odd)]),
        json!({"prompts": {}})
    );
}

#[test]
fn instructions_name_each_backend() {
    assert_eq!(
        merge_instructions(&[(id("a"), None), (id("b"), Some("  "))]),
        None
    );
    let text = merge_instructions(&[
        (id("a"), Some("Use search first.")),
        (id("b"), None),
        (id("c"), Some("Dates are UTC.")),
    ])
    .unwrap();
    let a = text.find("## Backend `a`\nUse search first.").unwrap();
    let c = text.find("## Backend `c`\nDates are UTC.").unwrap();
    assert!(a < c && !text.contains("`b`"), "{text}");
    let long = "é".repeat(MAX_INSTRUCTIONS);
    let text = merge_instructions(&[(id("a"), Some(&long))]).unwrap();
    assert!(text.len() < MAX_INSTRUCTIONS + 400 && text.ends_with("… (truncated)"));
}

#[test]
fn rename_param_replaces_only_the_top_level_name() {
    let params = RawValue::from_string(
        r#"{"name":"gh_search","arguments":{"name":"keep","n":123456789012345678901234567890},"_meta":{"progressToken":1}}"#
            .to_owned(),
    )
    .unwrap();
    let out = rename_param(&params, "name", "search").unwrap();
    assert_eq!(
        out.get(),
        r#"{"name":"search","arguments":{"name":"keep","n":123456789012345678901234567890},"_meta":{"progressToken":1}}"#
    );
    let quoted = rename_param(&params, "name", "a\"b").unwrap();
    assert!(quoted.get().starts_with(r#"{"name":"a\"b","#));
    let not_object = RawValue::from_string("[1]".to_owned()).unwrap();
    assert!(rename_param(&not_object, "name", "x").is_none());
}

#[test]
fn kinds_name_their_method_and_keys() {
    let got: BTreeSet<_> = [
        Kind::Tools,
        Kind::Prompts,
        Kind::Resources,
        Kind::ResourceTemplates,
    ]
    .into_iter()
    .map(|k| (k.list_method(), k.result_key(), k.item_key(), k.renamable()))
    .collect();
    assert!(got.contains(&("tools/list", "tools", "name", true)));
    assert!(got.contains(&("prompts/list", "prompts", "name", true)));
    assert!(got.contains(&("resources/list", "resources", "uri", false)));
    assert!(got.contains(&(
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
        false
    )));
}

#[test]
fn a_narrowed_view_keeps_names_and_has_its_own_cursors() {
    let m = uneven();
    let view = m.filtered(|e| e.backend.as_str() == "c" && &*e.original != "c3");
    assert_eq!(view.entries().len(), 6);
    assert_eq!(view.lookup("c0"), Some((&id("c"), "c0")));
    assert_eq!(
        view.lookup("a0"),
        None,
        "a narrowed-away entry routes nowhere"
    );
    assert_eq!(view.lookup("c3"), None);
    let full_cursor = page(&m, None, 4).unwrap().next.unwrap();
    assert_eq!(
        page(&view, Some(&full_cursor), 4).unwrap_err(),
        BadCursor::OtherList
    );
    assert_eq!(
        walk(&view, 4).concat(),
        ["c0", "c1", "c2", "c4", "c5", "c6"]
    );
    let res = run(
        Kind::ResourceTemplates,
        &Strategy::default(),
        &[(
            "a",
            BackendRules::default(),
            templates(&["x://{id}", "y://{id}"]),
        )],
    )
    .unwrap();
    let only_y = res.filtered(|e| e.exposed.starts_with('y'));
    assert_eq!(only_y.route_uri("y://1"), Some(&id("a")));
    assert_eq!(
        only_y.route_uri("x://1"),
        None,
        "templates are narrowed too"
    );
}

#[test]
fn rename_param_at_reaches_a_completion_ref() {
    let params = RawValue::from_string(
        r#"{"ref":{"type":"ref/prompt","name":"a_greet"},"argument":{"name":"who","value":"x"}}"#
            .to_owned(),
    )
    .unwrap();
    let out = rename_param_at(&params, &["ref", "name"], "greet").unwrap();
    assert_eq!(
        out.get(),
        r#"{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"who","value":"x"}}"#
    );
    assert!(rename_param_at(&params, &[], "x").is_none());
    assert!(rename_param_at(&params, &["missing", "name"], "x").is_none());
    let bad_ref = RawValue::from_string(r#"{"ref":"nope"}"#.to_owned()).unwrap();
    assert!(rename_param_at(&bad_ref, &["ref", "name"], "x").is_none());
}
