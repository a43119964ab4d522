//! Three backends as one: the merged lists (names, order, determinism) in both eras, calls
//! routed to the backend that owns the exposed name under its original name, and a filtered
//! tool that does not exist for anyone.

use reqwest::StatusCode;
use serde_json::json;

use super::{ask, call_text, list_all, modern, names, request, tool_names, trio, Era};
use crate::common::TestGateway;

/// The fixture's tools that every backend has (so they collide and get prefixed).
const SHARED_TOOLS: [&str; 6] = [
    "echo",
    "pid",
    "instance",
    "trigger",
    "test_simple_text",
    "env",
];

#[tokio::test]
async fn three_backends_merge_their_lists_and_route_calls_under_original_names() {
    let served = trio("merge", "").await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let legacy = tool_names(gw, Era::Legacy, Some(&sid)).await;
    for base in SHARED_TOOLS {
        for backend in ["alpha", "beta", "gamma"] {
            let exposed = format!("{backend}_{base}");
            assert!(
                legacy.contains(&exposed),
                "{exposed} missing from {legacy:?}"
            );
        }
        assert!(
            !legacy.iter().any(|n| n == base),
            "{base} collides, yet is bare"
        );
    }
    // Beta's renamed `slow` is the only one of its name: bare. Its original name is gone.
    assert!(legacy.iter().any(|n| n == "beta_only_slow"), "{legacy:?}");
    assert!(!legacy
        .iter()
        .any(|n| n == "beta_slow" || n == "beta_beta_only_slow"));
    // Backends in configured order, each in its own order.
    let first_of = |b: &str| legacy.iter().position(|n| n.starts_with(b)).unwrap();
    assert!(first_of("alpha_") < first_of("beta_") && first_of("beta_") < first_of("gamma_"));
    // Deterministic: the same again, and the same list in the other era.
    let again = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert_eq!(again, legacy);
    let stateless = tool_names(gw, Era::Modern, None).await;
    assert_eq!(stateless, legacy);
    // A Modern caller may cache the list for the gateway's list TTL (5 s by default); it was
    // filtered for this caller: private.
    let listed = ask(gw, Era::Modern, None, json!("l"), "tools/list", json!({})).await;
    assert_eq!(listed["result"]["ttlMs"], 5000, "{listed}");
    assert_eq!(listed["result"]["cacheScope"], "private");

    for era in [Era::Legacy, Era::Modern] {
        routes_calls(gw, era, &sid).await;
        routes_prompts(gw, era, &sid).await;
        routes_resources(gw, era, &sid).await;
    }
}

/// Each prefixed name reaches its own backend: three processes, three answers.
async fn routes_calls(gw: &TestGateway, era: Era, sid: &str) {
    let s = (era == Era::Legacy).then_some(sid);
    let alpha = call_text(gw, era, s, "alpha_pid", json!({})).await;
    let beta = call_text(gw, era, s, "beta_pid", json!({})).await;
    let gamma = call_text(gw, era, s, "gamma_pid", json!({})).await;
    assert!(
        alpha.parse::<u32>().is_ok() && beta.parse::<u32>().is_ok(),
        "{alpha} {beta}"
    );
    assert!(
        alpha != beta && beta != gamma && alpha != gamma,
        "{alpha} {beta} {gamma}"
    );
    let instance = |n| call_text(gw, era, s, n, json!({}));
    let (a, b, g) = tokio::join!(
        instance("alpha_instance"),
        instance("beta_instance"),
        instance("gamma_instance")
    );
    assert!(a != b && b != g && a != g, "{era:?}: {a} {b} {g}");
    // Asked twice, the same backend answers (routing is by name, not by turn).
    assert_eq!(call_text(gw, era, s, "alpha_instance", json!({})).await, a);
    // The backend sees its own name: the fixture only knows `slow`, not `beta_only_slow`.
    let slept = call_text(gw, era, s, "beta_only_slow", json!({"ms": 1})).await;
    assert_eq!(slept, "slept 1");
    let echoed = call_text(gw, era, s, "gamma_echo", json!({"text": "to gamma"})).await;
    assert_eq!(echoed, "to gamma");
    result_speaks_for_the_gateway(gw, era, s).await;
}

/// A routed call's result names the virtual server, never the backend: a Modern caller gets
/// the gateway's `serverInfo`; a Legacy caller gets no Modern-only members (the reserved
/// `_meta` keys are one hop's, `resultType: complete` says nothing in Legacy), also from the
/// remote backend, which answers in Modern terms.
async fn result_speaks_for_the_gateway(gw: &TestGateway, era: Era, s: Option<&str>) {
    for tool in ["alpha_pid", "gamma_pid"] {
        let params = json!({"name": tool, "arguments": {}});
        let answer = ask(gw, era, s, json!(tool), "tools/call", params).await;
        let result = &answer["result"];
        let meta = &result["_meta"];
        match era {
            Era::Modern => {
                let info = &meta["io.modelcontextprotocol/serverInfo"];
                assert_eq!(info["name"], "switchboard", "{tool}: {answer}");
            }
            Era::Legacy => {
                assert!(result.get("resultType").is_none(), "{tool}: {answer}");
                let reserved = meta
                    .as_object()
                    .into_iter()
                    .flatten()
                    .any(|(k, _)| k.starts_with("io.modelcontextprotocol/"));
                assert!(!reserved, "{tool}: {answer}");
            }
        }
    }
}

/// `prompts/get` by prefixed name reaches gamma under the fixture's own name.
async fn routes_prompts(gw: &TestGateway, era: Era, sid: &str) {
    let s = (era == Era::Legacy).then_some(sid);
    let prompts = names(&list_all(gw, era, s, "prompts/list", "prompts").await.0);
    let name = "gamma_test_prompt_with_arguments";
    assert!(prompts.iter().any(|p| p == name), "{prompts:?}");
    let params = json!({"name": name, "arguments": {"arg1": "x", "arg2": "y"}});
    let got = ask(gw, era, s, json!("p"), "prompts/get", params).await;
    let text = &got["result"]["messages"][0]["content"]["text"];
    assert_eq!(text, "Prompt with arguments: arg1='x', arg2='y'", "{got}");
}

/// The text of the first content of `uri`.
async fn read_text(gw: &TestGateway, era: Era, s: Option<&str>, uri: &str) -> String {
    let params = json!({ "uri": uri });
    let r = ask(gw, era, s, json!("r"), "resources/read", params).await;
    r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `resources/read` by URI, which all three advertise: the first backend in configured
/// order serves it (its own state shows it was alpha); a template read routes too.
async fn routes_resources(gw: &TestGateway, era: Era, sid: &str) {
    let s = (era == Era::Legacy).then_some(sid);
    // A URI is a locator: never prefixed, listed once.
    let (resources, _) = list_all(gw, era, s, "resources/list", "resources").await;
    let watched = "test://watched-resource";
    let listed = resources.iter().filter(|r| r["uri"] == watched).count();
    assert_eq!(listed, 1, "{resources:?}");
    let before = read_text(gw, era, s, watched).await;
    // Bump beta's and gamma's version: alpha's read must not change.
    let bump = json!({"kind": "resource_updated"});
    for other in ["beta_trigger", "gamma_trigger"] {
        call_text(gw, era, s, other, bump.clone()).await;
    }
    let after = read_text(gw, era, s, watched).await;
    assert_eq!(after, before, "a read reached beta or gamma");
    call_text(gw, era, s, "alpha_trigger", bump).await;
    let bumped = read_text(gw, era, s, watched).await;
    assert_ne!(bumped, before, "a read did not reach alpha");
    let templated = read_text(gw, era, s, "test://template/42/data").await;
    assert!(templated.contains("42"), "{templated}");
}

/// The error of calling `name` in `era` (Legacy in `sid`, or sessionless), as (HTTP status,
/// the answer with `name` replaced by a placeholder): what a filtered and an unknown tool
/// must share.
async fn refusal(
    gw: &TestGateway,
    era: Era,
    sid: Option<&str>,
    name: &str,
) -> (StatusCode, String) {
    let params = json!({"name": name, "arguments": {}});
    let r = match era {
        Era::Legacy => gw.post(sid, &request(json!(7), "tools/call", params)).await,
        Era::Modern => modern(gw, json!(7), "tools/call", params, &[]).await,
    };
    let answer = r.json();
    assert!(
        answer.get("result").is_none(),
        "{name} was callable: {answer}"
    );
    (r.status, answer.to_string().replace(name, "NAME"))
}

#[tokio::test]
async fn a_filtered_tool_is_refused_like_an_unknown_one_in_both_eras() {
    let served = trio("filtered", "").await;
    let gw = &served.gw;
    let sid = gw.session().await;
    let beta_pid = call_text(gw, Era::Legacy, Some(&sid), "beta_pid", json!({})).await;
    for era in [Era::Legacy, Era::Modern] {
        let s = (era == Era::Legacy).then_some(sid.as_str());
        let listed = tool_names(gw, era, s).await;
        // Alpha's and gamma's `exit` are listed (and still collide); beta's is not.
        let has = |n: &str| listed.iter().any(|l| l == n);
        assert!(has("alpha_exit") && has("gamma_exit"), "{listed:?}");
        assert!(!has("beta_exit") && !has("exit"), "{listed:?}");
    }
    // Under its exposed name, and under its original one: both exactly "unknown", in a
    // session, sessionless, and Modern.
    let unknown = refusal(gw, Era::Legacy, Some(&sid), "nosuch").await;
    assert!(unknown.1.contains("-32602"), "{unknown:?}");
    let modern_unknown = refusal(gw, Era::Modern, None, "nosuch").await;
    for filtered in ["beta_exit", "exit"] {
        let in_session = refusal(gw, Era::Legacy, Some(&sid), filtered).await;
        assert_eq!(in_session, unknown, "Legacy {filtered}");
        let sessionless = refusal(gw, Era::Legacy, None, filtered).await;
        assert_eq!(sessionless, unknown, "sessionless {filtered}");
        let stateless = refusal(gw, Era::Modern, None, filtered).await;
        assert_eq!(stateless, modern_unknown, "Modern {filtered}");
    }
    // Nothing reached beta: the same process answers.
    let after = call_text(gw, Era::Legacy, Some(&sid), "beta_pid", json!({})).await;
    assert_eq!(after, beta_pid);
}

/// A name past the 64-character rule is shortened, and `serve` prints the mapping at startup
/// (`tool EXPOSED = BACKEND/ORIGINAL`); the printed name is the one that is listed and that
/// reaches the backend under its own name.
#[tokio::test]
async fn shortened_names_are_printed_at_startup_and_route_to_their_original() {
    let top = "aggregation: {conflictResolution: prefix, prefixFormat: \"{backend}_with_a_prefix_long_enough_to_shorten_\"}\n";
    let served = trio("shortened", top).await;
    let gw = &served.gw;
    let original = "test_input_required_result_multiple_inputs";
    let line = gw
        .startup
        .iter()
        .find(|l| {
            l.starts_with("switchboard: tool ") && l.ends_with(&format!(" = alpha/{original}"))
        })
        .unwrap_or_else(|| panic!("no mapping printed: {:#?}", gw.startup));
    let exposed = line
        .strip_prefix("switchboard: tool ")
        .and_then(|r| r.split(' ').next())
        .unwrap();
    assert!(exposed.len() <= 64 && exposed.len() > 50, "{exposed}");
    assert!(exposed
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    // Not in `/status`: the full mapping names tools a caller's policy may hide from it.
    let sid = gw.session().await;
    let listed = tool_names(gw, Era::Legacy, Some(&sid)).await;
    assert!(listed.iter().any(|n| n == exposed), "{listed:?}");
    // `echo` is short enough to keep its prefixed name; it reaches alpha as `echo`.
    let echo = "alpha_with_a_prefix_long_enough_to_shorten_echo";
    let text = call_text(gw, Era::Legacy, Some(&sid), echo, json!({"text": "hi"})).await;
    assert_eq!(text, "hi");
}
