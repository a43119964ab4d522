//! Unit tests of naming: every conflict strategy, the tool-name rule, filters and overrides,
//! determinism.

use std::collections::BTreeSet;

use proptest::prelude::{any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just};
use serde_json::{json, Value};

use crate::catalog::merge::merge_with;
use crate::catalog::*;

pub(super) fn id(s: &str) -> BackendId {
    s.parse().unwrap()
}

pub(super) fn tools(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"name": n, "description": format!("about {n}"), "inputSchema": {"type": "object"}}))
        .collect()
}

/// Merges `input` (backend name, rules, items) with `strategy`.
pub(super) fn run(
    kind: Kind,
    strategy: &Strategy,
    input: &[(&str, BackendRules, Vec<Value>)],
) -> Result<Merged, MergeError> {
    run_hex(kind, strategy, input, 8)
}

fn run_hex(
    kind: Kind,
    strategy: &Strategy,
    input: &[(&str, BackendRules, Vec<Value>)],
    hex: usize,
) -> Result<Merged, MergeError> {
    let owned: Vec<(BackendId, &BackendRules, &[Value])> = input
        .iter()
        .map(|(name, rules, items)| (id(name), rules, items.as_slice()))
        .collect();
    merge_with(kind, strategy, &owned, hex)
}

/// (backend, original, exposed) per entry, in order.
pub(super) fn triples(m: &Merged) -> Vec<(String, String, String)> {
    m.entries()
        .iter()
        .map(|e| {
            (
                e.backend.to_string(),
                e.original.to_string(),
                e.exposed.to_string(),
            )
        })
        .collect()
}

pub(super) fn t(b: &str, o: &str, e: &str) -> (String, String, String) {
    (b.to_owned(), o.to_owned(), e.to_owned())
}

fn plain(entries: &[(&str, &[&str])]) -> Vec<(&'static str, BackendRules, Vec<Value>)> {
    entries
        .iter()
        .map(|(b, names)| {
            let b: &'static str = Box::leak(b.to_string().into_boxed_str());
            (b, BackendRules::default(), tools(names))
        })
        .collect()
}

pub(super) fn strategy(conflict: Conflict) -> Strategy {
    Strategy {
        conflict,
        ..Strategy::default()
    }
}

fn unresolved(r: Result<Merged, MergeError>) -> Vec<Collision> {
    match r {
        Err(MergeError::Unresolved(c)) => c,
        other => panic!("expected Unresolved, got {other:?}"),
    }
}

#[test]
fn conditional_is_the_default_and_a_single_backend_keeps_bare_names() {
    assert_eq!(Strategy::default().conflict, Conflict::Conditional);
    let m = run(
        Kind::Tools,
        &Strategy::default(),
        &plain(&[("a", &["x", "y"])]),
    )
    .unwrap();
    assert_eq!(triples(&m), vec![t("a", "x", "x"), t("a", "y", "y")]);
    assert_eq!(m.renamed().count(), 0);
    assert!(m.warnings().is_empty());
}

#[test]
fn conditional_prefixes_only_colliding_names_on_every_backend() {
    let input = plain(&[("a", &["x", "only_a"]), ("b", &["x", "only_b"])]);
    let m = run(Kind::Tools, &Strategy::default(), &input).unwrap();
    assert_eq!(
        triples(&m),
        vec![
            t("a", "x", "a_x"),
            t("a", "only_a", "only_a"),
            t("b", "x", "b_x"),
            t("b", "only_b", "only_b"),
        ]
    );
    assert_eq!(m.lookup("b_x"), Some((&id("b"), "x")));
    assert_eq!(
        m.lookup("x"),
        None,
        "the bare colliding name routes nowhere"
    );
    let item: Value = serde_json::from_str(m.entries()[0].item.get()).unwrap();
    assert_eq!(item["name"], "a_x");
    assert_eq!(item["description"], "about x", "other fields intact");
    assert_eq!(m.renamed().count(), 2);
}

#[test]
fn conditional_three_way_prefixes_until_unique() {
    // a:x and b:x collide -> a_x, b_x; a_x now collides with c's own a_x, which is prefixed
    // too, so a `{backend}_` prefix always names the backend it came from.
    let input = plain(&[("a", &["x"]), ("b", &["x"]), ("c", &["a_x"])]);
    let m = run(Kind::Tools, &Strategy::default(), &input).unwrap();
    assert_eq!(
        triples(&m),
        vec![
            t("a", "x", "a_x"),
            t("b", "x", "b_x"),
            t("c", "a_x", "c_a_x")
        ]
    );
    assert_eq!(m.lookup("a_x"), Some((&id("a"), "x")));
    assert_eq!(m.lookup("c_a_x"), Some((&id("c"), "a_x")));
    // A longer chain: c's prefixed name meets a's own `c_a_x`.
    let input = plain(&[("a", &["x", "c_a_x"]), ("b", &["x"]), ("c", &["a_x"])]);
    let m = run(Kind::Tools, &Strategy::default(), &input).unwrap();
    assert_eq!(
        triples(&m),
        vec![
            t("a", "x", "a_x"),
            t("a", "c_a_x", "a_c_a_x"),
            t("b", "x", "b_x"),
            t("c", "a_x", "c_a_x"),
        ]
    );
}

#[test]
fn prefix_renames_every_name_and_settles_post_prefix_clashes_by_backend_order() {
    let input = plain(&[("a", &["x"]), ("b", &["y"])]);
    let m = run(Kind::Tools, &strategy(Conflict::Prefix), &input).unwrap();
    assert_eq!(triples(&m), vec![t("a", "x", "a_x"), t("b", "y", "b_y")]);
    // `a`+`b_x` and `a_b`+`x` both make `a_b_x`: `a` comes first and keeps it.
    let input = plain(&[("a_b", &["x"]), ("a", &["b_x"])]);
    let m = run(Kind::Tools, &strategy(Conflict::Prefix), &input).unwrap();
    let got = triples(&m);
    assert_eq!(got[0].2, "a_b_x", "a_b is first in configured order");
    assert!(
        got[1].2.starts_with("a_b_x_") && valid_tool_name(&got[1].2),
        "{got:?}"
    );
    assert_eq!(m.lookup(&got[1].2), Some((&id("a"), "b_x")));
    assert_eq!(m.warnings().len(), 1, "{:?}", m.warnings());
    assert!(m.warnings()[0].contains("`a_b_x` was taken"));
    // A custom format is used as given.
    let s = Strategy {
        conflict: Conflict::Prefix,
        prefix_format: "{backend}__".into(),
        ..Strategy::default()
    };
    let m = run(Kind::Tools, &s, &plain(&[("gh", &["pr"])])).unwrap();
    assert_eq!(triples(&m), vec![t("gh", "pr", "gh__pr")]);
    let bad = Strategy {
        prefix_format: "x_".into(),
        ..Strategy::default()
    };
    assert!(matches!(
        run(Kind::Tools, &bad, &[]),
        Err(MergeError::PrefixFormat(_))
    ));
}

#[test]
fn priority_keeps_the_first_in_priority_order_and_drops_the_rest_with_warnings() {
    let input = plain(&[("a", &["x", "y"]), ("b", &["x", "z"]), ("c", &["x", "y"])]);
    let m = run(Kind::Tools, &strategy(Conflict::Priority), &input).unwrap();
    assert_eq!(
        triples(&m),
        vec![t("a", "x", "x"), t("a", "y", "y"), t("b", "z", "z")],
        "empty priority = configured order"
    );
    assert_eq!(m.warnings().len(), 3);
    assert!(m
        .warnings()
        .contains(&"tool `x` of backend `b` dropped: `a` has priority".to_owned()));
    let s = Strategy {
        conflict: Conflict::Priority,
        priority: vec![id("c"), id("b")],
        ..Strategy::default()
    };
    let m = run(Kind::Tools, &s, &input).unwrap();
    assert_eq!(
        triples(&m),
        vec![t("b", "z", "z"), t("c", "x", "x"), t("c", "y", "y")],
        "c first, b next, unlisted a last; output stays in configured order"
    );
    assert_eq!(m.lookup("x"), Some((&id("c"), "x")));
}

#[test]
fn manual_fails_listing_every_collision_until_overrides_resolve_them() {
    let input = plain(&[("a", &["x", "y"]), ("b", &["x", "y"]), ("c", &["x"])]);
    let collisions = unresolved(run(Kind::Tools, &strategy(Conflict::Manual), &input));
    assert_eq!(collisions.len(), 2);
    assert_eq!(collisions[0].name, "x");
    let who: Vec<&str> = collisions[0]
        .items
        .iter()
        .map(|(b, _)| b.as_str())
        .collect();
    assert_eq!(who, ["a", "b", "c"]);
    assert_eq!(collisions[1].name, "y");
    assert_eq!(collisions[1].items.len(), 2);
    let msg = MergeError::Unresolved(collisions).to_string();
    assert!(
        msg.contains("`x` from `a`, `b`, `c`") && msg.contains("`y`"),
        "{msg}"
    );

    let mut input = input;
    let rename = |name: &str| Override {
        name: Some(name.into()),
        ..Override::default()
    };
    input[0].1.tools.overrides.insert("x".into(), rename("a_x"));
    input[0].1.tools.overrides.insert("y".into(), rename("a_y"));
    let collisions = unresolved(run(Kind::Tools, &strategy(Conflict::Manual), &input));
    assert_eq!(collisions.len(), 1, "only b and c's x is left");
    input[1].1.tools.overrides.insert("x".into(), rename("b_x"));
    let m = run(Kind::Tools, &strategy(Conflict::Manual), &input).unwrap();
    assert_eq!(m.lookup("a_x"), Some((&id("a"), "x")));
    assert_eq!(m.lookup("x"), Some((&id("c"), "x")));
}

#[test]
fn an_override_that_makes_two_names_equal_fails_under_every_strategy() {
    for conflict in [
        Conflict::Prefix,
        Conflict::Conditional,
        Conflict::Priority,
        Conflict::Manual,
    ] {
        let mut input = plain(&[("a", &["x"]), ("b", &["y"])]);
        input[0].1.tools.overrides.insert(
            "x".into(),
            Override {
                name: Some("y".into()),
                ..Override::default()
            },
        );
        let collisions = unresolved(run(Kind::Tools, &strategy(conflict), &input));
        assert_eq!(collisions[0].name, "y", "{conflict:?}");
        assert_eq!(
            collisions[0].items,
            vec![(id("a"), "x".to_owned()), (id("b"), "y".to_owned())]
        );
    }
    // An override taking a name the prefix generates for another backend.
    let mut input = plain(&[("a", &["x"]), ("b", &["y"])]);
    input[1].1.tools.overrides.insert(
        "y".into(),
        Override {
            name: Some("a_x".into()),
            ..Override::default()
        },
    );
    let collisions = unresolved(run(Kind::Tools, &strategy(Conflict::Prefix), &input));
    assert_eq!(collisions[0].name, "a_x");
}

#[test]
fn tool_names_fit_the_64_char_rule() {
    let n63 = "a".repeat(63);
    let n64 = "b".repeat(64);
    let n65 = "c".repeat(65);
    let n200 = "d".repeat(200);
    let names = [
        n63.as_str(),
        &n64,
        &n65,
        &n200,
        "has.dot",
        "has/slash",
        "has space",
        "ünï",
        "ok-1_x",
    ];
    let m = run(Kind::Tools, &Strategy::default(), &plain(&[("a", &names)])).unwrap();
    let got = triples(&m);
    assert_eq!(got[0].2, n63);
    assert_eq!(got[1].2, n64);
    for (_, original, exposed) in &got {
        assert!(valid_tool_name(exposed), "{exposed}");
        assert_eq!(m.lookup(exposed).map(|(_, o)| o), Some(original.as_str()));
    }
    assert_eq!(got[2].2.len(), 64);
    assert!(got[2].2.starts_with(&"c".repeat(55)));
    assert_eq!(got[3].2.len(), 64);
    assert!(
        got[4].2.starts_with("has_dot_") && got[4].2.len() == 16,
        "{}",
        got[4].2
    );
    assert_eq!(got[8].2, "ok-1_x");
    // A prefix that pushes a valid 60-char name past 64 shortens it too.
    let n60 = "e".repeat(60);
    let m = run(
        Kind::Tools,
        &strategy(Conflict::Prefix),
        &plain(&[("abc", &[n60.as_str()])]),
    )
    .unwrap();
    let exposed = &m.entries()[0].exposed;
    assert!(
        exposed.starts_with("abc_eee") && exposed.len() == 64,
        "{exposed}"
    );
    // Prompts keep any name.
    let m = run(
        Kind::Prompts,
        &Strategy::default(),
        &plain(&[("a", &["has.dot", &n200])]),
    )
    .unwrap();
    assert_eq!(triples(&m)[0].2, "has.dot");
    assert_eq!(triples(&m)[1].2, n200);
}

#[test]
fn items_without_a_string_name_are_dropped_with_a_warning() {
    let items = vec![
        json!({"name": ""}),
        json!({"description": "no name"}),
        json!({"name": 7}),
        json!("not an object"),
        json!(null),
        json!({"name": "good"}),
        json!({"name": "good", "description": "again"}),
    ];
    let m = run(
        Kind::Tools,
        &Strategy::default(),
        &[("a", BackendRules::default(), items)],
    )
    .unwrap();
    assert_eq!(triples(&m), vec![t("a", "good", "good")]);
    assert_eq!(m.warnings().len(), 6, "{:?}", m.warnings());
    assert!(m.warnings()[5].contains("twice"));
}

/// Names that sanitize to the same prefix, so only the hash tells them apart.
fn same_prefix_names(n: usize) -> Vec<String> {
    ('\u{e0}'..).take(n).map(|c| format!("t{c}")).collect()
}

#[test]
fn hash_prefix_clashes_are_resolved_deterministically() {
    let names = same_prefix_names(40);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let input = plain(&[("a", &refs)]);
    // One hex digit: 16 values for 40 names, so clashes are certain.
    let m = run_hex(Kind::Tools, &Strategy::default(), &input, 1).unwrap();
    let exposed: BTreeSet<&str> = m.entries().iter().map(|e| &*e.exposed).collect();
    assert_eq!(exposed.len(), 40, "distinct inputs, distinct outputs");
    for e in m.entries() {
        assert!(valid_tool_name(&e.exposed));
        assert_eq!(m.lookup(&e.exposed), Some((&id("a"), &*e.original)));
    }
    assert!(!m.warnings().is_empty());
    let again = run_hex(Kind::Tools, &Strategy::default(), &input, 1).unwrap();
    assert_eq!(triples(&m), triples(&again));
}

#[test]
fn a_real_8_hex_clash_is_resolved() {
    // Names longer than 64 with a shared 55-char head differ only in their hash. These two
    // agree on its first 8 hex digits (found once by a birthday search over the suffix).
    let head = "h".repeat(60);
    let (a, b) = (format!("{head}60187"), format!("{head}88989"));
    let short = crate::catalog::names::shortened(&a, 0, 8);
    assert_eq!(
        short,
        crate::catalog::names::shortened(&b, 0, 8),
        "the pair must clash"
    );
    assert!(short.ends_with("_914ebd4b"), "{short}");
    let input = plain(&[("a", &[a.as_str(), b.as_str()])]);
    let m = run(Kind::Tools, &Strategy::default(), &input).unwrap();
    assert_ne!(m.entries()[0].exposed, m.entries()[1].exposed);
    assert_eq!(
        m.lookup(&m.entries()[1].exposed).map(|(_, o)| o),
        Some(b.as_str())
    );
    assert_eq!(m.warnings().len(), 1, "{:?}", m.warnings());
}

#[test]
fn a_backend_listed_twice_is_refused() {
    let input = plain(&[("a", &["x"]), ("a", &["y"])]);
    assert!(matches!(
        run(Kind::Tools, &Strategy::default(), &input),
        Err(MergeError::DuplicateBackend(_))
    ));
}

fn backends_strategy(
) -> impl proptest::strategy::Strategy<Value = (Vec<Vec<String>>, Conflict, bool)> {
    // Short names from a tiny alphabet so collisions (also with prefixed forms) are common.
    let name = "(a|b|a_b|b_a|x\\.y|a_x|[ab_.]{1,3})";
    (
        proptest::collection::vec(proptest::collection::vec(name, 0..6), 1..5),
        prop_oneof![
            Just(Conflict::Prefix),
            Just(Conflict::Conditional),
            Just(Conflict::Priority),
            Just(Conflict::Manual)
        ],
        any::<bool>(),
    )
}

fn build_input(lists: &[Vec<String>]) -> Vec<(&'static str, BackendRules, Vec<Value>)> {
    const NAMES: [&str; 4] = ["a", "b", "a_b", "c"];
    lists
        .iter()
        .enumerate()
        .map(|(i, names)| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            (NAMES[i], BackendRules::default(), tools(&refs))
        })
        .collect()
}

proptest! {
    #[test]
    fn merging_is_deterministic_unique_and_reversible(
        (lists, conflict, tools_kind) in backends_strategy(),
        seed in any::<u64>(),
    ) {
        let kind = if tools_kind { Kind::Tools } else { Kind::Prompts };
        let s = strategy(conflict);
        let input = build_input(&lists);
        let first = run(kind, &s, &input);
        let second = run(kind, &s, &input);
        // Shuffle each backend's items: names must map the same way.
        let mut shuffled = input.clone();
        for (i, (_, _, items)) in shuffled.iter_mut().enumerate() {
            let len = items.len();
            for j in 0..len {
                let k = (seed.rotate_left((i * 7 + j) as u32) as usize) % len;
                items.swap(j, k);
            }
        }
        let third = run(kind, &s, &shuffled);
        match (first, second, third) {
            (Ok(a), Ok(b), Ok(c)) => {
                prop_assert_eq!(triples(&a), triples(&b));
                prop_assert_eq!(a.warnings(), b.warnings());
                let items_a: Vec<&str> = a.entries().iter().map(|e| e.item.get()).collect();
                let items_b: Vec<&str> = b.entries().iter().map(|e| e.item.get()).collect();
                prop_assert_eq!(items_a, items_b);
                let set_a: BTreeSet<_> = triples(&a).into_iter().collect();
                let set_c: BTreeSet<_> = triples(&c).into_iter().collect();
                prop_assert_eq!(set_a, set_c);
                let mut seen = BTreeSet::new();
                for e in a.entries() {
                    prop_assert!(seen.insert(e.exposed.clone()), "duplicate {}", e.exposed);
                    if kind == Kind::Tools {
                        prop_assert!(valid_tool_name(&e.exposed), "{}", e.exposed);
                    }
                    prop_assert_eq!(a.lookup(&e.exposed), Some((&e.backend, &*e.original)));
                }
            }
            (Err(a), Err(b), Err(c)) => {
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(conflict, Conflict::Manual);
                prop_assert!(matches!(c, MergeError::Unresolved(_)));
            }
            (a, b, c) => prop_assert!(false, "differing outcomes: {:?} {:?} {:?}", a.is_ok(), b.is_ok(), c.is_ok()),
        }
    }
}
