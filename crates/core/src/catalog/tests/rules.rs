//! Unit tests of filters and overrides: allow, deny, globs, default visibility, and what a
//! filtered item leaves behind (nothing).

use serde_json::{json, Value};

use super::merge::{id, run, strategy, t, tools, triples};
use crate::catalog::*;

fn rules(f: impl FnOnce(&mut Filter)) -> BackendRules {
    let mut r = BackendRules::default();
    f(&mut r.tools);
    r
}

fn visible(rules: BackendRules, names: &[&str]) -> Vec<String> {
    let m = run(
        Kind::Tools,
        &Strategy::default(),
        &[("a", rules, tools(names))],
    )
    .unwrap();
    m.entries().iter().map(|e| e.exposed.to_string()).collect()
}

#[test]
fn filters_allow_deny_globs_and_default_visibility() {
    let all = ["git_log", "git_push", "fs_read", "fs_write"];
    assert_eq!(visible(BackendRules::default(), &all), all);
    assert_eq!(
        visible(
            rules(|f| f.allow = vec!["git_*".into(), "fs_read".into()]),
            &all
        ),
        ["git_log", "git_push", "fs_read"],
        "an allow-list alone hides the rest"
    );
    assert_eq!(
        visible(
            rules(|f| f.deny = vec!["*write".into(), "git_push".into()]),
            &all
        ),
        ["git_log", "fs_read", "fs_write"],
        "`*write` is not a suffix glob: only a trailing `*` is, so it matches nothing"
    );
    assert_eq!(
        visible(
            rules(|f| {
                f.allow = vec!["git_*".into()];
                f.deny = vec!["git_push".into()];
            }),
            &all
        ),
        ["git_log"],
        "deny beats allow"
    );
    assert_eq!(
        visible(
            rules(|f| f.default_visibility = Some(Visibility::Deny)),
            &all
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        visible(
            rules(|f| {
                f.allow = vec!["fs_*".into()];
                f.default_visibility = Some(Visibility::Allow);
            }),
            &all
        ),
        all,
        "an explicit allow default keeps unlisted names"
    );
    assert_eq!(
        visible(rules(|f| f.deny = vec!["*".into()]), &all),
        Vec::<String>::new()
    );
}

#[test]
fn a_filtered_tool_is_absent_from_lookup_and_frees_its_name() {
    let hide_x = rules(|f| f.deny = vec!["x".into()]);
    let input = vec![
        ("a", hide_x, tools(&["x", "y"])),
        ("b", BackendRules::default(), tools(&["x"])),
    ];
    let m = run(Kind::Tools, &Strategy::default(), &input).unwrap();
    assert_eq!(triples(&m), vec![t("a", "y", "y"), t("b", "x", "x")]);
    assert_eq!(
        m.lookup("x"),
        Some((&id("b"), "x")),
        "the hidden one does not collide"
    );
    assert_eq!(m.lookup("a_x"), None);
    // Prompts have their own filter: the tool filter does not touch them.
    let input = vec![("a", rules(|f| f.deny = vec!["*".into()]), tools(&["p"]))];
    let m = run(Kind::Prompts, &Strategy::default(), &input).unwrap();
    assert_eq!(m.lookup("p"), Some((&id("a"), "p")));
}

#[test]
fn overrides_of_name_title_description_and_annotations() {
    let mut items = tools(&["search", "other"]);
    items[0]["annotations"] = json!({"readOnlyHint": false, "title": "old", "openWorldHint": true});
    items[0]["outputSchema"] = json!({"type": "object", "n": 12345678901234567u64});
    let r = rules(|f| {
        f.overrides.insert(
            "search".into(),
            Override {
                name: Some("find".into()),
                title: Some("Find things".into()),
                description: Some("Finds.".into()),
                annotations: Some(json!({"readOnlyHint": true, "openWorldHint": null})),
            },
        );
        f.overrides.insert("missing".into(), Override::default());
    });
    let m = run(Kind::Tools, &Strategy::default(), &[("a", r, items)]).unwrap();
    assert_eq!(m.lookup("find"), Some((&id("a"), "search")));
    assert_eq!(m.lookup("search"), None);
    let item: Value = serde_json::from_str(m.entries()[0].item.get()).unwrap();
    assert_eq!(item["name"], "find");
    assert_eq!(item["title"], "Find things");
    assert_eq!(item["description"], "Finds.");
    assert_eq!(
        item["annotations"],
        json!({"readOnlyHint": true, "title": "old"})
    );
    assert_eq!(item["outputSchema"]["n"], 12345678901234567u64);
    assert_eq!(item["inputSchema"], json!({"type": "object"}));
    assert_eq!(
        m.renamed().map(|e| &*e.exposed).collect::<Vec<_>>(),
        ["find"]
    );
    assert_eq!(m.warnings().len(), 1);
    assert!(m.warnings()[0].contains("`missing`"), "{:?}", m.warnings());
    // An override pinning a name keeps it bare even under `prefix`.
    let r = rules(|f| {
        f.overrides.insert(
            "x".into(),
            Override {
                name: Some("x".into()),
                ..Override::default()
            },
        );
    });
    let m = run(
        Kind::Tools,
        &strategy(Conflict::Prefix),
        &[("a", r, tools(&["x", "y"]))],
    )
    .unwrap();
    assert_eq!(triples(&m), vec![t("a", "x", "x"), t("a", "y", "a_y")]);
}
