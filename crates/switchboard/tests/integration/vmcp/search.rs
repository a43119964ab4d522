//! Tool search (`aggregation.toolSearch: on`) over a large catalog: 300 tools from three
//! backends (`backends/catalog.py`), listed as `find_tools` and `call_tool` in both eras;
//! `find_tools` ranks the relevant tools first and shows only what the caller may call;
//! `call_tool` refuses a forbidden name with the answer an unknown name gets.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{modern, request, serve, Era, Served};
use crate::common::{Reply, TestGateway};

const ALICE: &str = "alice-search-key-0123456789ab";
const ADMIN: &str = "admin-search-key-0123456789ab";

/// Alice may list tools and call any tool except the `comms` backend's.
const POLICY: &str = r#"
permit(principal == ApiKey::"admin", action, resource);
permit(principal == ApiKey::"alice", action == Action::"list_tools", resource);
permit(principal == ApiKey::"alice", action == Action::"call_tool", resource)
  when { resource has backend && resource.backend != "comms" };
"#;

fn catalog(name: &str) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/backends/catalog.py"
    );
    format!("  - name: {name}\n    command: python3\n    args: [{script}, {name}]\n")
}

/// `serve` with the three 100-tool catalogs and tool search on; `top` adds settings.
async fn searchable(name: &str, top: &str) -> Served {
    let dir = super::Dir::new(name);
    let policy = dir.write("policy.cedar", POLICY);
    let top = top.replace("POLICY", &policy.display().to_string());
    let yaml = format!(
        "aggregation: {{toolSearch: on}}\n{top}backends:\n{}{}{}",
        catalog("code"),
        catalog("comms"),
        catalog("data")
    );
    let mut served = serve(name, &yaml, None).await;
    served._dir = dir;
    served
}

/// One request in `era` with `extra` headers (Legacy: in `session`).
async fn post(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    (method, params): (&str, Value),
    extra: &[(&str, &str)],
) -> Reply {
    match era {
        Era::Legacy => {
            let body = request(json!(7), method, params);
            gw.post_raw(session, body.to_string(), extra).await
        }
        Era::Modern => modern(gw, json!(7), method, params, extra).await,
    }
}

/// A Legacy session opened with `extra` headers.
async fn session(gw: &TestGateway, extra: &[(&str, &str)]) -> String {
    let init = request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "it", "version": "0"}}),
    );
    let r = gw.post_raw(None, init.to_string(), extra).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sid = r.headers["mcp-session-id"].to_str().unwrap().to_owned();
    let done = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let r = gw.post_raw(Some(&sid), done.to_string(), extra).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    sid
}

/// The names `find_tools` returns for `query`, best first.
async fn found(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    query: &str,
    limit: u64,
    extra: &[(&str, &str)],
) -> Vec<String> {
    let args = json!({"name": "find_tools", "arguments": {"query": query, "limit": limit}});
    let r = post(gw, era, session, ("tools/call", args), extra).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let result = &r.json()["result"];
    assert_ne!(result["isError"], json!(true), "{result}");
    let tools = result["structuredContent"]["tools"].as_array().unwrap();
    // Each one is a whole definition a client can call from.
    for t in tools {
        assert!(
            t["inputSchema"].is_object() && t["description"].is_string(),
            "{t}"
        );
    }
    // The text content carries the same list, for clients that read only text.
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, &result["structuredContent"]["tools"]);
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn names(list: &Reply) -> Vec<String> {
    list.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn find_tools_ranks_the_relevant_tools_of_300_first_in_both_eras() {
    let served = searchable("search-rank", "").await;
    let gw = &served.gw;
    let sid = session(gw, &[]).await;
    for (era, session) in [(Era::Legacy, Some(sid.as_str())), (Era::Modern, None)] {
        let list = post(gw, era, session, ("tools/list", json!({})), &[]).await;
        assert_eq!(names(&list), ["find_tools", "call_tool"], "{era:?}");
        let cases = [
            ("create a pull request", "create_pull_request"),
            ("send an email to a colleague", "send_email"),
            ("delete rows from a database table", "delete_row"),
            ("restore a snapshot", "restore_snapshot"),
            ("schedule a meeting", "schedule_meeting"),
        ];
        for (query, best) in cases {
            let hits = found(gw, era, session, query, 5, &[]).await;
            assert_eq!(
                hits.first().map(String::as_str),
                Some(best),
                "{era:?} {query}: {hits:?}"
            );
            assert!(hits.len() <= 5, "{hits:?}");
        }
        // All three catalogs are indexed: every backend's ten `export_*` tools are found.
        let exports = found(gw, era, session, "export", 50, &[]).await;
        assert_eq!(exports.len(), 30, "{exports:?}");
        assert!(
            exports.iter().all(|n| n.starts_with("export_")),
            "{exports:?}"
        );
        assert!(found(gw, era, session, "quantum teleportation", 5, &[])
            .await
            .is_empty());
    }
}

#[tokio::test]
async fn call_tool_reaches_the_named_tool_in_both_eras() {
    let served = searchable("search-call", "").await;
    let gw = &served.gw;
    let sid = session(gw, &[]).await;
    for (era, session) in [(Era::Legacy, Some(sid.as_str())), (Era::Modern, None)] {
        for (tool, backend) in [
            ("send_email", "comms"),
            ("merge_branch", ""),
            ("backup_table", "data"),
        ] {
            let args = json!({"name": "call_tool", "arguments": {"name": tool, "arguments": {}}});
            let r = post(gw, era, session, ("tools/call", args), &[]).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            let v = r.json();
            if backend.is_empty() {
                // Not in any catalog: the unknown-tool answer.
                assert_eq!(v["error"]["code"], -32602, "{v}");
                continue;
            }
            let text = v["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert_eq!(text, format!("{tool} from {backend}"), "{era:?}: {v}");
        }
    }
}

/// The error of `call_tool` for `tool` as `key`'s holder, with the tool's name masked.
async fn refusal(
    gw: &TestGateway,
    era: Era,
    session: Option<&str>,
    key: &str,
    tool: &str,
) -> (StatusCode, Value) {
    let auth = format!("Bearer {key}");
    let args = json!({"name": "call_tool", "arguments": {"name": tool, "arguments": {}}});
    let r = post(
        gw,
        era,
        session,
        ("tools/call", args),
        &[("authorization", &auth)],
    )
    .await;
    let mut v = r.json();
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .replace(tool, "NAME");
    v["error"]["message"] = json!(message);
    (r.status, v)
}

#[tokio::test]
async fn find_tools_hides_and_call_tool_refuses_what_policy_forbids() {
    let top = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: admin, key: {ADMIN}}}\npolicy: {{file: POLICY}}\n"
    );
    let served = searchable("search-policy", &top).await;
    let gw = &served.gw;
    let (alice, admin) = (format!("Bearer {ALICE}"), format!("Bearer {ADMIN}"));
    let as_alice = [("authorization", alice.as_str())];
    let as_admin = [("authorization", admin.as_str())];
    let alice_sid = session(gw, &as_alice).await;
    let admin_sid = session(gw, &as_admin).await;
    for (era, a, b) in [
        (
            Era::Legacy,
            Some(alice_sid.as_str()),
            Some(admin_sid.as_str()),
        ),
        (Era::Modern, None, None),
    ] {
        // Alice lists the two tools (she may list tools), and finds no comms tool.
        let list = post(gw, era, a, ("tools/list", json!({})), &as_alice).await;
        assert_eq!(names(&list), ["find_tools", "call_tool"], "{era:?}");
        let comms = [
            "send_email",
            "forward_email",
            "archive_email",
            "schedule_meeting",
        ];
        let hits = found(gw, era, a, "send an email", 50, &as_alice).await;
        assert!(
            hits.iter().all(|h| !comms.contains(&h.as_str())),
            "{era:?}: {hits:?}"
        );
        assert!(
            !hits.iter().any(|h| h.ends_with("_email")),
            "{era:?}: {hits:?}"
        );
        // The admin does find them.
        let hits = found(gw, era, b, "send an email", 5, &as_admin).await;
        assert_eq!(
            hits.first().map(String::as_str),
            Some("send_email"),
            "{hits:?}"
        );
        // A forbidden name and a name no backend has get the same answer.
        let forbidden = refusal(gw, era, a, ALICE, "send_email").await;
        let unknown = refusal(gw, era, a, ALICE, "send_telegram").await;
        assert_eq!(forbidden, unknown, "{era:?}");
        assert_eq!(forbidden.1["error"]["code"], -32602, "{forbidden:?}");
        // What she may call, she calls.
        let args =
            json!({"name": "call_tool", "arguments": {"name": "delete_row", "arguments": {}}});
        let r = post(gw, era, a, ("tools/call", args), &as_alice).await;
        assert_eq!(
            r.json()["result"]["content"][0]["text"],
            "delete_row from data",
            "{}",
            r.text
        );
    }
}

#[tokio::test]
async fn a_forbidden_tool_looks_missing_to_direct_calls_and_rate_limits_too() {
    let top = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: admin, key: {ADMIN}}}\npolicy: {{file: POLICY}}\nlimits: {{rateLimit: 3/m}}\n"
    );
    let served = searchable("search-masked", &top).await;
    let gw = &served.gw;
    let alice = format!("Bearer {ALICE}");
    let as_alice = [("authorization", alice.as_str())];
    let sid = session(gw, &as_alice).await;
    // A direct call of a forbidden tool: the unknown-tool answer, not a 403.
    let direct = |tool: &'static str| {
        let params = json!({"name": tool, "arguments": {}});
        post(
            gw,
            Era::Legacy,
            Some(&sid),
            ("tools/call", params),
            &as_alice,
        )
    };
    let forbidden = direct("send_email").await;
    assert_eq!(forbidden.status, StatusCode::OK, "{}", forbidden.text);
    let masked = forbidden.text.replace("send_email", "NAME");
    let unknown = direct("send_telegram").await;
    assert_eq!(masked, unknown.text.replace("send_telegram", "NAME"));
    // Two of three calls spent (one forbidden, one unknown): the forbidden one counted as
    // an unknown one does, so after one more the budget is gone for both.
    let _ = direct("send_email").await;
    let limited = direct("send_telegram").await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.text
    );
    let limited = direct("send_email").await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.text
    );
}

/// Composites sit in the catalog like any tool: `find_tools` finds them by their description,
/// and `call_tool` runs them (each step as the caller).
#[tokio::test]
async fn find_tools_finds_composites_and_call_tool_runs_them() {
    let top = r#"compositeTools:
  - name: onboard_engineer
    description: Onboards a newly hired engineer by sending a welcome email (composite)
    inputSchema: {type: object, properties: {}}
    steps:
      - id: mail
        type: tool
        tool: comms.send_email
        arguments: {}
"#;
    let served = searchable("search-composite", top).await;
    let gw = &served.gw;
    let sid = session(gw, &[]).await;
    for (era, session) in [(Era::Legacy, Some(sid.as_str())), (Era::Modern, None)] {
        let hits = found(gw, era, session, "onboard a newly hired engineer", 3, &[]).await;
        assert_eq!(
            hits.first().map(String::as_str),
            Some("onboard_engineer"),
            "{era:?}: {hits:?}"
        );
        let args = json!({"name": "call_tool",
            "arguments": {"name": "onboard_engineer", "arguments": {}}});
        let r = post(gw, era, session, ("tools/call", args), &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let v = r.json();
        assert!(v["result"].is_object(), "{era:?}: {v}");
        assert_ne!(v["result"]["isError"], json!(true), "{era:?}: {v}");
        assert!(
            v["result"].to_string().contains("send_email from comms"),
            "{v}"
        );
    }
}

/// Under a policy, `find_tools` shows a composite exactly as `tools/list` would: to whom the
/// policy lets call it (judged without a backend, as its call is), and to nobody else.
#[tokio::test]
async fn find_tools_shows_a_composite_to_whom_the_policy_lets_call_it() {
    let top = format!(
        "auth:\n  apiKeys:\n    - {{name: alice, key: {ALICE}}}\n    - {{name: admin, key: {ADMIN}}}\npolicy: {{file: POLICY}}\ncompositeTools:
  - name: onboard_engineer
    description: Onboards a newly hired engineer by sending a welcome email (composite)
    inputSchema: {{type: object, properties: {{}}}}
    steps:
      - id: mail
        type: tool
        tool: data.get_row
        arguments: {{}}
"
    );
    let served = searchable("search-composite-policy", &top).await;
    let gw = &served.gw;
    let (alice, admin) = (format!("Bearer {ALICE}"), format!("Bearer {ADMIN}"));
    let as_alice = [("authorization", alice.as_str())];
    let as_admin = [("authorization", admin.as_str())];
    let query = "onboard a newly hired engineer";
    let admin_sid = session(gw, &as_admin).await;
    let alice_sid = session(gw, &as_alice).await;
    for (era, admin_s, alice_s) in [
        (
            Era::Legacy,
            Some(admin_sid.as_str()),
            Some(alice_sid.as_str()),
        ),
        (Era::Modern, None, None),
    ] {
        let hits = found(gw, era, admin_s, query, 3, &as_admin).await;
        assert_eq!(
            hits.first().map(String::as_str),
            Some("onboard_engineer"),
            "{era:?}: {hits:?}"
        );
        // Alice may call only tools served by a backend other than comms: not a composite.
        let hits = found(gw, era, alice_s, query, 10, &as_alice).await;
        assert!(
            !hits.iter().any(|h| h == "onboard_engineer"),
            "{era:?}: {hits:?}"
        );
    }
}
